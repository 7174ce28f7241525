//! Hostile inputs that tests/validation.rs and tests/cli.rs do not cover: broken safetensors files (truncated,
//! oversized or non-JSON headers, offsets past the end, shapes that disagree with their bytes, other dtypes, a
//! directory), absurd sizes whose element or byte counts overflow, sizes past the GPU kernels' 32-bit index
//! range, zero-sized dimensions, a missing adapter, bad environment settings and garbage flags. Each test asserts
//! the specific error (the typed variant and the values its message names; for the CLI the exact `error:` line and
//! exit code 2). docs/RELIABILITY.md catalogues them.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use convt::gpu::{GpuOptions, Strategy};
use convt::io::{save_tensors, TensorFile};
use convt::MAX_TENSOR_BYTES;
use convt::{ConvTranspose2dOptions, ConvtError, GpuContext, GpuTensor, Tensor};

// ---------------------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------------------

fn p() -> ConvTranspose2dOptions {
    ConvTranspose2dOptions::default()
}

fn rand(shape: &[usize], seed: u64) -> Tensor {
    Tensor::uniform(shape.to_vec(), -1.0, 1.0, seed).unwrap()
}

/// Asserts that the error's message contains every one of `parts`.
#[track_caller]
fn assert_message(e: &ConvtError, parts: &[&str]) {
    let msg = e.to_string();
    for part in parts {
        assert!(msg.contains(part), "message {msg:?} should mention {part:?} (error: {e:?})");
    }
}

/// A safetensors file from its parts: the 8-byte little-endian header length, the header, the data.
fn raw_file(header_len: u64, header: &[u8], data: &[u8]) -> Vec<u8> {
    let mut v = header_len.to_le_bytes().to_vec();
    v.extend_from_slice(header);
    v.extend_from_slice(data);
    v
}

/// A file whose header length is the header's own.
fn file_with(header: &str, data: &[u8]) -> Vec<u8> {
    raw_file(header.len() as u64, header.as_bytes(), data)
}

/// The bytes of a valid file holding `tensors` (written by the library itself).
fn valid_file(dir: &common::TempDir, tensors: &[(&str, &Tensor)]) -> Vec<u8> {
    let path = dir.path("valid.safetensors");
    save_tensors(&path, tensors, None).unwrap();
    std::fs::read(&path).unwrap()
}

/// The header length a file starts with.
fn header_len(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes[..8].try_into().unwrap())
}

/// Writes `bytes` to `dir/name` and returns the reader's error for it; panics if the file is accepted.
fn load_err(dir: &common::TempDir, name: &str, bytes: &[u8]) -> (PathBuf, ConvtError) {
    let path = dir.path(name);
    std::fs::write(&path, bytes).unwrap();
    match TensorFile::load(&path) {
        Ok(f) => panic!("{name} was accepted: {:?}", f.names().collect::<Vec<_>>()),
        Err(e) => (path, e),
    }
}

/// The `TensorFile` error's message (after the path), asserting the variant and the path.
#[track_caller]
fn tensor_file_message(path: &Path, e: &ConvtError) -> String {
    match e {
        ConvtError::TensorFile { path: p, message } if p == path => {
            assert_eq!(e.to_string(), format!("{}: not a valid safetensors file: {message}", path.display()));
            message.clone()
        }
        _ => panic!("expected a TensorFile error for {}, got {e:?}", path.display()),
    }
}

/// The bytes of a tensor of `dtype` (any values: only the size matters) written by the safetensors crate.
fn file_of_dtype(dtype: safetensors::Dtype, name: &str, shape: &[usize]) -> Vec<u8> {
    let n: usize = shape.iter().product();
    let data = vec![0u8; n * dtype.bitsize() / 8];
    let view = safetensors::tensor::TensorView::new(dtype, shape.to_vec(), &data).unwrap();
    safetensors::serialize([(name, view)], None).unwrap()
}

/// A context whose storage bindings hold at most 1 MiB: a plane larger than that is refused before allocation.
fn capped_ctx() -> GpuContext {
    common::ctx_with_binding_limit(1 << 20, None)
}

// ---------------------------------------------------------------------------------------------------------
// Safetensors files: the header
// ---------------------------------------------------------------------------------------------------------

#[test]
fn empty_file_names_its_length() {
    let dir = common::TempDir::new("empty");
    let (path, e) = load_err(&dir, "empty.safetensors", &[]);
    assert_eq!(
        tensor_file_message(&path, &e),
        "the file is 0 bytes long, too short for the 8-byte header length a safetensors file starts with"
    );
    let (path, e) = load_err(&dir, "seven.safetensors", &[1, 0, 0, 0, 0, 0, 0]);
    assert!(tensor_file_message(&path, &e).starts_with("the file is 7 bytes long"), "{e}");
}

#[test]
fn truncated_header_names_the_header_length_and_what_follows() {
    let dir = common::TempDir::new("trunc-header");
    let bytes = valid_file(&dir, &[("weight", &rand(&[4, 2, 3, 3], 1))]);
    let n = header_len(&bytes);
    // Cut in the middle of the JSON header.
    let cut = 8 + n as usize / 2;
    let (path, e) = load_err(&dir, "cut.safetensors", &bytes[..cut]);
    assert_eq!(
        tensor_file_message(&path, &e),
        format!("the header length (the first 8 bytes) is {n} bytes, but only {} bytes follow it", n / 2)
    );
    // Only the length prefix.
    let (path, e) = load_err(&dir, "prefix.safetensors", &bytes[..8]);
    assert_eq!(
        tensor_file_message(&path, &e),
        format!("the header length (the first 8 bytes) is {n} bytes, but only 0 bytes follow it")
    );
}

#[test]
fn header_length_larger_than_the_file_is_rejected() {
    let dir = common::TempDir::new("long-prefix");
    let bytes = valid_file(&dir, &[("input", &rand(&[1, 2, 3, 3], 1))]);
    let claimed = bytes.len() as u64 + 1000;
    let mut edited = bytes.clone();
    edited[..8].copy_from_slice(&claimed.to_le_bytes());
    let (path, e) = load_err(&dir, "long.safetensors", &edited);
    assert_eq!(
        tensor_file_message(&path, &e),
        format!(
            "the header length (the first 8 bytes) is {claimed} bytes, but only {} bytes follow it",
            bytes.len() - 8
        )
    );
}

#[test]
fn oversized_header_length_is_rejected_without_reading_it() {
    let dir = common::TempDir::new("huge-prefix");
    for claimed in [100_000_001u64, 1 << 40, u64::MAX] {
        let (path, e) = load_err(&dir, "huge.safetensors", &raw_file(claimed, b"{}", &[]));
        assert_eq!(
            tensor_file_message(&path, &e),
            format!(
                "the header length (the first 8 bytes) is {claimed} bytes, more than the 100000000 bytes safetensors \
                 allows"
            )
        );
    }
}

#[test]
fn header_that_is_not_json_is_rejected() {
    let dir = common::TempDir::new("not-json");
    let (path, e) = load_err(&dir, "text.safetensors", &file_with("{this is not json", &[]));
    let m = tensor_file_message(&path, &e);
    assert!(m.starts_with("the 17-byte header is not a safetensors JSON header: "), "{m}");

    // JSON, but not a map of tensors.
    let (path, e) = load_err(&dir, "array.safetensors", &file_with("[1, 2, 3]", &[]));
    assert!(tensor_file_message(&path, &e).starts_with("the 9-byte header is not a safetensors JSON header"), "{e}");
    let (path, e) = load_err(&dir, "field.safetensors", &file_with(r#"{"x": {"dtype": "F32"}}"#, &[]));
    let m = tensor_file_message(&path, &e);
    assert!(m.contains("missing field `shape`"), "{m}");
    // Metadata values must be strings.
    let (path, e) = load_err(&dir, "meta.safetensors", &file_with(r#"{"__metadata__": {"epoch": 3}}"#, &[]));
    assert!(tensor_file_message(&path, &e).contains("not a safetensors JSON header"), "{e}");
}

#[test]
fn header_that_is_not_utf8_is_rejected() {
    let dir = common::TempDir::new("utf8");
    let (path, e) = load_err(&dir, "latin1.safetensors", &raw_file(4, &[b'{', 0xff, 0xfe, b'}'], &[]));
    let m = tensor_file_message(&path, &e);
    assert!(m.starts_with("the 4-byte header is not UTF-8: invalid utf-8 sequence"), "{m}");
}

#[test]
fn unknown_dtype_name_is_rejected_naming_it() {
    let dir = common::TempDir::new("dtype-name");
    let header = r#"{"w": {"dtype": "F99", "shape": [1], "data_offsets": [0, 4]}}"#;
    let (path, e) = load_err(&dir, "f99.safetensors", &file_with(header, &[0; 4]));
    let m = tensor_file_message(&path, &e);
    assert!(m.contains("unknown variant `F99`"), "{m}");
}

// ---------------------------------------------------------------------------------------------------------
// Safetensors files: offsets, shapes and data
// ---------------------------------------------------------------------------------------------------------

#[test]
fn data_offsets_past_the_end_of_the_file_are_rejected() {
    let dir = common::TempDir::new("offsets-past");
    // 100 floats declared, 16 bytes present.
    let header = r#"{"w": {"dtype": "F32", "shape": [100], "data_offsets": [0, 400]}}"#;
    let (path, e) = load_err(&dir, "past.safetensors", &file_with(header, &[0; 16]));
    assert_eq!(
        tensor_file_message(&path, &e),
        "the tensors' data_offsets reach byte 400 of the data section, but the file holds only 16 bytes of data \
         (truncated?)"
    );

    // A valid file with its last 10 bytes cut off says the same, with its own numbers.
    let bytes = valid_file(&dir, &[("input", &rand(&[2, 3, 4, 4], 1))]);
    let data_len = bytes.len() - 8 - header_len(&bytes) as usize;
    let (path, e) = load_err(&dir, "cut.safetensors", &bytes[..bytes.len() - 10]);
    assert_eq!(
        tensor_file_message(&path, &e),
        format!(
            "the tensors' data_offsets reach byte {data_len} of the data section, but the file holds only {} bytes of \
             data (truncated?)",
            data_len - 10
        )
    );
}

#[test]
fn bytes_after_the_last_tensor_are_rejected() {
    let dir = common::TempDir::new("trailing");
    let bytes = valid_file(&dir, &[("input", &rand(&[1, 1, 2, 2], 1))]);
    let mut padded = bytes.clone();
    padded.extend_from_slice(&[0; 12]);
    let (path, e) = load_err(&dir, "padded.safetensors", &padded);
    assert_eq!(
        tensor_file_message(&path, &e),
        "the tensors' data ends at byte 16 of the data section, but the file holds 28 bytes of data (12 bytes too many)"
    );
}

#[test]
fn shape_that_disagrees_with_the_byte_length_is_rejected() {
    let dir = common::TempDir::new("shape-bytes");
    // [2, 3] f32 is 24 bytes; the offsets give 20.
    let header = r#"{"weight": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}}"#;
    let (path, e) = load_err(&dir, "short.safetensors", &file_with(header, &[0; 20]));
    assert_eq!(
        tensor_file_message(&path, &e),
        "tensor `weight` (F32, shape [2, 3]) needs 24 bytes, but its data_offsets [0, 20] span 20"
    );
    // Too many bytes for the shape, on the second of two tensors.
    let header = r#"{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                     "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 16]}}"#;
    let (path, e) = load_err(&dir, "long.safetensors", &file_with(header, &[0; 16]));
    assert_eq!(
        tensor_file_message(&path, &e),
        "tensor `b` (F32, shape [2]) needs 8 bytes, but its data_offsets [4, 16] span 12"
    );
}

#[test]
fn shape_whose_byte_count_overflows_is_rejected() {
    let dir = common::TempDir::new("shape-overflow");
    let big = 1u64 << 62;
    let header = format!(r#"{{"w": {{"dtype": "F32", "shape": [{big}, {big}], "data_offsets": [0, 0]}}}}"#);
    let (path, e) = load_err(&dir, "overflow.safetensors", &file_with(&header, &[]));
    assert_eq!(
        tensor_file_message(&path, &e),
        format!("tensor `w` (F32, shape [{big}, {big}]) has a byte size that overflows")
    );
}

#[test]
fn overlapping_gapped_or_reversed_offsets_are_rejected() {
    let dir = common::TempDir::new("offsets");
    let cases = [
        // A gap of 4 bytes between the tensors.
        (
            r#"{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [2], "data_offsets": [12, 20]}}"#,
            "tensor `b` has data_offsets [12, 20], but its data must start at byte 8",
        ),
        // Overlapping tensors.
        (
            r#"{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [3], "data_offsets": [4, 16]}}"#,
            "tensor `b` has data_offsets [4, 16], but its data must start at byte 8",
        ),
        // Not starting at 0.
        (
            r#"{"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}"#,
            "tensor `a` has data_offsets [4, 8], but its data must start at byte 0",
        ),
        // End before start.
        (
            r#"{"a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]},
                "b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                "c": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}"#,
            "tensor `c` has data_offsets [4, 0]",
        ),
    ];
    for (i, (header, expected)) in cases.iter().enumerate() {
        let (path, e) = load_err(&dir, &format!("case{i}.safetensors"), &file_with(header, &[0; 20]));
        let m = tensor_file_message(&path, &e);
        assert!(m.starts_with(expected), "case {i}: {m}");
    }
}

#[test]
fn duplicate_tensor_names_in_a_header_are_rejected() {
    // JSON maps may repeat a key; the reader must not silently pick one of the two tensors.
    let dir = common::TempDir::new("duplicate");
    let header = r#"{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                     "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}"#;
    let (path, e) = load_err(&dir, "dup.safetensors", &file_with(header, &[0; 8]));
    assert_eq!(tensor_file_message(&path, &e), "the header names tensor `w` more than once");
    // Even when both entries describe the same bytes (which the reader alone would accept as one tensor).
    let header = r#"{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                     "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}"#;
    let (path, e) = load_err(&dir, "same.safetensors", &file_with(header, &[0; 4]));
    assert_eq!(tensor_file_message(&path, &e), "the header names tensor `w` more than once");
}

// ---------------------------------------------------------------------------------------------------------
// Safetensors files: dtypes (F32, F16, BF16 only) and the file itself
// ---------------------------------------------------------------------------------------------------------

/// Files holding tensors of dtypes convt does not compute with open; such a tensor is a DType error naming the
/// tensor and its dtype when asked for by name (a model's state_dict holds integer counters beside its weights).
#[test]
fn other_dtypes_are_dtype_errors_naming_the_tensor_and_dtype_when_read() {
    use safetensors::Dtype;
    let dir = common::TempDir::new("precision");
    for (dtype, name) in [
        (Dtype::I32, "I32"),
        (Dtype::I64, "I64"),
        (Dtype::U8, "U8"),
        (Dtype::BOOL, "BOOL"),
        (Dtype::F8_E8M0, "F8_E8M0"),
        (Dtype::F4, "F4"),
    ] {
        let path = dir.path(&format!("{name}.safetensors"));
        std::fs::write(&path, file_of_dtype(dtype, "weight", &[4, 2, 3, 2])).unwrap();
        let file = TensorFile::load(&path).unwrap();
        assert_eq!(file.dtype("weight"), None, "{name}");
        let e = file.get("weight").unwrap_err();
        assert!(
            matches!(&e, ConvtError::DType { path: p, name: n, dtype: d } if *p == path && n == "weight" && d == name),
            "{name}: {e:?}"
        );
        assert_eq!(
            e.to_string(),
            format!(
                "{}: tensor `weight` has dtype {name}, but convt reads float tensors only (F32, F16, BF16; F64, \
                 F8_E4M3 and F8_E5M2 as f32)",
                path.display()
            )
        );
    }
}

/// F64 and PyTorch's float8 tensors read as f32: F64 rounded to nearest, float8 exactly.
#[test]
fn f64_and_float8_tensors_read_as_f32() {
    use safetensors::tensor::TensorView;
    use safetensors::Dtype;
    let dir = common::TempDir::new("float-dtypes");
    let doubles = [1.0f64, -2.5, 1.0 + f64::EPSILON, 1e300, f64::NAN, 1.0 / 3.0];
    let f64_bytes: Vec<u8> = doubles.iter().flat_map(|v| v.to_le_bytes()).collect();
    // float8_e4m3fn: 1.0, the largest (448), the smallest subnormal (2^-9), -0.0, NaN, 0.875 (subnormal-adjacent).
    let e4m3 = [0x38u8, 0x7e, 0x01, 0x80, 0x7f, 0x36];
    // float8_e5m2: the high byte of an f16: 1.0, 57344 (largest finite), inf, 2^-16 (smallest subnormal), -2.0, NaN.
    let e5m2 = [0x3cu8, 0x7b, 0x7c, 0x01, 0xc0, 0x7e];
    let views = vec![
        ("d", TensorView::new(Dtype::F64, vec![2, 3], &f64_bytes).unwrap()),
        ("e4m3", TensorView::new(Dtype::F8_E4M3, vec![6], &e4m3).unwrap()),
        ("e5m2", TensorView::new(Dtype::F8_E5M2, vec![6], &e5m2).unwrap()),
        ("num_batches_tracked", TensorView::new(Dtype::I64, vec![], &[7u8, 0, 0, 0, 0, 0, 0, 0]).unwrap()),
    ];
    let path = dir.path("floats.safetensors");
    std::fs::write(&path, safetensors::serialize(views, None).unwrap()).unwrap();
    let file = TensorFile::load(&path).unwrap();
    let bits = |t: &Tensor| t.data().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let d = file.get("d").unwrap();
    assert_eq!((d.shape(), d.dtype()), (&[2usize, 3][..], convt::DType::F32));
    let want: Vec<f32> = vec![1.0, -2.5, 1.0, f32::INFINITY, f32::NAN, 1.0 / 3.0];
    assert_eq!(bits(&d)[..4], bits(&Tensor::new(vec![6], want.clone()).unwrap())[..4]);
    assert!(d.data()[4].is_nan());
    assert_eq!(d.data()[5], want[5]);
    let e4 = file.get("e4m3").unwrap();
    assert_eq!(e4.data()[..4], [1.0, 448.0, 2f32.powi(-9), -0.0]);
    assert!(e4.data()[3].is_sign_negative() && e4.data()[4].is_nan());
    assert_eq!(e4.data()[5], 0.875);
    let e5 = file.get("e5m2").unwrap();
    assert_eq!(e5.data()[..5], [1.0, 57344.0, f32::INFINITY, 2f32.powi(-16), -2.0]);
    assert!(e5.data()[5].is_nan());
    assert_eq!(file.dtype("d"), Some(convt::DType::F32));
    assert!(matches!(file.get("num_batches_tracked"), Err(ConvtError::DType { .. })));
}

#[test]
fn directory_instead_of_a_file_is_an_io_error() {
    let dir = common::TempDir::new("dir");
    let path = dir.path("a-directory.safetensors");
    std::fs::create_dir(&path).unwrap();
    let e = TensorFile::load(&path).unwrap_err();
    assert!(
        matches!(&e, ConvtError::Io { path: p, source } if *p == path && source.kind() == std::io::ErrorKind::IsADirectory),
        "{e:?}"
    );
    assert_eq!(e.to_string(), format!("{}: Is a directory (os error 21)", path.display()));
}

#[test]
fn zero_sized_tensors_in_a_file_round_trip() {
    // Not an error in the file: an empty tensor is valid safetensors; the convolution then rejects it.
    let dir = common::TempDir::new("zero-file");
    let empty = Tensor::zeros(vec![4, 0, 3, 3]).unwrap();
    let path = dir.path("empty.safetensors");
    save_tensors(&path, &[("weight", &empty)], None).unwrap();
    let file = TensorFile::load(&path).unwrap();
    assert_eq!(file.get("weight").unwrap(), empty);
}

// ---------------------------------------------------------------------------------------------------------
// Absurd sizes
// ---------------------------------------------------------------------------------------------------------

#[test]
fn host_tensors_over_isize_max_bytes_are_size_overflow_not_a_panic() {
    // 2^61 floats are 2^63 bytes: the count fits in usize and its byte count in u64, but no allocation can hold
    // it (Rust caps them at isize::MAX bytes; a Vec asked for more panics with "capacity overflow").
    let limit_elems = MAX_TENSOR_BYTES / 4;
    for shape in [vec![1usize << 61], vec![limit_elems + 1], vec![1 << 31, 1 << 30], vec![usize::MAX / 2, 4, 1, 1]] {
        let e = Tensor::zeros(shape.clone()).unwrap_err();
        assert!(matches!(&e, ConvtError::SizeOverflow { shape: s } if *s == shape), "{shape:?}: {e:?}");
        assert_eq!(
            e.to_string(),
            format!("tensor of size {shape:?} has too many elements to address (more than isize::MAX bytes of f32)")
        );
        let e = Tensor::uniform(shape.clone(), 0.0, 1.0, 0).unwrap_err();
        assert!(matches!(&e, ConvtError::SizeOverflow { shape: s } if *s == shape), "{shape:?}: {e:?}");
        let e = Tensor::new(shape.clone(), vec![0.0; 3]).unwrap_err();
        assert!(matches!(&e, ConvtError::SizeOverflow { shape: s } if *s == shape), "{shape:?}: {e:?}");
    }
    // Just at the limit the count is accepted (checked without allocating).
    assert_eq!(convt::checked_numel(&[limit_elems]).unwrap(), limit_elems);
}

#[test]
fn resolve_rejects_inputs_and_weights_whose_byte_count_overflows() {
    // [usize::MAX / 2, 4, 1, 1]: the element count overflows usize.
    let input = [usize::MAX / 2, 4, 1, 1];
    let e = p().resolve(&input, &[4, 2, 1, 1], None).unwrap_err();
    assert!(matches!(&e, ConvtError::SizeOverflow { shape } if shape == &input), "{e:?}");
    // [2^30, 2^30, 2, 1]: 2^61 elements fit, 2^63 bytes do not.
    let input = [1 << 30, 1 << 30, 2, 1];
    let e = p().resolve(&input, &[1 << 30, 1, 1, 1], None).unwrap_err();
    assert!(matches!(&e, ConvtError::SizeOverflow { shape } if shape == &input), "{e:?}");
    // A weight whose element count overflows, with a small input.
    let weight = [1, 1, usize::MAX / 2, 3];
    let e = p().padding([i64::MAX / 2, 0]).resolve(&[1, 1, 1, 1], &weight, None).unwrap_err();
    assert!(matches!(&e, ConvtError::SizeOverflow { shape } if shape == &weight), "{e:?}");
}

#[test]
fn empty_batch_of_unaddressable_samples_is_size_overflow() {
    // Zero samples hold zero elements, but each sample (and its 2^62 x 4 planes) is still too large to address:
    // every backend works per sample and per plane. Found by tests/fuzz.rs: the CPU reference computed
    // `H * W` for such planes (an overflow panic in debug builds, a wrapped size in release).
    let input = [0, 4, 1 << 62, 4];
    let e = p().resolve(&input, WEIGHT, None).unwrap_err();
    assert!(matches!(&e, ConvtError::SizeOverflow { shape } if shape == &input), "{e:?}");
    let x = Tensor::zeros(input.to_vec()).unwrap();
    let e = convt::cpu::conv_transpose2d(&x, &rand(WEIGHT, 1), None, &p()).unwrap_err();
    assert!(matches!(&e, ConvtError::SizeOverflow { shape } if shape == &input), "{e:?}");
    // An output whose planes overflow, from a small input: stride 2^62 on 3 rows, kernel 3: 2^63 + 3 rows.
    let e = p().stride([1 << 62, 1]).resolve(&[0, 4, 3, 3], WEIGHT, None).unwrap_err();
    let rows = (1usize << 63) + 3;
    assert!(matches!(&e, ConvtError::SizeOverflow { shape } if *shape == [0, 2, rows, 5]), "{e:?}");
    // Samples that fit are fine with an empty batch.
    assert_eq!(p().resolve(&[0, 4, 1 << 20, 4], WEIGHT, None).unwrap().output_dims(), vec![0, 2, (1 << 20) + 2, 6]);
}

#[test]
fn output_dimension_beyond_usize_is_output_too_large() {
    // (2^40 - 1) * 2^40 + 1 rows: an exact value that no usize holds.
    let (h, s) = (1usize << 40, 1i64 << 40);
    let e = p().stride([s, 1]).resolve(&[1, 1, h, 1], &[1, 1, 1, 1], None).unwrap_err();
    let expected = (h as i128 - 1) * s as i128 + 1;
    assert!(
        matches!(e, ConvtError::OutputTooLarge { in_h, in_w: 1, out_h, out_w: 1 } if in_h == h && out_h == expected),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        format!(
            "output size is too large: input size per channel ({h} x 1) gives calculated output size per channel \
             ({expected} x 1), more than can be addressed"
        )
    );

    // Every term at its extreme: (usize::MAX - 1) * i64::MAX twice overflows i128 itself. This used to wrap to a
    // negative size and be reported as OutputTooSmall with out_h = i64::MIN.
    let params = p().stride([i64::MAX, 1]).dilation([i64::MAX, 1]);
    let e = params.resolve(&[1, 1, usize::MAX, 1], &[1, 1, usize::MAX, 1], None).unwrap_err();
    assert!(matches!(e, ConvtError::OutputTooLarge { out_h, out_w: 1, .. } if out_h > u64::MAX as i128), "{e:?}");
    // The public i64 form saturates instead of wrapping.
    assert_eq!(params.output_size([usize::MAX, 1], [usize::MAX, 1]), [i64::MAX, 1]);
}

// ---------------------------------------------------------------------------------------------------------
// The GPU kernels' 32-bit index range
// ---------------------------------------------------------------------------------------------------------

fn index_range_error(ctx: &GpuContext, stride: i64) -> convt::Result<Tensor> {
    let (x, w) = (rand(&[1, 1, 1, 1], 1), rand(&[1, 1, 1, 1], 2));
    common::forward_host(ctx, &x, &w, None, &p().stride(stride))
}

#[test]
fn stride_past_the_32_bit_index_range_is_rejected_by_every_kernel_without_allocating() {
    // A 1 x 1 input gives a 1 x 1 output whatever the stride, so nothing large is allocated, but the kernels'
    // largest index intermediate (kernel - 1) * dilation + padding + output + stride reaches 2^31.
    let x = rand(&[1, 1, 1, 1], 1);
    let w = rand(&[1, 1, 1, 1], 2);
    let params = p().stride(1i64 << 31);
    // The CPU reference has no such limit.
    let cpu = convt::cpu::conv_transpose2d(&x, &w, None, &params).unwrap();
    assert_eq!(cpu.shape(), &[1, 1, 1, 1]);
    for strategy in Strategy::candidates() {
        let ctx = common::ctx_with_strategy(strategy);
        let e = index_range_error(ctx, 1 << 31).unwrap_err();
        assert!(matches!(&e, ConvtError::InvalidArgument(_)), "{}: {e:?}", strategy.name());
        assert_message(&e, &["exceed the 32-bit index range of the GPU kernels", "stride: [2147483648, 2147483648]"]);
        // One below the bound runs (promptly: the GEMM tiles enumerate only the stride phases inside the
        // output, not all (2^31 - 2)^2 of them), and agrees with the reference.
        let out = index_range_error(ctx, (1 << 31) - 2).unwrap();
        let cpu = convt::cpu::conv_transpose2d(&x, &w, None, &p().stride((1 << 31) - 2)).unwrap();
        assert_eq!(out.data(), cpu.data(), "{}", strategy.name());
    }
    // The backward pass checks the same range.
    let go = rand(&[1, 1, 1, 1], 3);
    let e = common::backward_host(common::ctx(), &x, &w, None, &go, &params).unwrap_err();
    assert!(matches!(&e, ConvtError::InvalidArgument(_)), "{e:?}");
    assert_message(&e, &["exceed the 32-bit index range"]);
    // And the context stays usable.
    let out = common::forward_host(common::ctx(), &x, &w, None, &p()).unwrap();
    assert_eq!(out.data(), x.data().iter().zip(w.data()).map(|(a, b)| a * b).collect::<Vec<_>>().as_slice());
}

#[test]
fn output_plane_past_the_32_bit_range_is_refused_before_allocation() {
    // Dilation 2^31 with a 2-tap kernel: 2^31 + 1 output rows from a 1 x 1 input. The output's plane (8 GiB) is
    // larger than any binding, so the output buffer is refused (TooLargeForBinding) before anything is allocated
    // and before the kernels' index check would reject it.
    let ctx = capped_ctx();
    let x = rand(&[1, 1, 1, 1], 1);
    let w = rand(&[1, 1, 2, 1], 2);
    let rows = (1usize << 31) + 1;
    let e = common::forward_host(&ctx, &x, &w, None, &p().dilation([1 << 31, 1])).unwrap_err();
    assert!(
        matches!(
            &e,
            ConvtError::TooLargeForBinding { bytes, limit: 1048576, what }
                if *bytes == rows as u64 * 4 && what.contains(&format!("[1, 1, {rows}, 1]"))
        ),
        "{e:?}"
    );
}

// ---------------------------------------------------------------------------------------------------------
// Zero-sized dimensions
// ---------------------------------------------------------------------------------------------------------

const WEIGHT: &[usize] = &[4, 2, 3, 3];

#[test]
fn input_with_zero_channels_is_a_channel_mismatch() {
    for input in [vec![1, 0, 5, 5], vec![0, 5, 5], vec![0, 0, 5, 5]] {
        let e = p().resolve(&input, WEIGHT, None).unwrap_err();
        assert!(
            matches!(&e, ConvtError::ChannelMismatch { input: i, expected: 4, actual: 0, .. } if *i == input),
            "{input:?}: {e:?}"
        );
        assert_message(&e, &["with 0 channels", &format!("{input:?}")]);
        // The GPU path says the same, before any GPU work.
        let x = Tensor::zeros(input.clone()).unwrap();
        let gpu = common::forward_host(common::ctx(), &x, &rand(WEIGHT, 1), None, &p()).unwrap_err();
        assert_eq!(gpu.to_string(), e.to_string());
    }
}

#[test]
fn unbatched_input_with_zero_height_or_width_is_empty_input() {
    for input in [vec![4, 5, 0], vec![4, 0, 5]] {
        let e = p().resolve(&input, WEIGHT, None).unwrap_err();
        assert!(matches!(&e, ConvtError::EmptyInput { shape } if *shape == input), "{input:?}: {e:?}");
        let x = Tensor::zeros(input.clone()).unwrap();
        let cpu = convt::cpu::conv_transpose2d(&x, &rand(WEIGHT, 1), None, &p()).unwrap_err();
        assert_eq!(cpu.to_string(), e.to_string());
    }
}

#[test]
fn zero_length_bias_is_a_bias_shape_error() {
    let e = p().resolve(&[1, 4, 5, 5], WEIGHT, Some(&[0])).unwrap_err();
    assert!(matches!(&e, ConvtError::BiasShape { expected: 2, shape } if shape == &[0]), "{e:?}");
    assert_eq!(
        e.to_string(),
        "expected bias to be 1-dimensional with 2 elements (out_channels), but got bias of size [0]"
    );
}

#[test]
fn zero_sized_tensor_data_must_be_empty() {
    let e = Tensor::new(vec![0, 3], vec![1.0]).unwrap_err();
    assert!(matches!(&e, ConvtError::DataLength { expected: 0, actual: 1, .. }), "{e:?}");
    assert_eq!(e.to_string(), "tensor of size [0, 3] needs 0 elements, but 1 were given");
    // A zero in a shape that would otherwise overflow makes it empty, not too large.
    assert_eq!(Tensor::zeros(vec![usize::MAX, 0]).unwrap().numel(), 0);
}

#[test]
fn zero_sized_tensors_upload_and_download_on_the_gpu() {
    let ctx = common::ctx();
    for shape in [vec![0], vec![4, 0, 5], vec![0, 3, 2, 2], vec![2, 3, 0, 7]] {
        let t = Tensor::zeros(shape.clone()).unwrap();
        let g = GpuTensor::upload(ctx, &t).unwrap();
        assert_eq!(g.shape(), &shape[..]);
        assert_eq!(g.download(ctx).unwrap(), t);
    }
}

#[test]
fn empty_batch_backward_gives_zero_weight_and_bias_gradients_on_cpu_and_gpu() {
    let params = p().stride(2);
    let x = Tensor::zeros(vec![0, 2, 3, 3]).unwrap();
    let w = rand(&[2, 3, 2, 2], 1);
    let b = rand(&[3], 2);
    let go = Tensor::zeros(vec![0, 3, 6, 6]).unwrap();
    let cpu = convt::cpu::conv_transpose2d_backward(&x, &w, Some(&b), &go, &params).unwrap();
    assert_zero_gradients("cpu", &cpu, &w);
    // On the GPU no kernel runs: the gradients must still be cleared (outputs are poisoned with NaN here, and a
    // pooled buffer could hold anything).
    let gpu = common::backward_host(common::ctx(), &x, &w, Some(&b), &go, &params).unwrap();
    assert_zero_gradients("gpu", &gpu, &w);
    // A grad_output with a zero where the output has rows is the wrong size.
    let bad = Tensor::zeros(vec![0, 3, 0, 6]).unwrap();
    let e = convt::cpu::conv_transpose2d_backward(&x, &w, None, &bad, &params).unwrap_err();
    assert!(
        matches!(&e, ConvtError::GradOutputShape { expected, actual } if *expected == [0, 3, 6, 6] && *actual == [0, 3, 0, 6]),
        "{e:?}"
    );
}

fn assert_zero_gradients(what: &str, g: &convt::Gradients, w: &Tensor) {
    assert_eq!(g.grad_input.shape(), &[0, 2, 3, 3], "{what}");
    assert_eq!(g.grad_weight.shape(), w.shape(), "{what}");
    assert!(g.grad_weight.data().iter().all(|&v| v == 0.0), "{what}: grad_weight {:?}", g.grad_weight.data());
    let gb = g.grad_bias.as_ref().expect("a bias was given");
    assert!(gb.data().iter().all(|&v| v == 0.0), "{what}: grad_bias {:?}", gb.data());
}

// ---------------------------------------------------------------------------------------------------------
// The GPU API: adapters, options, output tensors
// ---------------------------------------------------------------------------------------------------------

#[test]
fn missing_adapter_is_no_adapter_naming_it() {
    let opts = GpuOptions { adapter: Some("no-such-gpu".into()), ..GpuOptions::default() };
    let e = GpuContext::with_options(opts).expect_err("no adapter is called no-such-gpu");
    assert!(matches!(&e, ConvtError::NoAdapter { detail } if detail.contains("`no-such-gpu`")), "{e:?}");
    assert!(e.to_string().starts_with("no GPU adapter found whose name contains `no-such-gpu` (found: "), "{e}");
    assert_message(&e, &["--backend cpu"]);
}

#[cfg(target_os = "linux")]
#[test]
fn backend_absent_on_this_platform_is_no_adapter() {
    let opts = GpuOptions { backends: Some(wgpu::Backends::METAL | wgpu::Backends::DX12), ..GpuOptions::default() };
    let e = GpuContext::with_options(opts).expect_err("Linux has neither Metal nor DX12");
    assert!(matches!(&e, ConvtError::NoAdapter { detail } if detail.contains("for backends")), "{e:?}");
}

#[test]
fn unknown_backend_name_is_invalid_argument() {
    let e = GpuOptions::parse_backends("vulkan,cuda").unwrap_err();
    assert!(matches!(&e, ConvtError::InvalidArgument(_)), "{e:?}");
    assert_eq!(e.to_string(), "unknown GPU backend `cuda` (expected vulkan, metal, dx12, gl or all)");
}

#[test]
fn binding_limit_below_one_float_is_invalid_argument() {
    for bytes in [0, 3] {
        let opts = GpuOptions { max_binding_bytes: Some(bytes), ..GpuOptions::from_env().unwrap() };
        let e = GpuContext::with_options(opts).expect_err("a binding must hold one float");
        assert!(matches!(&e, ConvtError::InvalidArgument(_)), "{e:?}");
        assert_eq!(e.to_string(), "binding limit of 0 bytes is too small");
    }
}

#[test]
fn output_tensor_of_the_wrong_shape_is_a_shape_mismatch() {
    let ctx = common::ctx();
    let x = GpuTensor::upload(ctx, &rand(&[1, 4, 5, 5], 1)).unwrap();
    let w = GpuTensor::upload(ctx, &rand(WEIGHT, 2)).unwrap();
    let wrong = GpuTensor::empty(ctx, &[1, 2, 7, 6]).unwrap();
    let e = convt::gpu::conv_transpose2d_into(ctx, &x, &w, None, &p(), &wrong, Default::default()).unwrap_err();
    assert!(
        matches!(&e, ConvtError::ShapeMismatch { expected, actual } if *expected == [1, 2, 7, 7] && *actual == [1, 2, 7, 6]),
        "{e:?}"
    );
    assert_eq!(e.to_string(), "expected a tensor of size [1, 2, 7, 7], but got [1, 2, 7, 6]");
}

// ---------------------------------------------------------------------------------------------------------
// The CLI: exit code 2 and one `error:` line
// ---------------------------------------------------------------------------------------------------------

fn convt_with_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_convt"));
    cmd.args(args).env_remove("RUST_LOG").env("RUST_BACKTRACE", "1");
    for var in [
        "CONVT_ADAPTER",
        "CONVT_BACKEND",
        "CONVT_STRATEGY",
        "CONVT_MAX_BINDING_BYTES",
        "CONVT_SHADER_CHECKS",
        "WGPU_BACKEND",
        "WGPU_ADAPTER_NAME",
        // The CLI keeps Mesa's Wayland noise off stderr itself (its `main`), which the one-line checks see.
        "XDG_RUNTIME_DIR",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    cmd.output().expect("convt runs")
}

fn describe(args: &[&str], out: &Output) -> String {
    format!(
        "convt {}\nexit: {:?}\nstdout:\n{}\nstderr:\n{}",
        args.join(" "),
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `convt` and asserts exit code 2, nothing on stdout, no panic, and that the first non-empty line of
/// stderr is exactly `line`; with `one_line`, that it is the only one (convt's own errors; clap's usage errors
/// add a hint line). Returns stderr.
#[track_caller]
fn fails_with(args: &[&str], env: &[(&str, &str)], line: &str, one_line: bool) -> String {
    let out = convt_with_env(args, env);
    let what = describe(args, &out);
    assert_eq!(out.status.code(), Some(2), "{what}");
    assert!(out.stdout.is_empty(), "{what}");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let lower = stderr.to_lowercase();
    assert!(!lower.contains("panicked") && !lower.contains("backtrace"), "{what}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.first().copied(), Some(line), "{what}");
    if one_line {
        assert_eq!(lines.len(), 1, "{what}");
    }
    stderr
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// A valid problem for the CLI: input [1, 2, 3, 3], weight [2, 1, 2, 2].
fn cli_problem(dir: &common::TempDir) -> PathBuf {
    let path = dir.path("problem.safetensors");
    save_tensors(&path, &[("input", &rand(&[1, 2, 3, 3], 1)), ("weight", &rand(&[2, 1, 2, 2], 2))], None).unwrap();
    path
}

#[test]
fn cli_no_adapter_fails_naming_the_adapter_but_the_cpu_backend_still_works() {
    let dir = common::TempDir::new("cli-adapter");
    let tensors = cli_problem(&dir);
    let out_path = dir.path("out.safetensors");
    let args = ["forward", "--tensors", s(&tensors), "--out", s(&out_path)];
    let env = [("CONVT_ADAPTER", "no-such-gpu")];
    let out = convt_with_env(&args, &env);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let found = stderr.split("(found: ").nth(1).and_then(|r| r.split("). Install").next()).unwrap_or("");
    // The tool's advice is its own flag (the library's names `convt::cpu`).
    let expected = format!(
        "error: no GPU adapter found whose name contains `no-such-gpu` (found: {found}). Install a Vulkan driver for \
         your GPU, or Mesa's software Vulkan driver (Debian/Ubuntu: `apt-get install mesa-vulkan-drivers`), or run \
         on the CPU reference: `convt forward --backend cpu`, `convt backward --backend cpu`"
    );
    fails_with(&args, &env, &expected, true);
    assert!(!out_path.exists());
    fails_with(&["info"], &env, &expected, true);

    // The CPU backend needs no adapter.
    let mut args = args.to_vec();
    args.extend(["--backend", "cpu"]);
    let out = convt_with_env(&args, &env);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&args, &out));
    assert!(out_path.exists());
}

/// wgpu's own variables choose the backend and the adapter where convt's are unset; `--adapter` takes a number
/// from `convt info`'s list or part of a name; and no driver noise reaches stderr, XDG_RUNTIME_DIR unset or not.
#[test]
fn cli_takes_wgpus_environment_and_the_adapter_option() {
    let info = |args: &[&str], env: &[(&str, &str)]| {
        let out = convt_with_env(args, env);
        let what = describe(args, &out);
        assert_eq!(out.status.code(), Some(0), "{what}");
        assert!(out.stderr.is_empty(), "{what}");
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap_or_else(|e| panic!("{e}: {what}"))
    };
    let plain = info(&["info", "--json"], &[]);
    let first = plain["adapters"][0]["name"].as_str().expect("an adapter").to_string();
    assert_eq!(plain["chosen"]["name"], first.as_str());
    // The first adapter by number, and by part of its name (in another case), from either place.
    let part = first[..first.len().min(6)].to_uppercase();
    for (args, env) in [
        (vec!["--adapter", "0", "info", "--json"], vec![]),
        (vec!["info", "--json", "--adapter", part.as_str()], vec![]),
        (vec!["info", "--json"], vec![("WGPU_ADAPTER_NAME", part.as_str())]),
    ] {
        assert_eq!(info(&args, &env)["chosen"]["name"], first.as_str(), "{args:?} {env:?}");
    }
    // Linux has no Metal: WGPU_BACKEND is honoured, and CONVT_BACKEND comes first.
    if cfg!(target_os = "linux") {
        let out = convt_with_env(&["info"], &[("WGPU_BACKEND", "metal")]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.starts_with("error: no GPU adapter found for backends"), "{stderr}");
        let both = info(&["info", "--json"], &[("WGPU_BACKEND", "metal"), ("CONVT_BACKEND", "vulkan,gl")]);
        assert_eq!(both["chosen"]["name"], first.as_str());
    }
    let found = plain["adapters"].as_array().map_or(0, |a| a.len());
    let refused = |args: &[&str], env: &[(&str, &str)], start: &str| {
        let out = convt_with_env(args, env);
        let what = describe(args, &out);
        assert_eq!(out.status.code(), Some(2), "{what}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{what}");
        assert!(stderr.starts_with(start), "{what}");
    };
    refused(&["--adapter", "99", "info"], &[], &format!("error: no GPU adapter found at index 99 (found {found}: "));
    refused(
        &["info"],
        &[("WGPU_ADAPTER_NAME", "no-such-gpu")],
        "error: no GPU adapter found whose name contains `no-such-gpu`",
    );
}

#[test]
fn cli_bad_environment_settings_fail_naming_the_value() {
    let dir = common::TempDir::new("cli-env");
    let tensors = cli_problem(&dir);
    let out_path = dir.path("out.safetensors");
    let args = ["forward", "--tensors", s(&tensors), "--out", s(&out_path)];
    let cases: [(&str, &str, &str); 5] = [
        ("CONVT_BACKEND", "cuda", "error: unknown GPU backend `cuda` (expected vulkan, metal, dx12, gl or all)"),
        (
            "WGPU_BACKEND",
            "cuda",
            "error: WGPU_BACKEND: unknown GPU backend `cuda` (expected vulkan, metal, dx12, gl or all)",
        ),
        ("CONVT_MAX_BINDING_BYTES", "lots", "error: CONVT_MAX_BINDING_BYTES must be a byte count, got `lots`"),
        ("CONVT_SHADER_CHECKS", "maybe", "error: CONVT_SHADER_CHECKS must be `checked` or `trusted`, got `maybe`"),
        ("CONVT_STRATEGY", "fastest", "error: CONVT_STRATEGY `fastest` is not one of direct, "),
    ];
    for (var, value, line) in cases {
        let out = convt_with_env(&args, &[(var, value)]);
        let what = describe(&args, &out);
        assert_eq!(out.status.code(), Some(2), "{what}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{what}");
        assert!(lines[0].starts_with(line), "{what}");
        if var != "CONVT_STRATEGY" {
            assert_eq!(lines[0], line, "{what}");
        }
        assert!(!out_path.exists());
    }
}

#[test]
fn cli_stride_past_the_index_range_fails_on_gpu_and_runs_on_cpu() {
    let dir = common::TempDir::new("cli-range");
    let path = dir.path("one.safetensors");
    save_tensors(&path, &[("input", &rand(&[1, 1, 1, 1], 1)), ("weight", &rand(&[1, 1, 1, 1], 2))], None).unwrap();
    let out_path = dir.path("out.safetensors");
    let args = ["forward", "--tensors", s(&path), "--out", s(&out_path), "--stride", "2147483648"];
    let stderr = fails_with(
        &args,
        &[],
        "error: sizes of ConvShape { batch: 1, in_channels: 1, out_channels: 1, groups: 1, in_hw: [1, 1], out_hw: [1, \
         1], kernel: [1, 1], stride: [2147483648, 2147483648], padding: [0, 0], output_padding: [0, 0], dilation: [1, \
         1], unbatched: false } exceed the 32-bit index range of the GPU kernels",
        true,
    );
    assert!(stderr.contains("32-bit"));
    assert!(!out_path.exists());
    let mut cpu = args.to_vec();
    cpu.extend(["--backend", "cpu"]);
    let out = convt_with_env(&cpu, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&cpu, &out));
}

#[test]
fn cli_output_too_large_fails_naming_the_sizes() {
    let dir = common::TempDir::new("cli-huge");
    let tensors = cli_problem(&dir);
    let out_path = dir.path("out.safetensors");
    // Output rows: (3 - 1) * (2^62) + 1 + 1 = 2^63 + 2; 2^63 + 2 rows of 4 columns do not fit in isize::MAX bytes.
    let stride = (1i64 << 62).to_string();
    let rows = (1u64 << 63) + 2;
    let args = ["forward", "--tensors", s(&tensors), "--out", s(&out_path), "--stride", &stride, "--backend", "cpu"];
    fails_with(
        &args,
        &[],
        &format!("error: tensor of size [1, 1, {rows}, {rows}] has too many elements to address (more than isize::MAX bytes of f32)"),
        true,
    );
}

#[test]
fn cli_unsupported_precision_fails_naming_the_tensor() {
    let dir = common::TempDir::new("cli-f16");
    let path = dir.path("half.safetensors");
    std::fs::write(&path, file_of_dtype(safetensors::Dtype::I64, "input", &[1, 2, 3, 3])).unwrap();
    let out_path = dir.path("out.safetensors");
    fails_with(
        &["forward", "--tensors", s(&path), "--out", s(&out_path)],
        &[],
        &format!(
            "error: {}: tensor `input` has dtype I64, but convt reads float tensors only (F32, F16, BF16; F64, F8_E4M3 \
             and F8_E5M2 as f32)",
            path.display()
        ),
        true,
    );
}

#[test]
fn cli_broken_files_fail_with_the_readers_message() {
    let dir = common::TempDir::new("cli-files");
    let good = std::fs::read(cli_problem(&dir)).unwrap();
    let n = header_len(&good);
    let out_path = dir.path("out.safetensors");
    let mut long_prefix = good.clone();
    long_prefix[..8].copy_from_slice(&(n + 4096).to_le_bytes());
    let cases: Vec<(&str, Vec<u8>, String)> = vec![
        (
            "truncated-header",
            good[..20].to_vec(),
            format!("the header length (the first 8 bytes) is {n} bytes, but only 12 bytes follow it"),
        ),
        (
            "long-prefix",
            long_prefix,
            format!(
                "the header length (the first 8 bytes) is {} bytes, but only {} bytes follow it",
                n + 4096,
                good.len() - 8
            ),
        ),
        (
            "empty",
            Vec::new(),
            "the file is 0 bytes long, too short for the 8-byte header length a safetensors file starts with".into(),
        ),
        (
            "shape-bytes",
            file_with(r#"{"input": {"dtype": "F32", "shape": [1, 2, 3, 3], "data_offsets": [0, 8]}}"#, &[0; 8]),
            "tensor `input` (F32, shape [1, 2, 3, 3]) needs 72 bytes, but its data_offsets [0, 8] span 8".into(),
        ),
    ];
    for (name, bytes, message) in cases {
        let path = dir.path(&format!("{name}.safetensors"));
        std::fs::write(&path, &bytes).unwrap();
        let line = format!("error: {}: not a valid safetensors file: {message}", path.display());
        fails_with(&["forward", "--tensors", s(&path), "--out", s(&out_path)], &[], &line, true);
        assert!(!out_path.exists(), "{name}");
    }

    // A directory.
    let sub = dir.path("a-directory");
    std::fs::create_dir(&sub).unwrap();
    fails_with(
        &["forward", "--tensors", s(&sub), "--out", s(&out_path)],
        &[],
        &format!("error: {}: Is a directory (os error 21)", sub.display()),
        true,
    );
}

#[test]
fn cli_zero_sized_weight_in_a_file_is_an_empty_weight_error() {
    let dir = common::TempDir::new("cli-zero");
    let path = dir.path("zero.safetensors");
    let weight = Tensor::zeros(vec![2, 0, 3, 3]).unwrap();
    save_tensors(&path, &[("input", &rand(&[1, 2, 3, 3], 1)), ("weight", &weight)], None).unwrap();
    let out_path = dir.path("out.safetensors");
    for backend in ["gpu", "cpu"] {
        fails_with(
            &["forward", "--tensors", s(&path), "--out", s(&out_path), "--backend", backend],
            &[],
            "error: non-empty weight expected (every dimension at least 1), but got weight of size [2, 0, 3, 3]",
            true,
        );
    }
}

#[test]
fn cli_flag_garbage_is_a_usage_error() {
    let dir = common::TempDir::new("cli-flags");
    let tensors = cli_problem(&dir);
    let out_path = dir.path("out.safetensors");
    let base = ["forward", "--tensors", s(&tensors), "--out", s(&out_path)];
    let cases: [(&[&str], &str); 7] = [
        (&["--stride", "1.5"], "error: invalid value '1.5' for '--stride <STRIDE>': `1.5` is not an integer"),
        (&["--padding", "2e3"], "error: invalid value '2e3' for '--padding <PADDING>': `2e3` is not an integer"),
        (&["--dilation", "1,2,3"], "error: invalid value '1,2,3' for '--dilation <DILATION>': expected N or H,W, got `1,2,3`"),
        (&["--output-padding", "1,"], "error: invalid value '1,' for '--output-padding <OUTPUT_PADDING>': `` is not an integer"),
        (
            &["--stride", "99999999999999999999"],
            "error: invalid value '99999999999999999999' for '--stride <STRIDE>': `99999999999999999999` is out of range (at most 9223372036854775807 in magnitude)",
        ),
        (&["--groups", "two"], "error: invalid value 'two' for '--groups <GROUPS>': invalid digit found in string"),
        (&["--backend", "tpu"], "error: invalid value 'tpu' for '--backend <BACKEND>'"),
    ];
    for (flags, line) in cases {
        let mut args = base.to_vec();
        args.extend_from_slice(flags);
        fails_with(&args, &[], line, false);
        assert!(!out_path.exists());
    }

    // Required flags missing.
    fails_with(
        &["forward", "--out", s(&out_path)],
        &[],
        "error: the following required arguments were not provided:",
        false,
    );
    fails_with(
        &["forward", "--tensors", s(&tensors)],
        &[],
        "error: the following required arguments were not provided:",
        false,
    );
    // A flag given without its value, and an unknown flag.
    fails_with(
        &["forward", "--tensors"],
        &[],
        "error: a value is required for '--tensors <TENSORS>' but none was supplied",
        false,
    );
    let mut args = base.to_vec();
    args.push("--strides=2");
    fails_with(&args, &[], "error: unexpected argument '--strides' found", false);
}
