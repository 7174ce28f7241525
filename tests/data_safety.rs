//! Nothing is lost and nothing aborts: an output path that is an input, a device, a pipe, a directory or a link
//! to one is refused before any work, with the file on disk untouched; a failed write names the path the user
//! gave and leaves no temporary file; a replaced file keeps its mode and a new one follows the umask; host
//! memory sized by the user's shapes or files is allocated fallibly; safetensors files are checked by their
//! header and read through a map, so a file larger than memory costs only the tensors taken from it.

mod common;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use common::cli::{convt, convt_fails, convt_ok, describe, s, text};
use convt::io::{save_tensors, OutputFile, TensorFile};
use convt::{ConvTranspose2dOptions, ConvtError, Tensor};

#[cfg(unix)]
use std::os::unix::fs::{FileTypeExt, PermissionsExt};

/// A small valid problem for `convt forward` / `backward`: input [1, 2, 3, 3], weight [2, 2, 2, 2], bias [4],
/// grad_output [1, 4, 4, 4] (stride 1, groups 1).
fn problem_file(dir: &common::TempDir, name: &str) -> PathBuf {
    let seed = common::fresh_seed();
    let x = Tensor::uniform(vec![1, 2, 3, 3], -1.0, 1.0, seed).unwrap();
    let w = Tensor::uniform(vec![2, 2, 2, 2], -1.0, 1.0, seed ^ 1).unwrap();
    let b = Tensor::uniform(vec![2], -1.0, 1.0, seed ^ 2).unwrap();
    let go = Tensor::uniform(vec![1, 2, 4, 4], -1.0, 1.0, seed ^ 3).unwrap();
    let path = dir.path(name);
    save_tensors(&path, &[("input", &x), ("weight", &w), ("bias", &b), ("grad_output", &go)], None).unwrap();
    path
}

/// The files of a directory other than those named in `expected`: no temporary file may be left behind.
fn leftovers(dir: &Path, expected: &[&str]) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !expected.contains(&n.as_str()))
        .collect()
}

/// The process's umask, from /proc (reading it with umask(2) would change it for the other tests' threads).
#[cfg(target_os = "linux")]
fn umask() -> u32 {
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Umask:")).expect("Umask in /proc/self/status");
    u32::from_str_radix(line["Umask:".len()..].trim(), 8).unwrap()
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[cfg(unix)]
fn mkfifo(path: &Path) {
    let ok = std::process::Command::new("mkfifo").arg(path).status().expect("mkfifo runs").success();
    assert!(ok, "mkfifo {}", path.display());
}

// ---------------------------------------------------------------------------------------------------------
// Writing: the library
// ---------------------------------------------------------------------------------------------------------

#[test]
fn an_output_that_is_an_input_is_refused_by_path_link_and_identity() {
    let dir = common::TempDir::new("same-file");
    let input = problem_file(&dir, "in.safetensors");
    let before = fs::read(&input).unwrap();
    let mut aliases = vec![input.clone(), dir.path("sub/../in.safetensors"), dir.path("./in.safetensors")];
    fs::create_dir(dir.path("sub")).unwrap();
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(&input, dir.path("link.safetensors")).unwrap();
        aliases.push(dir.path("link.safetensors"));
    }
    // Hard links are told apart by device and inode, which only Unix exposes.
    #[cfg(unix)]
    {
        fs::hard_link(&input, dir.path("hard.safetensors")).unwrap();
        aliases.push(dir.path("hard.safetensors"));
    }
    for out in &aliases {
        match OutputFile::create(out, &[&input]) {
            Err(ConvtError::SameFileAsInput { path, input: i }) => {
                assert_eq!((&path, &i), (out, &input));
            }
            other => panic!("{}: expected SameFileAsInput, got {other:?}", out.display()),
        }
        assert_eq!(fs::read(&input).unwrap(), before, "{} changed the input", out.display());
    }
    let expected = ["in.safetensors", "sub", "link.safetensors", "hard.safetensors"];
    assert_eq!(leftovers(&dir.path(""), &expected), [""; 0]);
}

#[cfg(unix)]
#[test]
fn an_output_that_is_not_a_regular_file_is_refused_and_left_as_it_was() {
    let dir = common::TempDir::new("not-regular");
    let t = Tensor::zeros(vec![2]).unwrap();
    mkfifo(&dir.path("fifo"));
    std::os::unix::fs::symlink("/dev/null", dir.path("null")).unwrap();
    std::os::unix::fs::symlink(dir.path("missing"), dir.path("dangling")).unwrap();
    fs::create_dir(dir.path("folder")).unwrap();
    for (name, kind) in [
        ("fifo", "a named pipe"),
        ("null", "a character device"),
        ("folder", "a directory"),
        ("dangling", "a dangling link"),
    ] {
        let path = dir.path(name);
        match save_tensors(&path, &[("x", &t)], None) {
            Err(e @ ConvtError::NotARegularFile { .. }) => {
                let message = e.to_string();
                assert!(message.contains(kind) && message.contains(name), "{message}");
            }
            other => panic!("{name}: expected NotARegularFile, got {other:?}"),
        }
    }
    assert!(fs::metadata(dir.path("fifo")).unwrap().file_type().is_fifo());
    assert!(fs::symlink_metadata(dir.path("null")).unwrap().file_type().is_symlink());
    assert!(fs::metadata("/dev/null").unwrap().file_type().is_char_device());
    assert!(fs::symlink_metadata(dir.path("dangling")).unwrap().file_type().is_symlink());
    assert!(!dir.path("missing").exists(), "a dangling link's target was created");
    assert_eq!(leftovers(&dir.path(""), &["fifo", "null", "folder", "dangling"]), [""; 0]);
}

#[test]
fn a_failed_write_names_the_path_given_and_leaves_nothing() {
    let dir = common::TempDir::new("failed-write");
    let t = Tensor::zeros(vec![2]).unwrap();
    let path = dir.path("no/such/dir/out.safetensors");
    match save_tensors(&path, &[("x", &t)], None) {
        Err(e @ ConvtError::Write { .. }) => {
            let message = e.to_string();
            assert!(message.starts_with(&format!("cannot write {}", path.display())), "{message}");
            assert!(!message.contains("/.convt-"), "names a temporary file: {message}");
        }
        other => panic!("expected a Write error, got {other:?}"),
    }
    assert_eq!(leftovers(&dir.path(""), &[]), [""; 0]);
}

#[test]
fn an_output_abandoned_before_writing_leaves_the_target_untouched() {
    let dir = common::TempDir::new("abandoned");
    let path = dir.path("out.safetensors");
    fs::write(&path, b"precious").unwrap();
    let out = OutputFile::create(&path, &[]).unwrap();
    drop(out);
    assert_eq!(fs::read(&path).unwrap(), b"precious");
    assert_eq!(leftovers(&dir.path(""), &["out.safetensors"]), [""; 0]);
}

#[cfg(unix)]
#[test]
fn a_replaced_file_keeps_its_mode_and_a_link_stays_a_link() {
    let dir = common::TempDir::new("modes");
    let t = Tensor::uniform(vec![3, 4], -1.0, 1.0, common::fresh_seed()).unwrap();
    let path = dir.path("out.safetensors");
    fs::write(&path, b"old contents").unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
    std::os::unix::fs::symlink(&path, dir.path("link")).unwrap();
    save_tensors(dir.path("link"), &[("t", &t)], None).unwrap();
    assert!(fs::symlink_metadata(dir.path("link")).unwrap().file_type().is_symlink(), "the link was replaced");
    assert_eq!(mode(&path), 0o640);
    assert_eq!(TensorFile::load(&path).unwrap().get("t").unwrap(), t);
    assert_eq!(leftovers(&dir.path(""), &["out.safetensors", "link"]), [""; 0]);
}

#[cfg(target_os = "linux")]
#[test]
fn a_new_file_follows_the_umask() {
    let dir = common::TempDir::new("umask");
    let path = dir.path("new.safetensors");
    save_tensors(&path, &[("t", &Tensor::zeros(vec![1]).unwrap())], None).unwrap();
    assert_eq!(mode(&path), 0o666 & !umask());
}

// ---------------------------------------------------------------------------------------------------------
// Writing: the CLI
// ---------------------------------------------------------------------------------------------------------

#[cfg(unix)]
#[test]
fn the_cli_refuses_to_write_over_its_input_on_either_backend() {
    let dir = common::TempDir::new("cli-same-file");
    let input = problem_file(&dir, "in.safetensors");
    let before = fs::read(&input).unwrap();
    fs::hard_link(&input, dir.path("hard.safetensors")).unwrap();
    for command in ["forward", "backward"] {
        for backend in ["cpu", "gpu"] {
            for out in [input.clone(), dir.path("hard.safetensors")] {
                let args = [command, "--tensors", s(&input), "--out", s(&out), "--backend", backend];
                convt_fails(&args, &["same file as the input", s(&out)]);
                assert_eq!(fs::read(&input).unwrap(), before, "convt {}", args.join(" "));
            }
        }
    }
    assert_eq!(leftovers(&dir.path(""), &["in.safetensors", "hard.safetensors"]), [""; 0]);
}

#[cfg(unix)]
#[test]
fn the_cli_refuses_devices_pipes_and_directories_as_outputs() {
    let dir = common::TempDir::new("cli-devices");
    let input = problem_file(&dir, "in.safetensors");
    mkfifo(&dir.path("fifo"));
    std::os::unix::fs::symlink("/dev/null", dir.path("null")).unwrap();
    for out in [dir.path("fifo"), dir.path("null"), dir.path(""), PathBuf::from("/dev/null")] {
        for command in ["forward", "backward"] {
            let args = [command, "--tensors", s(&input), "--out", s(&out), "--backend", "cpu"];
            convt_fails(&args, &["not a regular file"]);
        }
    }
    assert!(fs::metadata(dir.path("fifo")).unwrap().file_type().is_fifo());
    assert!(fs::symlink_metadata(dir.path("null")).unwrap().file_type().is_symlink());
    assert!(fs::metadata("/dev/null").unwrap().file_type().is_char_device());
    assert_eq!(leftovers(&dir.path(""), &["in.safetensors", "fifo", "null"]), [""; 0]);
}

#[test]
fn the_cli_reports_a_failed_write_as_such_before_computing() {
    let dir = common::TempDir::new("cli-write");
    let input = problem_file(&dir, "in.safetensors");
    let out = dir.path("missing/out.safetensors");
    let line = convt_fails(&["forward", "--tensors", s(&input), "--out", s(&out)], &["cannot write", s(&out)]);
    assert!(!line.contains("safetensors file") && !line.contains("/.convt-"), "{line}");
    // The output is checked first: with a --tensors file that is not even safetensors, the write error is the
    // one reported.
    let garbage = dir.path("garbage.safetensors");
    fs::write(&garbage, b"not a tensor file").unwrap();
    convt_fails(&["backward", "--tensors", s(&garbage), "--out", s(&out)], &["cannot write", s(&out)]);
    fs::remove_file(&garbage).unwrap();
    // A problem the library rejects creates no output and leaves no temporary file.
    let out = dir.path("out.safetensors");
    convt_fails(&["forward", "--tensors", s(&input), "--out", s(&out), "--stride", "0"], &["stride"]);
    assert_eq!(leftovers(&dir.path(""), &["in.safetensors"]), [""; 0]);
}

#[cfg(unix)]
#[test]
fn a_write_that_fails_midway_leaves_the_target_as_it_was() {
    // A file-size limit of 1 KiB makes the output's write fail after it has started (EFBIG, SIGXFSZ ignored):
    // the error names the path given, the existing target keeps its contents and no temporary file is left.
    let dir = common::TempDir::new("cli-midway");
    let seed = common::fresh_seed();
    let x = Tensor::uniform(vec![1, 4, 16, 16], -1.0, 1.0, seed).unwrap();
    let w = Tensor::uniform(vec![4, 4, 3, 3], -1.0, 1.0, seed ^ 1).unwrap();
    let input = dir.path("in.safetensors");
    save_tensors(&input, &[("input", &x), ("weight", &w)], None).unwrap();
    let out = dir.path("out.safetensors");
    fs::write(&out, b"precious").unwrap();
    let script = format!(
        "trap '' XFSZ; ulimit -f 1; exec '{}' forward --tensors '{}' --out '{}' --backend cpu",
        env!("CARGO_BIN_EXE_convt"),
        s(&input),
        s(&out)
    );
    let result = std::process::Command::new("sh").arg("-c").arg(&script).output().unwrap();
    let stderr = text(&result.stderr);
    assert_eq!(result.status.code(), Some(2), "{script}\n{stderr}");
    assert!(stderr.starts_with(&format!("error: cannot write {}", s(&out))), "{stderr}");
    assert_eq!(fs::read(&out).unwrap(), b"precious");
    assert_eq!(leftovers(&dir.path(""), &["in.safetensors", "out.safetensors"]), [""; 0]);
}

#[cfg(unix)]
#[test]
fn the_cli_keeps_an_existing_files_mode_and_gives_a_new_one_the_umasks() {
    let dir = common::TempDir::new("cli-modes");
    let input = problem_file(&dir, "in.safetensors");
    let existing = dir.path("existing.safetensors");
    fs::write(&existing, b"old").unwrap();
    fs::set_permissions(&existing, fs::Permissions::from_mode(0o604)).unwrap();
    convt_ok(&["forward", "--tensors", s(&input), "--out", s(&existing), "--backend", "cpu"]);
    assert_eq!(mode(&existing), 0o604);
    assert_eq!(TensorFile::load(&existing).unwrap().shape("output"), Some(&[1, 2, 4, 4][..]));
    let fresh = dir.path("fresh.safetensors");
    let script = format!(
        "umask 027; exec '{}' forward --tensors '{}' --out '{}' --backend cpu",
        env!("CARGO_BIN_EXE_convt"),
        s(&input),
        s(&fresh)
    );
    let status = std::process::Command::new("sh").arg("-c").arg(&script).status().unwrap();
    assert!(status.success(), "{script}");
    assert_eq!(mode(&fresh), 0o640);
}

// ---------------------------------------------------------------------------------------------------------
// Allocation
// ---------------------------------------------------------------------------------------------------------

/// A valid problem whose output (about 2^46 elements, 2^48 bytes of f32) no machine can hold, within the
/// addressable size: input [1, 1, 2, 2], a 1x1 kernel, stride 2^23.
fn oversized_problem() -> (Tensor, Tensor, ConvTranspose2dOptions) {
    let x = Tensor::uniform(vec![1, 1, 2, 2], -1.0, 1.0, common::fresh_seed()).unwrap();
    let w = Tensor::uniform(vec![1, 1, 1, 1], -1.0, 1.0, common::fresh_seed()).unwrap();
    (x, w, ConvTranspose2dOptions::default().stride(1 << 23))
}

#[cfg(target_os = "linux")]
#[test]
fn the_cpu_reference_refuses_an_output_larger_than_memory() {
    let (x, w, params) = oversized_problem();
    let shape = params.resolve(x.shape(), w.shape(), None).unwrap();
    assert_eq!(shape.out_hw, [(1 << 23) + 1; 2]);
    match convt::cpu::conv_transpose2d(&x, &w, None, &params) {
        Err(e @ ConvtError::HostOutOfMemory { .. }) => {
            assert!(e.to_string().starts_with("not enough host memory for the f64 reference output"), "{e}");
        }
        other => panic!("expected HostOutOfMemory, got {:?}", other.map(|t| t.shape().to_vec())),
    }
    let elements = shape.output_dims().iter().product::<usize>();
    assert!(matches!(Tensor::zeros(vec![elements]), Err(ConvtError::HostOutOfMemory { .. })));
    assert!(matches!(Tensor::uniform(vec![elements], 0.0, 1.0, 1), Err(ConvtError::HostOutOfMemory { .. })));
}

#[cfg(target_os = "linux")]
#[test]
fn the_cli_refuses_an_output_larger_than_memory_on_the_cpu() {
    let dir = common::TempDir::new("cli-oom");
    let (x, w, _) = oversized_problem();
    let input = dir.path("in.safetensors");
    save_tensors(&input, &[("input", &x), ("weight", &w)], None).unwrap();
    let out = dir.path("out.safetensors");
    let args = ["forward", "--tensors", s(&input), "--out", s(&out), "--backend", "cpu", "--stride", "8388608"];
    convt_fails(&args, &["not enough host memory"]);
    assert_eq!(leftovers(&dir.path(""), &["in.safetensors"]), [""; 0]);
}

// ---------------------------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------------------------

/// A safetensors file of `[("small", [4] f32 values), ("huge", [2^40] f32)]` whose huge tensor is a hole: the
/// file is 4 TiB long (more memory than any test machine has) but takes a few blocks of disk.
fn sparse_file(path: &Path, small: &[f32; 4]) {
    let huge: u64 = 1 << 42;
    let header = format!(
        r#"{{"small":{{"dtype":"F32","shape":[4],"data_offsets":[0,16]}},"huge":{{"dtype":"F32","shape":[{}],"data_offsets":[16,{}]}}}}"#,
        huge / 4,
        16 + huge
    );
    let mut f = fs::File::create(path).unwrap();
    f.write_all(&(header.len() as u64).to_le_bytes()).unwrap();
    f.write_all(header.as_bytes()).unwrap();
    for v in small {
        f.write_all(&v.to_le_bytes()).unwrap();
    }
    f.set_len(8 + header.len() as u64 + 16 + huge).unwrap();
}

// Linux: where the memory available is known, so that the huge tensor is refused before it is allocated.
#[cfg(target_os = "linux")]
#[test]
fn a_file_larger_than_memory_is_read_only_where_asked() {
    let dir = common::TempDir::new("sparse");
    let path = dir.path("big.safetensors");
    let small = [1.5f32, -2.0, 3.25, f32::MIN_POSITIVE];
    sparse_file(&path, &small);
    let start = std::time::Instant::now();
    let file = TensorFile::load(&path).unwrap();
    assert_eq!(file.shape("huge"), Some(&[1usize << 40][..]));
    assert_eq!(file.get("small").unwrap().data(), &small);
    match file.get("huge") {
        Err(ConvtError::HostOutOfMemory { bytes, .. }) => assert_eq!(bytes, 1 << 42),
        other => panic!("expected HostOutOfMemory, got {:?}", other.map(|t| t.numel())),
    }
    assert!(start.elapsed().as_secs() < 30, "reading took {:?}: the file was read, not mapped", start.elapsed());
}

#[cfg(unix)]
#[test]
fn an_endless_stream_is_refused_by_its_header() {
    // /dev/zero: a zero header length, refused at once instead of reading forever.
    match TensorFile::load("/dev/zero") {
        Err(ConvtError::TensorFile { .. }) => {}
        other => panic!("expected a TensorFile error, got {other:?}"),
    }
    // A pipe that sends a valid file and then never stops: only the declared bytes and one more are read.
    let dir = common::TempDir::new("fifo-read");
    let fifo = dir.path("stream");
    mkfifo(&fifo);
    let t = Tensor::uniform(vec![2, 3], -1.0, 1.0, common::fresh_seed()).unwrap();
    let valid = dir.path("valid.safetensors");
    save_tensors(&valid, &[("t", &t)], None).unwrap();
    let bytes = fs::read(&valid).unwrap();
    let send = |endless: bool| {
        let (fifo, bytes) = (fifo.clone(), bytes.clone());
        std::thread::spawn(move || {
            let mut w = fs::OpenOptions::new().write(true).open(&fifo).unwrap();
            let _ = w.write_all(&bytes);
            // The reader closes its end once it has what the header declares and one byte more.
            while endless && w.write_all(&[0u8; 4096]).is_ok() {}
        })
    };
    let writer = send(false);
    assert_eq!(TensorFile::load(&fifo).unwrap().get("t").unwrap(), t, "a pipe holding a valid file reads");
    writer.join().unwrap();
    let writer = send(true);
    match TensorFile::load(&fifo) {
        Err(e @ ConvtError::TensorFile { .. }) => assert!(e.to_string().contains("too many"), "{e}"),
        other => panic!("expected a TensorFile error, got {other:?}"),
    }
    writer.join().unwrap();
}

// ---------------------------------------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------------------------------------

#[test]
fn verify_refuses_a_partial_shape_naming_what_is_missing() {
    convt_fails(&["verify", "--out-channels", "4"], &["missing: --in-channels, --size, --kernel"]);
    convt_fails(&["verify", "--in-channels", "4", "--out-channels", "4", "--size", "5"], &["missing: --kernel"]);
    convt_fails(&["verify", "--stride", "2"], &["--stride", "add --in-channels, --out-channels, --size, --kernel"]);
    convt_fails(&["verify", "--bias"], &["--bias"]);
}

#[test]
fn verify_refuses_a_case_together_with_shape_flags() {
    convt_fails(&["verify", "--case", "kb81", "--in-channels", "4"], &["--case", "--in-channels"]);
    convt_fails(&["verify", "--case", "kb81", "--stride", "2", "--groups", "2"], &["--case", "--stride, --groups"]);
    convt_fails(&["verify", "--case", "dcgan", "--bias"], &["--case", "--bias"]);
}

#[test]
fn numeric_options_refuse_nan_infinite_negative_and_zero_where_meaningless() {
    for (args, flag) in [
        (&["verify", "--tolerance", "nan"][..], "--tolerance"),
        (&["verify", "--tolerance", "inf"], "--tolerance"),
        (&["verify", "--tolerance", "-1e-5"], "--tolerance"),
        (&["verify", "--max-gflop", "0"], "--max-gflop"),
        (&["verify", "--max-gflop", "NaN"], "--max-gflop"),
        (&["verify", "--full-check-gflop", "-1"], "--full-check-gflop"),
        (&["verify", "--samples", "0"], "--samples"),
        (&["bench", "--runs", "0"], "--runs"),
        (&["tune", "--runs", "0"], "--runs"),
    ] {
        let out = convt(args);
        let what = describe(args, &out);
        assert_eq!(out.status.code(), Some(2), "{what}");
        let stderr = text(&out.stderr);
        let first = stderr.lines().next().unwrap_or_default();
        assert!(first.starts_with("error:") && first.contains(flag), "{what}");
        assert!(!stderr.contains("panicked"), "{what}");
    }
}
