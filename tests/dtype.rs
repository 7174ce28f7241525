//! Half-precision tensors (f16, bf16): the forward and the backward of every kernel against the float64 reference
//! on tensors of each dtype, on random problems (every option) and on tensors split over several bindings, the
//! layer and the functional calls, safetensors files, the CLI, and the errors for mixed dtypes.
//!
//! What a result must be: the inputs hold values of their dtype; the sums are f32 and the result is rounded to
//! the dtype once. So every element lies within half a unit in the last place of its dtype of the float64
//! reference (computed from the same values), plus what f32 sums may add: `F32_SUM_SLACK` of the sum of the
//! terms' magnitudes. This is stronger than a relative L2 bound and does not depend on cancellation.

mod common;

use common::cli::{convt_fails, convt_ok, s};
use common::problems::{problems, Problem};
use convt::gpu::{self, GpuContext, Strategy};
use convt::io::TensorFile;
use convt::{cpu, ConvShape, ConvTranspose2d, ConvTranspose2dOptions, ConvtError, DType, GpuTensor, Precision, Tensor};
use proptest::prelude::*;

/// Relative slack of f32 sums (and of f16 operands scaled by a power of two, exact for half-precision values)
/// against the sum of the terms' magnitudes.
const F32_SUM_SLACK: f64 = 1e-5;

const HALVES: [DType; 2] = [DType::F16, DType::BF16];

/// The spacing of `dtype`'s values around |v| (f16's subnormals below 2^-14).
fn ulp(dtype: DType, v: f64) -> f64 {
    let e = v.abs().max(f64::MIN_POSITIVE).log2().floor();
    match dtype {
        DType::F32 => 2f64.powf(e - 23.0).max(2f64.powi(-149)),
        DType::F16 => 2f64.powf(e - 10.0).max(2f64.powi(-24)),
        DType::BF16 => 2f64.powf(e - 7.0).max(2f64.powi(-133)),
    }
}

/// Checks `out` (of `dtype`) element by element against `reference`, with `magnitude` the sums of the terms'
/// magnitudes (the reference on |operands|).
fn check_rounded(dtype: DType, what: &str, out: &Tensor, reference: &[f64], magnitude: &[f64]) -> Result<(), String> {
    if out.dtype() != dtype {
        return Err(format!("{what}: dtype {} instead of {dtype}", out.dtype()));
    }
    for (i, ((&y, &r), &m)) in out.data().iter().zip(reference).zip(magnitude).enumerate() {
        let y = y as f64;
        let bound = 0.5 * ulp(dtype, r.abs().max(y.abs())) + F32_SUM_SLACK * m;
        // (A NaN result fails too.)
        let within = (y - r).abs() <= bound;
        if !within {
            return Err(format!("{what}: element {i} is {y}, the reference {r} (bound {bound:e})"));
        }
    }
    Ok(())
}

fn abs(t: &Tensor) -> Vec<f32> {
    t.data().iter().map(|v| v.abs()).collect()
}

/// The problem's tensors in `dtype`.
fn tensors_in(p: &Problem, dtype: DType) -> (Tensor, Tensor, Option<Tensor>) {
    let (x, w, b) = p.tensors();
    (x.to_dtype(dtype), w.to_dtype(dtype), b.map(|b| b.to_dtype(dtype)))
}

/// The forward of `p` in `dtype` at `precision` on `ctx`, checked against the reference.
fn check_forward(ctx: &GpuContext, p: &Problem, dtype: DType, precision: Precision) -> Result<Strategy, String> {
    let (x, w, b) = tensors_in(p, dtype);
    let shape = p.shape();
    let options = p.params.precision(precision);
    let up = |t: &Tensor| GpuTensor::upload(ctx, t).map_err(|e| e.to_string());
    let (gx, gw, gb) = (up(&x)?, up(&w)?, b.as_ref().map(up).transpose()?);
    let y = GpuTensor::empty_with(ctx, &shape.output_dims_as_given(), dtype).map_err(|e| e.to_string())?;
    let ran = gpu::conv_transpose2d_into(ctx, &gx, &gw, gb.as_ref(), &options, &y, Default::default())
        .map_err(|e| e.to_string())?;
    let out = y.download(ctx).map_err(|e| e.to_string())?;
    let reference = cpu::conv_transpose2d_f64(&shape, x.data(), w.data(), b.as_ref().map(|b| b.data())).unwrap();
    let b_abs = b.as_ref().map(abs);
    let magnitude = cpu::conv_transpose2d_f64(&shape, &abs(&x), &abs(&w), b_abs.as_deref()).unwrap();
    check_rounded(dtype, &format!("{} {dtype} {precision}", ran.name()), &out, &reference, &magnitude)?;
    Ok(ran)
}

/// The backward of `p` in `dtype` on `ctx`, each gradient checked against the reference.
fn check_backward(ctx: &GpuContext, p: &Problem, dtype: DType) -> Result<(), String> {
    check_backward_with(ctx, p, dtype, Precision::F32, gpu::BackwardRun::default())
}

/// [`check_backward`] at `precision` with the kernels `run` forces (the selector's where it names none).
fn check_backward_with(
    ctx: &GpuContext,
    p: &Problem,
    dtype: DType,
    precision: Precision,
    run: gpu::BackwardRun<'_>,
) -> Result<(), String> {
    let (x, w, b) = tensors_in(p, dtype);
    let shape = p.shape();
    let go = Tensor::uniform(shape.output_dims_as_given(), -1.0, 1.0, p.seed ^ 3).unwrap().to_dtype(dtype);
    let options = p.params.precision(precision);
    let err = |e: ConvtError| e.to_string();
    let up = |t: &Tensor| GpuTensor::upload(ctx, t).map_err(err);
    let (gx, gw, gb, ggo) = (up(&x)?, up(&w)?, b.as_ref().map(up).transpose()?, up(&go)?);
    let grads = gpu::GpuGradients::empty(ctx, &gx, &gw, gb.as_ref(), &options).map_err(err)?;
    gpu::conv_transpose2d_backward_into(ctx, &gx, &gw, gb.as_ref(), &ggo, &options, &grads, run).map_err(err)?;
    let grads = grads.download(ctx).map_err(err)?;
    let gi = cpu::grad_input_f64(&shape, go.data(), w.data()).unwrap();
    let gi_m = cpu::grad_input_f64(&shape, &abs(&go), &abs(&w)).unwrap();
    check_rounded(dtype, "grad_input", &grads.grad_input, &gi, &gi_m)?;
    let gw = cpu::grad_weight_f64(&shape, x.data(), go.data()).unwrap();
    let gw_m = cpu::grad_weight_f64(&shape, &abs(&x), &abs(&go)).unwrap();
    check_rounded(dtype, "grad_weight", &grads.grad_weight, &gw, &gw_m)?;
    match (b, grads.grad_bias) {
        (Some(_), Some(gb)) => {
            let r = cpu::grad_bias_f64(&shape, go.data()).unwrap();
            let m = cpu::grad_bias_f64(&shape, &abs(&go)).unwrap();
            check_rounded(dtype, "grad_bias", &gb, &r, &m)
        }
        (None, None) => Ok(()),
        _ => Err("grad_bias present exactly when the bias is".into()),
    }
}

/// Every kernel this adapter runs, exact and f16-operand, for the precision it computes at. (The Winograd
/// tensor-core tiles, which run only where forced by name, are not among them: they round their transformed
/// operands to f16, which `check_rounded` does not bound; tests/precision.rs holds them to the tolerances on f16
/// and bf16 tensors.)
fn kernels(ctx: &GpuContext) -> Vec<Strategy> {
    Strategy::candidates_for(ctx, Precision::Fast)
}

fn mixed_problem(seed: u64) -> Problem {
    // Stride, padding, output_padding, dilation, two groups, bias; odd element counts everywhere.
    let params = ConvTranspose2dOptions::default()
        .stride([2, 3])
        .padding([1, 0])
        .output_padding([1, 2])
        .dilation([1, 2])
        .groups(2);
    Problem { input: vec![3, 4, 5, 7], weight: vec![4, 3, 3, 2], bias: true, params, seed }
}

fn wide_problem(seed: u64) -> Problem {
    // 64 input and 128 output channels, stride 1: every tensor-core tile takes it.
    let params = ConvTranspose2dOptions::default().padding([0, 1]);
    Problem { input: vec![2, 64, 6, 10], weight: vec![64, 128, 3, 2], bias: true, params, seed }
}

fn one_group_problem(seed: u64) -> Problem {
    // One group, channels a multiple of 16 (what the padded-NHWC kernel takes), stride 1.
    let params = ConvTranspose2dOptions::default().padding(1);
    Problem { input: vec![2, 16, 9, 11], weight: vec![16, 32, 3, 3], bias: true, params, seed }
}

#[test]
fn every_kernel_computes_half_precision_tensors() {
    let ctx = common::ctx();
    for k in common::sample(&kernels(ctx), 4) {
        let kctx = common::ctx_with_strategy(k);
        for dtype in HALVES {
            let seed = common::fresh_seed();
            let p = [mixed_problem(seed), one_group_problem(seed), wide_problem(seed)]
                .into_iter()
                .find(|p| k.computes(kctx, &p.shape()))
                .unwrap_or_else(|| panic!("{} computes none of the test problems", k.name()));
            let ran = check_forward(kctx, &p, dtype, k.precision()).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            assert_eq!(ran, k, "the forced kernel ran");
        }
    }
}

#[test]
fn the_selector_computes_half_precision_tensors_at_both_precisions() {
    let ctx = common::ctx();
    for dtype in HALVES {
        for precision in [Precision::F32, Precision::Fast] {
            for p in [mixed_problem(common::fresh_seed()), one_group_problem(common::fresh_seed())] {
                check_forward(ctx, &p, dtype, precision).unwrap_or_else(|e| panic!("seed {}: {e}", p.seed));
            }
        }
    }
}

#[test]
fn the_backward_computes_half_precision_gradients() {
    let ctx = common::ctx();
    for dtype in HALVES {
        for p in [mixed_problem(common::fresh_seed()), one_group_problem(common::fresh_seed())] {
            check_backward(ctx, &p, dtype).unwrap_or_else(|e| panic!("seed {}: {e}", p.seed));
        }
    }
}

#[test]
fn every_backward_kernel_computes_half_precision_gradients() {
    // Each grad_input kernel (with the first grad_weight candidate) and each grad_weight kernel (with the first
    // grad_input one) the adapter runs, at both precisions, on half-precision tensors, into poisoned gradients.
    let ctx = common::ctx();
    for dtype in HALVES {
        for p in [mixed_problem(common::fresh_seed()), one_group_problem(common::fresh_seed())] {
            let shape = p.shape();
            for precision in [Precision::F32, Precision::Fast] {
                let gis = gpu::GradInputKernel::candidates(ctx, &shape, precision);
                let gws = gpu::GradWeightKernel::candidates(ctx, &shape, [1, 1], precision);
                let runs = gis.iter().map(|&gi| (gi, gws[0])).chain(gws.iter().map(|&gw| (gis[0], gw)));
                for (gi, gw) in runs {
                    let run = gpu::BackwardRun { grad_input: Some(gi), grad_weight: Some(gw), ..Default::default() };
                    check_backward_with(ctx, &p, dtype, precision, run).unwrap_or_else(|e| {
                        panic!("seed {}: {} / {} {dtype} {precision}: {e}", p.seed, gi.name(), gw.name())
                    });
                }
            }
        }
    }
}

#[test]
fn half_precision_tensors_split_over_several_bindings() {
    // Bindings of 1 KiB: a 5 x 7 f32 plane is 140 bytes and an output plane 920, so the input, the output and the
    // gradients span several chunks, most of an odd number of half-precision values.
    for strategy in [None, Some(Strategy::Direct)] {
        let ctx = common::ctx_with_binding_limit(1024, strategy);
        for dtype in HALVES {
            let p = mixed_problem(common::fresh_seed());
            check_forward(&ctx, &p, dtype, Precision::F32).unwrap_or_else(|e| panic!("seed {}: {e}", p.seed));
            check_backward(&ctx, &p, dtype).unwrap_or_else(|e| panic!("seed {}: {e}", p.seed));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(48), ..ProptestConfig::default() })]

    #[test]
    fn half_precision_matches_the_reference_on_random_problems(
        p in problems(), half in any::<bool>(), pick in 0usize..64, backward in any::<bool>()
    ) {
        let dtype = if half { DType::F16 } else { DType::BF16 };
        let ctx = common::ctx();
        let ks: Vec<Strategy> = kernels(ctx).into_iter().filter(|k| k.computes(ctx, &p.shape())).collect();
        let k = ks[pick % ks.len()];
        let result = if backward {
            check_backward(ctx, &p, dtype)
        } else {
            check_forward(common::ctx_with_strategy(k), &p, dtype, k.precision()).map(|_| ())
        };
        prop_assert!(result.is_ok(), "{} {dtype}: {}", k.name(), result.unwrap_err());
    }
}

#[test]
fn uploads_and_downloads_keep_every_value() {
    let ctx = common::ctx();
    // Values at the edges of each dtype: subnormals, the largest finite, ties, infinities, NaN; an odd count.
    let edges = [
        0.0f32,
        -0.0,
        1.0,
        -2.5,
        65504.0,
        70000.0,
        6.0e-8,
        3.0e-5,
        1.0 + 1.0 / 2048.0,
        f32::INFINITY,
        3.4e38,
        -1.0e-40,
        f32::NAN,
    ];
    for dtype in DType::ALL {
        let t = Tensor::new(vec![edges.len()], edges.to_vec()).unwrap().to_dtype(dtype);
        let back = GpuTensor::upload(ctx, &t).unwrap().download(ctx).unwrap();
        assert_eq!(back.dtype(), dtype);
        for (a, b) in t.data().iter().zip(back.data()) {
            assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()), "{dtype}: {a} came back as {b}");
        }
    }
}

#[test]
fn raw_bytes_go_to_the_gpu_and_back_unchanged() {
    // Every bit pattern of random bytes (NaN payloads included) survives `from_bytes` and `download_bytes`, over
    // several bindings of 1 KiB holding odd numbers of half-precision values, and decodes as `upload` stores it.
    let ctx = common::ctx_with_binding_limit(1024, None);
    let seed = common::fresh_seed();
    let shape = [3, 5, 7, 9];
    for dtype in DType::ALL {
        let numel: usize = shape.iter().product();
        let mut state = seed;
        let bytes: Vec<u8> = (0..numel * dtype.size())
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (state >> 56) as u8
            })
            .collect();
        let t = GpuTensor::from_bytes(&ctx, &shape, dtype, &bytes).unwrap();
        assert!(t.chunks().len() > 1, "{dtype}: one binding");
        assert_eq!(t.download_bytes(&ctx).unwrap(), bytes, "{dtype}, seed {seed}");
        let mut values = vec![0f32; numel];
        dtype.decode(&bytes, &mut values);
        for (a, b) in values.iter().zip(t.download(&ctx).unwrap().data()) {
            assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()), "{dtype}: {a} came back as {b}");
        }
        let short = GpuTensor::from_bytes(&ctx, &shape, dtype, &bytes[1..]);
        assert!(matches!(short, Err(ConvtError::DataLength { .. })), "{dtype}: {:?}", short.err());
    }
}

#[test]
fn the_gpu_rounds_to_half_precision_as_the_host_does() {
    // The conversion shader's rounding (ties to even, f16's subnormals, overflow to infinity) against the host's,
    // across f16's range and beyond: a forward with a 1x1 kernel rounds each product once. From f32's smallest
    // normal up: the kernels' f32 arithmetic may flush f32 subnormals to zero (NVIDIA's does), as PyTorch's may.
    let ctx = common::ctx_with_strategy(Strategy::Direct);
    let mut values: Vec<f32> = Vec::new();
    for bits in (0x0080_0000u32..0x4780_0000).step_by(0x1_3579) {
        let v = f32::from_bits(bits);
        values.extend([v, -v, f32::from_bits(bits | 0xfff), f32::from_bits((bits & !0x1fff) | 0x1000)]);
    }
    values.extend([
        65504.0,
        65519.99,
        65520.0,
        1.0e30,
        f32::MAX,
        f32::INFINITY,
        2.0f32.powi(-25),
        2.0f32.powi(-24) * 1.5,
    ]);
    let n = values.len();
    let x32 = Tensor::new(vec![1, 1, 1, n], values).unwrap();
    let w = Tensor::new(vec![1, 1, 1, 1], vec![1.0]).unwrap();
    for dtype in HALVES {
        // Times 1: every value of the dtype comes back as itself.
        let x = x32.clone().to_dtype(dtype);
        let y = common::forward_host(ctx, &x, &w.clone().to_dtype(dtype), None, &Default::default()).unwrap();
        // (-0 + 0 is +0 in the kernels' f32 sums: zeros compare equal.)
        for (a, b) in x.data().iter().zip(y.data()) {
            assert!(a == b || (a.is_nan() && b.is_nan()), "{dtype}: {a} came back as {b}");
        }
        // Times 3 and times 1.4990234375 (binary 1.0111111111): exact in f32 (a dtype value has at most 11
        // significant bits), then rounded to the dtype by the GPU, ties included, against the host's rounding.
        for factor in [3.0f32, 1.499_023_4] {
            let wf = Tensor::new(vec![1, 1, 1, 1], vec![factor]).unwrap().to_dtype(dtype);
            let y = common::forward_host(ctx, &x, &wf, None, &Default::default()).unwrap();
            for (a, b) in x.data().iter().zip(y.data()) {
                let want = dtype.round(a * wf.data()[0]);
                assert!(want == *b || (want.is_nan() && b.is_nan()), "{dtype}: {factor} * {a} gave {b}, want {want}");
            }
        }
    }
}

#[test]
fn mixed_dtypes_are_refused_naming_the_tensor() {
    let ctx = common::ctx();
    let p = mixed_problem(1);
    let (x, w, b) = p.tensors();
    let up = |t: &Tensor| GpuTensor::upload(ctx, t).unwrap();
    let (x16, w32, b32) = (up(&x.clone().to_dtype(DType::F16)), up(&w), up(b.as_ref().unwrap()));
    let e = gpu::conv_transpose2d(ctx, &x16, &w32, Some(&b32), &p.params).expect_err("refused");
    assert!(matches!(e, ConvtError::DTypeMismatch { expected: DType::F16, actual: DType::F32, .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "expected the weight of dtype f16 (the input's), but got f32: convert it with `to_dtype`"
    );
    let w16 = up(&w.to_dtype(DType::F16));
    let e = gpu::conv_transpose2d(ctx, &x16, &w16, Some(&b32), &p.params).expect_err("refused");
    assert!(e.to_string().starts_with("expected the bias of dtype f16"), "{e}");
    // An output of another dtype.
    let y32 = GpuTensor::empty(ctx, &p.shape().output_dims_as_given()).unwrap();
    let e = gpu::conv_transpose2d_into(ctx, &x16, &w16, None, &p.params.bias(false), &y32, Default::default());
    assert!(e.is_err());
}

#[test]
fn the_layer_runs_in_its_dtype() {
    let ctx = common::ctx();
    let options = ConvTranspose2dOptions::default().stride(2).padding(1).output_padding(1);
    for dtype in HALVES {
        let layer = ConvTranspose2d::new(16, 32, 3, options, common::fresh_seed()).unwrap().to_dtype(dtype);
        assert_eq!(layer.dtype(), dtype);
        let x = Tensor::uniform(vec![2, 16, 6, 5], -1.0, 1.0, common::fresh_seed()).unwrap().to_dtype(dtype);
        let shape = options.resolve(x.shape(), layer.weight().shape(), Some(&[32])).unwrap();
        let reference =
            cpu::conv_transpose2d_f64(&shape, x.data(), layer.weight().data(), layer.bias().map(|b| b.data())).unwrap();
        let b_abs = layer.bias().map(abs);
        let magnitude = cpu::conv_transpose2d_f64(&shape, &abs(&x), &abs(layer.weight()), b_abs.as_deref()).unwrap();
        let y = layer.forward(ctx, &x).unwrap();
        check_rounded(dtype, "host layer", &y, &reference, &magnitude).unwrap();
        let gpu_layer = layer.to_gpu(ctx).unwrap();
        for _ in 0..2 {
            // The weight is prepared on the first call and reused on the second.
            let y = gpu_layer.forward(&GpuTensor::upload(ctx, &x).unwrap()).unwrap().download(ctx).unwrap();
            check_rounded(dtype, "GPU layer", &y, &reference, &magnitude).unwrap();
        }
        // An f32 input to a half-precision layer is refused, not converted silently.
        let e = gpu_layer.forward(&GpuTensor::upload(ctx, &x.clone().to_dtype(DType::F32)).unwrap()).err().unwrap();
        assert!(matches!(e, ConvtError::DTypeMismatch { .. }), "{e:?}");
        // The optimizer step takes f32 parameters only (mixed precision keeps an f32 master copy).
        let mut gpu_layer = gpu_layer;
        let grads =
            gpu_layer.backward(&GpuTensor::upload(ctx, &x).unwrap(), &GpuTensor::upload(ctx, &y).unwrap()).unwrap();
        let e = gpu_layer.sgd_step(&grads, 0.1).err().unwrap();
        assert!(matches!(e, ConvtError::UnsupportedDType { .. }), "{e:?}");
    }
}

#[test]
fn safetensors_files_keep_each_dtype() {
    let dir = common::TempDir::new("dtype-io");
    let path = dir.path("t.safetensors");
    let a = Tensor::uniform(vec![3, 5], -4.0, 4.0, common::fresh_seed()).unwrap();
    let tensors: Vec<(String, Tensor)> = DType::ALL.iter().map(|d| (d.to_string(), a.clone().to_dtype(*d))).collect();
    let named: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    convt::io::save_tensors(&path, &named, None).unwrap();
    let file = TensorFile::load(&path).unwrap();
    for (name, t) in &tensors {
        assert_eq!(file.dtype(name), Some(t.dtype()));
        assert_eq!(&file.get(name).unwrap(), t, "{name}");
    }
    // As PyTorch writes them: the header says F16 / BF16 and each value takes 2 bytes.
    let bytes = std::fs::read(&path).unwrap();
    let header =
        String::from_utf8_lossy(&bytes[8..8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize]).to_string();
    assert!(header.contains("\"F16\"") && header.contains("\"BF16\"") && header.contains("\"F32\""), "{header}");
    assert_eq!(bytes.len() - 8 - header.len(), 15 * (4 + 2 + 2));
}

#[test]
fn the_cli_keeps_the_files_dtype_or_converts_with_dtype() {
    let dir = common::TempDir::new("dtype-cli");
    let p = mixed_problem(common::fresh_seed());
    let (x, w, b) = p.tensors();
    let write = |name: &str, dtype: DType| {
        let path = dir.path(name);
        let t = [
            ("input", x.clone().to_dtype(dtype)),
            ("weight", w.clone().to_dtype(dtype)),
            ("bias", b.clone().unwrap().to_dtype(dtype)),
        ];
        let named: Vec<(&str, &Tensor)> = t.iter().map(|(n, t)| (*n, t)).collect();
        convt::io::save_tensors(&path, &named, None).unwrap();
        path
    };
    let options =
        ["--stride", "2,3", "--padding", "1,0", "--output-padding", "1,2", "--dilation", "1,2", "--groups", "2"];
    let shape = p.shape();
    for (file_dtype, asked, expect) in [
        (DType::F16, None, DType::F16),
        (DType::BF16, None, DType::BF16),
        (DType::F32, Some(DType::BF16), DType::BF16),
        (DType::F16, Some(DType::F32), DType::F32),
    ] {
        let input = write(&format!("in-{file_dtype}.safetensors"), file_dtype);
        for backend in ["gpu", "cpu"] {
            let out = dir.path(&format!("out-{file_dtype}-{expect}-{backend}.safetensors"));
            let mut args = vec!["forward", "--tensors", s(&input), "--out", s(&out), "--backend", backend];
            args.extend(options);
            let asked_text = asked.map(|d| d.to_string());
            if let Some(d) = &asked_text {
                args.extend(["--dtype", d.as_str()]);
            }
            convt_ok(&args);
            let y = TensorFile::load(&out).unwrap().get("output").unwrap();
            // The values the file holds, converted as --dtype asks, are what the reference computes from.
            let (xe, we, be) = (
                x.clone().to_dtype(file_dtype).to_dtype(expect),
                w.clone().to_dtype(file_dtype).to_dtype(expect),
                b.clone().unwrap().to_dtype(file_dtype).to_dtype(expect),
            );
            let reference = cpu::conv_transpose2d_f64(&shape, xe.data(), we.data(), Some(be.data())).unwrap();
            let magnitude = cpu::conv_transpose2d_f64(&shape, &abs(&xe), &abs(&we), Some(&abs(&be))).unwrap();
            check_rounded(expect, &format!("convt forward --backend {backend}"), &y, &reference, &magnitude).unwrap();
        }
    }
    // Tensors of different dtypes, without --dtype: one line naming them.
    let mixed = dir.path("mixed.safetensors");
    let (x16, w32) = (x.clone().to_dtype(DType::F16), w.clone());
    convt::io::save_tensors(&mixed, &[("input", &x16), ("weight", &w32)], None).unwrap();
    let out = dir.path("never.safetensors");
    let mut args = vec!["forward", "--tensors", s(&mixed), "--out", s(&out)];
    args.extend(options);
    let msg = convt_fails(&args, &["tensor `weight` has dtype f32, but `input` has f16: pass --dtype"]);
    assert_eq!(msg.trim().lines().count(), 1, "{msg}");
    assert!(!out.exists(), "nothing written");
}

#[test]
fn the_cli_backward_keeps_the_files_dtype() {
    let dir = common::TempDir::new("dtype-cli-backward");
    let p = one_group_problem(common::fresh_seed());
    let shape: ConvShape = p.shape();
    let (x, w, b) = tensors_in(&p, DType::BF16);
    let go = Tensor::uniform(shape.output_dims_as_given(), -1.0, 1.0, p.seed ^ 3).unwrap().to_dtype(DType::BF16);
    let input = dir.path("in.safetensors");
    convt::io::save_tensors(
        &input,
        &[("input", &x), ("weight", &w), ("bias", b.as_ref().unwrap()), ("grad_output", &go)],
        None,
    )
    .unwrap();
    let out = dir.path("grads.safetensors");
    convt_ok(&["backward", "--tensors", s(&input), "--out", s(&out), "--padding", "1"]);
    let file = TensorFile::load(&out).unwrap();
    let gw = file.get("grad_weight").unwrap();
    let r = cpu::grad_weight_f64(&shape, x.data(), go.data()).unwrap();
    let m = cpu::grad_weight_f64(&shape, &abs(&x), &abs(&go)).unwrap();
    check_rounded(DType::BF16, "grad_weight", &gw, &r, &m).unwrap();
    assert_eq!(file.dtype("grad_input"), Some(DType::BF16));
    assert_eq!(file.dtype("grad_bias"), Some(DType::BF16));
}

#[test]
fn verify_checks_half_precision_tensors() {
    // `convt verify --dtype`: the reference from the values the rounded inputs hold, the tolerance widened by the
    // dtype's unit roundoff only; the kernel's errors would show above it.
    let out = convt_ok(&["verify", "--case", "kb81", "--dtype", "bf16", "--max-gflop", "0.2", "--json"]);
    let line = String::from_utf8_lossy(&out.stdout).to_string();
    let v: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
    assert_eq!(v["dtype"], "bf16");
    assert_eq!(v["ok"], true);
    let e = v["checks"][0]["rel_l2"].as_f64().unwrap();
    // Rounding to bf16 costs about 2^-9 / sqrt(3) of relative L2 on these values, far above f32's sums' error.
    assert!(e > 1e-4 && e < 2f64.powi(-8), "{e}");
    let out = convt_ok(&["verify", "--case", "kb81", "--dtype", "f16", "--backward", "--max-gflop", "0.2", "--json"]);
    let v: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    assert_eq!((v["dtype"].as_str(), v["ok"].as_bool()), (Some("f16"), Some(true)), "{v}");
}
