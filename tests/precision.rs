//! Precision `fast` (f16 operands scaled by powers of two, f32 accumulation): every fast kernel this adapter
//! runs against the float64 reference within f16's rounding, the suite's cases within 1e-3 relative L2, range
//! safety (values near and beyond f16's largest, 65504, and below its smallest normal, 6.1e-5), non-finite
//! values, the fallback when the adapter lacks f16 or cooperative matrices, and the layer's option.
//!
//! On Mesa's software driver the f16-operand kernels run (it has SHADER_F16); the cooperative-matrix kernels
//! need tensor cores and are validated by naga (tests/shaders.rs) and checked on the GPU machine
//! (`convt verify --precision fast`, docs/PERFORMANCE.md).

mod common;

use common::problems::{problems, Problem};
use convt::gpu::{self, GpuContext, Strategy};
use convt::{cpu, ConvShape, ConvTranspose2d, ConvTranspose2dOptions, DType, ErrorStats, Precision, Tensor};
use proptest::prelude::*;

/// Unit roundoff of f16 (10 stored mantissa bits, round to nearest).
const F16_ROUNDOFF: f64 = 1.0 / 2048.0;

/// The fast kernels this context's device runs (f16 operands; cooperative matrices where present). (The Winograd
/// tensor-core tiles, which run only where forced by name, are not among them: their products are of transformed
/// operands, which `check_within_f16_rounding` does not bound; `winograd_tensor_core_tiles_stay_within_1e_3` holds
/// them to the tolerance itself.)
fn fast_kernels(ctx: &GpuContext) -> Vec<Strategy> {
    Strategy::fast_candidates().into_iter().filter(|s| s.runs_on(ctx)).collect()
}

/// The problem a forced kernel is tested on: `mixed_problem` (stride, groups), or for a kernel that does not take
/// it (the padded-NHWC kernel: one group) `one_group_problem`.
fn problem_for(ctx: &GpuContext, k: Strategy, seed: u64) -> Problem {
    let mixed = mixed_problem(seed);
    if k.computes(ctx, &mixed.shape()) {
        mixed
    } else {
        one_group_problem(seed)
    }
}

/// Checks a fast result element by element against what rounding both operands to f16 can cost. An operand
/// scaled so that its largest magnitude M lies in [2^14, 2^15) keeps f16's relative rounding u = 2^-11 for
/// values down to f16's normal range, i.e. 2^-28 of M; below that f16's subnormal spacing gives an absolute
/// error of at most 2^-25 in scaled units, M * 2^-39 in the operand's own. So each product x*w errs by at most
/// 2u(1+u)|x||w| + (Mx |w| + Mw |x|) 2^-39 (1+2u), and the output by the sum of that over its taps (bounded here
/// with 2^-38), plus f32 accumulation and the bias add (a small slack). Stronger than a relative L2 bound, and
/// independent of cancellation in the sums.
fn check_within_f16_rounding(
    shape: &ConvShape,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    out: &Tensor,
) -> Result<(), String> {
    let reference = cpu::conv_transpose2d_f64(shape, x.data(), w.data(), b.map(|b| b.data())).unwrap();
    let abs = |t: &Tensor| t.data().iter().map(|v| v.abs()).collect::<Vec<f32>>();
    // The largest finite magnitude, as the kernels' scale sees it, spread over the whole tensor.
    let largest_everywhere = |t: &Tensor| {
        let m = t.data().iter().filter(|v| v.is_finite()).fold(0f32, |m, v| m.max(v.abs()));
        vec![m; t.numel()]
    };
    let magnitude = cpu::conv_transpose2d_f64(shape, &abs(x), &abs(w), None).unwrap();
    let subnormal = [
        cpu::conv_transpose2d_f64(shape, &largest_everywhere(x), &abs(w), None).unwrap(),
        cpu::conv_transpose2d_f64(shape, &abs(x), &largest_everywhere(w), None).unwrap(),
    ];
    let largest = reference.iter().chain(&magnitude).fold(0f64, |m, v| m.max(v.abs()));
    let per_product = 2.0 * F16_ROUNDOFF * (1.0 + F16_ROUNDOFF);
    let below_normal = (2f64).powi(-38);
    for (i, ((&got, &want), &mag)) in out.data().iter().zip(&reference).zip(&magnitude).enumerate() {
        let bound = (per_product + 1e-5) * mag
            + below_normal * (subnormal[0][i] + subnormal[1][i])
            + 1e-6 * (largest + want.abs());
        let err = (got as f64 - want).abs();
        #[allow(clippy::neg_cmp_op_on_partial_ord)] // a NaN error must fail too
        if !(err <= bound) {
            return Err(format!("element {i}: {got} vs {want} (error {err:e} > bound {bound:e})"));
        }
    }
    Ok(())
}

/// `x` with its last element set to 3e6: the largest value, so it alone decides the input's f16 scale.
fn with_huge_last_value(x: &Tensor) -> Tensor {
    let mut data = x.data().to_vec();
    if let Some(last) = data.last_mut() {
        *last = 3.0e6;
    }
    Tensor::new(x.shape().to_vec(), data).unwrap()
}

fn run_fast(ctx: &GpuContext, p: &Problem, x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> (Tensor, Strategy) {
    common::forward_host_as(ctx, Precision::Fast, x, w, b, &p.params).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(32), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_fast_kernel_is_within_f16_rounding_of_the_reference(p in problems(), pick in 0usize..64) {
        // The f16 kernels that take this problem (the padded-NHWC kernel takes one group only).
        let kernels: Vec<Strategy> =
            fast_kernels(common::ctx()).into_iter().filter(|k| k.computes(common::ctx(), &p.shape())).collect();
        if kernels.is_empty() {
            return Ok(()); // no f16 kernel on this adapter: `fast` is exact here (see the fallback test)
        }
        let ctx = common::ctx_with_strategy(kernels[pick % kernels.len()]);
        let (x, w, b) = p.tensors();
        let (out, ran) = run_fast(ctx, &p, &x, &w, b.as_ref());
        prop_assert_eq!(ran.precision(), Precision::Fast);
        check_within_f16_rounding(&p.shape(), &x, &w, b.as_ref(), &out).map_err(|e| TestCaseError::fail(format!("{}: {e} for {p:?}", ran.name())))?;
    }

    #[test]
    fn fast_kernels_scale_tensors_split_across_bindings(p in problems(), pick in 0usize..64) {
        // Bindings of one plane: the operand maxima are gathered over every chunk of the input.
        let kernels: Vec<Strategy> =
            fast_kernels(common::ctx()).into_iter().filter(|k| k.computes(common::ctx(), &p.shape())).collect();
        if kernels.is_empty() {
            return Ok(()); // no f16 kernel on this adapter: `fast` is exact here (see the fallback test)
        }
        let shape = p.shape();
        let plane = (shape.in_hw[0] * shape.in_hw[1]).max(shape.out_hw[0] * shape.out_hw[1]);
        let weight: usize = p.weight.iter().product();
        let limit = 4 * weight.max(plane).max(shape.out_channels);
        let ctx = common::ctx_with_binding_limit(limit as u64, Some(kernels[pick % kernels.len()]));
        let (x, w, b) = p.tensors();
        // Large values in one sample only: a scale taken from the first chunk alone would overflow f16.
        let x = with_huge_last_value(&x);
        let (out, _) = run_fast(&ctx, &p, &x, &w, b.as_ref());
        check_within_f16_rounding(&shape, &x, &w, b.as_ref(), &out).map_err(|e| TestCaseError::fail(format!("{e} for {p:?}")))?;
    }
}

/// A mid-sized problem with every option (H != W, asymmetric kernel, stride, dilation, groups, bias).
fn mixed_problem(seed: u64) -> Problem {
    Problem {
        input: vec![2, 16, 9, 13],
        weight: vec![16, 12, 3, 2],
        bias: true,
        params: ConvTranspose2dOptions {
            stride: [2, 1],
            padding: [1, 0],
            output_padding: [1, 0],
            dilation: [1, 2],
            groups: 2,
            ..Default::default()
        },
        seed,
    }
}

/// A one-group problem with the other options (H != W, asymmetric kernel, stride, dilation, padding, output
/// padding, bias) and channels every padded-NHWC tile takes (a multiple of 16 in, of 128 out).
fn one_group_problem(seed: u64) -> Problem {
    Problem {
        input: vec![2, 16, 9, 13],
        weight: vec![16, 128, 3, 2],
        bias: true,
        params: ConvTranspose2dOptions {
            stride: [2, 1],
            padding: [1, 1],
            output_padding: [1, 0],
            dilation: [2, 1],
            groups: 1,
            ..Default::default()
        },
        seed,
    }
}

fn scaled(t: &Tensor, factor: f32) -> Tensor {
    Tensor::new(t.shape().to_vec(), t.data().iter().map(|v| v * factor).collect()).unwrap()
}

#[test]
fn values_outside_f16_range_keep_their_accuracy() {
    // (input factor, weight factor): near f16's largest (65504), beyond it, far beyond it, below its smallest
    // normal (6.1e-5) and its smallest subnormal (6e-8), and mixed. Without the power-of-two scaling the large
    // ones would become inf and the small ones 0. The last two reach the ends of the scales' exponents: an
    // input whose largest value lies below 2^-113 (its scale capped at 2^127), and products whose inverse
    // scale, 2^-136, lies beyond f32's normal exponents. Their sizes keep (almost) every input, weight and bias
    // value out of f32's subnormal range, which some GPUs flush to zero (docs/RELIABILITY.md): only values
    // below 1/4000 of the first input's largest are subnormal, too few to matter.
    let factors: [(f32, f32); 10] = [
        (6.0e4, 1.0),
        (1.0, 6.5e4),
        (1.0e5, 3.0e5),
        (1.0e30, 1.0),
        (1.0e-6, 1.0),
        (1.0e-9, 1.0e-7),
        (1.0e20, 1.0e-20),
        (4.0e-5, 7.0e4),
        (5.0e-35, 1.0e30),
        (1.0e-16, 1.0e-16),
    ];
    let kernels = fast_kernels(common::ctx());
    let strategies: Vec<Option<Strategy>> =
        if kernels.is_empty() { vec![None] } else { kernels.iter().copied().map(Some).collect() };
    for strategy in strategies {
        let ctx = match strategy {
            Some(s) => common::ctx_with_strategy(s),
            None => common::ctx(),
        };
        for (fx, fw) in factors {
            let p = match strategy {
                Some(k) => problem_for(ctx, k, common::fresh_seed()),
                None => mixed_problem(common::fresh_seed()),
            };
            let (x, w, b) = p.tensors();
            let (x, w) = (scaled(&x, fx), scaled(&w, fw));
            let b = b.map(|b| scaled(&b, fx * fw));
            let (out, ran) = run_fast(ctx, &p, &x, &w, b.as_ref());
            let reference =
                cpu::conv_transpose2d_f64(&p.shape(), x.data(), w.data(), b.as_ref().map(|b| b.data())).unwrap();
            let s = ErrorStats::compare(out.data(), &reference);
            assert_eq!(s.non_finite, 0, "{}: x*{fx:e}, w*{fw:e}: non-finite outputs", ran.name());
            assert!(s.rel_l2 <= 1e-3, "{}: x*{fx:e}, w*{fw:e}: rel L2 {:e}", ran.name(), s.rel_l2);
            check_within_f16_rounding(&p.shape(), &x, &w, b.as_ref(), &out)
                .unwrap_or_else(|e| panic!("{}: x*{fx:e}, w*{fw:e}: {e}", ran.name()));
        }
    }
}

#[test]
fn suite_cases_scaled_down_stay_within_1e_3() {
    // The benchmark's nine cases at a size the software driver runs quickly (batch 1, spatial size cut),
    // inputs U(-1, 1) as `convt verify` draws them: the selector's own choice at precision `fast`, and every
    // f16 kernel this adapter runs (the Winograd tensor-core tiles, forced only, too: this is their tolerance).
    let every_fast =
        Strategy::all().into_iter().filter(|s| s.precision() == Precision::Fast && s.runs_on(common::ctx()));
    let choices: Vec<&GpuContext> =
        std::iter::once(common::ctx()).chain(every_fast.map(common::ctx_with_strategy)).collect();
    for case in convt::suite::CASES {
        let mut c = case.with_batch(1);
        c.in_hw = [c.in_hw[0].min(16), c.in_hw[1].min(12)];
        let shape =
            c.params.resolve(&c.input_dims(), &c.weight_dims(), c.bias.then_some(&[c.out_channels][..])).unwrap();
        let seed = common::fresh_seed();
        let x = Tensor::uniform(shape.input_dims(), -1.0, 1.0, seed).unwrap();
        let w = Tensor::uniform(shape.weight_dims(), -1.0, 1.0, seed ^ 1).unwrap();
        let b = c.bias.then(|| Tensor::uniform(vec![shape.out_channels], -1.0, 1.0, seed ^ 2).unwrap());
        let reference = cpu::conv_transpose2d_f64(&shape, x.data(), w.data(), b.as_ref().map(|b| b.data())).unwrap();
        for ctx in &choices {
            let (out, ran) = common::forward_host_as(ctx, Precision::Fast, &x, &w, b.as_ref(), &c.params).unwrap();
            let s = ErrorStats::compare(out.data(), &reference);
            assert!(s.rel_l2 <= 1e-3, "{}: {} rel L2 {:e} (seed {seed})", c.name, ran.name(), s.rel_l2);
            if ran.precision() == Precision::F32 {
                assert!(s.rel_l2 <= common::F32_TOLERANCE, "{}: exact {} rel L2 {:e}", c.name, ran.name(), s.rel_l2);
            }
        }
    }
}

#[test]
fn winograd_tensor_core_tiles_stay_within_1e_3() {
    // Every Winograd tensor-core tile this adapter runs (none without cooperative matrices), forced, on stride-1
    // problems it takes: 3-, 2- and 4-wide kernels, padding, dilation along H, rows that are not whole tiles, the
    // fewest channels it takes (16 in, the smallest K of its GEMMs); f32 tensors U(-1, 1), with one value of 3e6
    // (it alone sets the input's scale) and U(0, 1) as KernelBench draws inputs, and f16 tensors: within 1e-3
    // relative L2 of the float64 reference; bf16 tensors within twice the error of the reference rounded to bf16
    // (what any bf16 result errs by at least: PyTorch's too).
    let ctx = common::ctx();
    let tiles = Strategy::forced_only();
    assert!(tiles.iter().all(|s| matches!(s, Strategy::CoopWinograd(_))) && !tiles.is_empty());
    let problems = [
        ([2usize, 64, 24, 40], [64usize, 64, 3, 3], ConvTranspose2dOptions::default().padding(1)),
        ([2, 16, 20, 33], [16, 64, 3, 3], ConvTranspose2dOptions::default().dilation([2, 1])),
        ([1, 32, 18, 29], [32, 64, 2, 2], ConvTranspose2dOptions::default().padding([0, 1])),
        ([2, 32, 10, 21], [32, 64, 1, 4], ConvTranspose2dOptions::default().padding([0, 2])),
        ([1, 16, 12, 30], [16, 32, 3, 3], ConvTranspose2dOptions::default()),
    ];
    let mut ran = 0;
    for tile in tiles.into_iter().filter(|t| t.runs_on(ctx)) {
        let tctx = common::ctx_with_strategy(tile);
        for (input, weight, params) in &problems {
            let shape = params.resolve(input, weight, Some(&[weight[1]])).unwrap();
            if !tile.computes(tctx, &shape) {
                continue;
            }
            let seed = common::fresh_seed();
            let w = Tensor::uniform(weight.to_vec(), -1.0, 1.0, seed ^ 1).unwrap();
            let b = Tensor::uniform(vec![weight[1]], -1.0, 1.0, seed ^ 2).unwrap();
            let x = Tensor::uniform(input.to_vec(), -1.0, 1.0, seed).unwrap();
            let inputs = [
                ("U(-1, 1)", x.clone(), DType::F32),
                ("a huge value", with_huge_last_value(&x), DType::F32),
                ("U(0, 1)", Tensor::uniform(input.to_vec(), 0.0, 1.0, seed ^ 3).unwrap(), DType::F32),
                ("f16 tensors", x.clone(), DType::F16),
                ("bf16 tensors", x, DType::BF16),
            ];
            for (what, x, dtype) in inputs {
                let (x, w, b) = (x.to_dtype(dtype), w.clone().to_dtype(dtype), b.clone().to_dtype(dtype));
                let (out, chosen) = common::forward_host_as(tctx, Precision::Fast, &x, &w, Some(&b), params).unwrap();
                assert_eq!(chosen, tile);
                let reference = cpu::conv_transpose2d_f64(&shape, x.data(), w.data(), Some(b.data())).unwrap();
                let s = ErrorStats::compare(out.data(), &reference);
                let tolerance = match dtype {
                    DType::BF16 => {
                        let rounded: Vec<f32> = reference.iter().map(|&r| DType::BF16.round(r as f32)).collect();
                        (2.0 * ErrorStats::compare(&rounded, &reference).rel_l2).max(1e-3)
                    }
                    _ => 1e-3,
                };
                assert!(
                    s.rel_l2 <= tolerance,
                    "{} on {shape:?}, {what}: rel L2 {:e} > {tolerance:e} (seed {seed})",
                    tile.name(),
                    s.rel_l2
                );
                ran += 1;
            }
        }
    }
    assert_eq!(ran == 0, !ctx.has_coop_f16(), "{ran} runs");
}

#[test]
fn winograd_tensor_core_tiles_keep_non_finite_outputs() {
    // Every Winograd tensor-core tile this adapter runs (none without cooperative matrices), forced, on a stride-1
    // problem it takes, with one Inf in the input: every output the definition makes non-finite is non-finite (the
    // transforms may make more of the tile's outputs NaN: docs/RELIABILITY.md). (These tiles hold their copy and
    // transformed input in one binding each, so they take no problem whose tensors span several.)
    let ctx = common::ctx();
    let (input, weight) = ([2usize, 32, 12, 30], [32usize, 64, 3, 3]);
    let params = ConvTranspose2dOptions::default().padding(1);
    let shape = params.resolve(&input, &weight, None).unwrap();
    let mut ran = 0;
    for tile in Strategy::forced_only().into_iter().filter(|t| t.runs_on(ctx)) {
        let tctx = common::ctx_with_strategy(tile);
        if !tile.computes(tctx, &shape) {
            continue;
        }
        let seed = common::fresh_seed();
        let w = Tensor::uniform(weight.to_vec(), -1.0, 1.0, seed ^ 1).unwrap();
        let mut data = Tensor::uniform(input.to_vec(), -1.0, 1.0, seed).unwrap().data().to_vec();
        data[input[2] * input[3] + 5 * input[3] + 7] = f32::INFINITY; // sample 0, channel 1, row 5, column 7
        let x = Tensor::new(input.to_vec(), data).unwrap();
        let (out, chosen) = common::forward_host_as(tctx, Precision::Fast, &x, &w, None, &params).unwrap();
        assert_eq!(chosen, tile);
        let reference = cpu::conv_transpose2d_f64(&shape, x.data(), w.data(), None).unwrap();
        assert!(reference.iter().any(|r| !r.is_finite()));
        for (i, (&y, &r)) in out.data().iter().zip(&reference).enumerate() {
            assert!(r.is_finite() || !y.is_finite(), "{}: output {i} is {y}, the definition {r}", tile.name());
        }
        ran += 1;
    }
    assert_eq!(ran == 0, !ctx.has_coop_f16(), "{ran} runs");
}

#[test]
fn non_finite_values_propagate_as_in_the_exact_gemm() {
    // An inf and a NaN in the input: the outputs they reach are non-finite exactly where the exact GEMM kernel's
    // are, and the finite ones keep f16 accuracy (the scale is taken from the finite values only).
    let seed = common::fresh_seed();
    for k in fast_kernels(common::ctx()) {
        let p = problem_for(common::ctx(), k, seed);
        let (x, w, b) = p.tensors();
        let mut xd = x.data().to_vec();
        xd[5] = f32::INFINITY;
        xd[1000] = f32::NAN;
        xd[7] = 2.0e5; // a large finite value too: it, not the inf, sets the scale
        let x = Tensor::new(x.shape().to_vec(), xd).unwrap();
        let exact = common::forward_host(
            common::ctx_with_strategy(Strategy::from_name("gemm_64x64x16_4x8").unwrap()),
            &x,
            &w,
            b.as_ref(),
            &p.params,
        )
        .unwrap();
        let reference =
            cpu::conv_transpose2d_f64(&p.shape(), x.data(), w.data(), b.as_ref().map(|b| b.data())).unwrap();
        let (out, ran) = run_fast(common::ctx_with_strategy(k), &p, &x, &w, b.as_ref());
        assert_eq!(ran, k);
        let mut finite = (Vec::new(), Vec::new());
        for (i, (&o, &e)) in out.data().iter().zip(exact.data()).enumerate() {
            assert_eq!(o.is_finite(), e.is_finite(), "{}: element {i}: {o} vs exact {e}", k.name());
            assert_eq!(o.is_nan(), e.is_nan(), "{}: element {i}: {o} vs exact {e}", k.name());
            if o.is_finite() {
                finite.0.push(o);
                finite.1.push(reference[i]);
            }
        }
        assert!(finite.0.len() > out.numel() / 2, "{}: most outputs stay finite", k.name());
        let s = ErrorStats::compare(&finite.0, &finite.1);
        assert!(s.rel_l2 <= 1e-3, "{}: rel L2 of the finite outputs {:e}", k.name(), s.rel_l2);
    }
}

#[test]
fn fast_says_which_path_ran_and_falls_back() {
    let ctx = common::ctx();
    // Without a tuning cache, `fast` takes what measured fastest on the H100 (docs/PERFORMANCE.md, f4, f5, g7,
    // n3, c1-c12): at stride 1 the padded-NHWC tensor-core kernel where the adapter has cooperative matrices
    // (kb57-like, kb69-like; without them the exact Winograd kernel where its tile fits), the exact GEMM kernel
    // with fewer than 64 output channels per group at stride 2, the exact rows (gather) kernel on a kb81-like
    // problem, and the staged cooperative-matrix kernel on a strided decoder with 64+ channels (the padded-NHWC
    // kernel computes it too, per stride phase, but measured slower there: c11).
    let untuned = std::env::var_os("CONVT_STRATEGY").is_none() && ctx.tuned().entries.is_empty();
    let params = ConvTranspose2dOptions::default().stride(2).padding(1);
    let gemm_shape = params.resolve(&[1, 64, 10, 12], &[64, 32, 3, 3], Some(&[32])).unwrap();
    let params = ConvTranspose2dOptions::default().stride(5).padding(1).dilation(2);
    let kb81_like = params.resolve(&[1, 32, 6, 7], &[32, 64, 3, 3], None).unwrap();
    let kb57_like = ConvTranspose2dOptions::default().resolve(&[1, 64, 9, 11], &[64, 64, 3, 3], None).unwrap();
    let kb69_like = ConvTranspose2dOptions::default().resolve(&[1, 64, 9, 11], &[64, 128, 3, 5], None).unwrap();
    let params = ConvTranspose2dOptions::default().stride(2).padding(1).output_padding(1);
    let up2x_like = params.resolve(&[1, 64, 6, 7], &[64, 64, 3, 3], Some(&[64])).unwrap();
    if untuned {
        let exact = gpu::select::forward(ctx, &gemm_shape, true, Precision::F32, DType::F32);
        assert!(matches!(exact, Strategy::Gemm(_)), "{}", exact.name());
        assert_eq!(gpu::select::forward(ctx, &gemm_shape, true, Precision::Fast, DType::F32), exact);
        // At stride 1 (kb57_like, kb69_like) the padded-NHWC tensor-core kernel where the adapter has cooperative
        // matrices; without them on kb57_like the exact Winograd kernel wherever its tile fits.
        let winograd = gpu::select::forward(ctx, &kb57_like, false, Precision::F32, DType::F32);
        for shape in [&kb57_like, &kb69_like] {
            let chosen = gpu::select::forward(ctx, shape, false, Precision::Fast, DType::F32);
            if ctx.has_coop_f16() {
                assert!(matches!(chosen, Strategy::CoopNhwc(_)), "{}", chosen.name());
            } else if shape == &kb57_like && matches!(winograd, Strategy::Winograd(_)) {
                assert_eq!(chosen, winograd);
            }
        }
        // Without tensor cores, an f32 kernel (the GEMM, or the Winograd kernel on kb69_like).
        for (shape, bias) in [(&kb69_like, false), (&up2x_like, true)] {
            let chosen = gpu::select::forward(ctx, shape, bias, Precision::Fast, DType::F32);
            let ok = match ctx.has_coop_f16() {
                true => chosen.arithmetic().contains("tensor cores"),
                false => chosen.precision() == Precision::F32,
            };
            assert!(ok, "{} ({}) on {}", chosen.name(), chosen.arithmetic(), ctx.adapter_info().name);
        }
        if ctx.has_coop_f16() {
            let chosen = gpu::select::forward(ctx, &up2x_like, true, Precision::Fast, DType::F32);
            assert!(matches!(chosen, Strategy::Coop(_)), "{}", chosen.name());
        }
        for precision in [Precision::F32, Precision::Fast] {
            let chosen = gpu::select::forward(ctx, &kb81_like, false, precision, DType::F32);
            assert!(matches!(chosen, Strategy::Rows(_)), "{}", chosen.name());
        }
    }
    // What ran is reported: a forced f16 kernel says so.
    for k in fast_kernels(ctx) {
        let p = problem_for(ctx, k, 2);
        let (x, w, b) = p.tensors();
        let (_, ran) = run_fast(common::ctx_with_strategy(k), &p, &x, &w, b.as_ref());
        assert_eq!(ran, k);
        assert!(ran.arithmetic().contains("f16"), "{}", ran.arithmetic());
    }
    // A kernel the adapter lacks is refused with an error, never run.
    let shape = mixed_problem(0).shape();
    let (x, w, b) = mixed_problem(1).tensors();
    for s in Strategy::fast_candidates().into_iter().filter(|s| !s.runs_on(ctx)) {
        let out = convt::GpuTensor::empty(ctx, &shape.output_dims()).unwrap();
        let (xg, wg) = (convt::GpuTensor::upload(ctx, &x).unwrap(), convt::GpuTensor::upload(ctx, &w).unwrap());
        let bg = b.as_ref().map(|b| convt::GpuTensor::upload(ctx, b).unwrap());
        let e = gpu::conv_transpose2d_into(
            ctx,
            &xg,
            &wg,
            bg.as_ref(),
            &mixed_problem(1).params,
            &out,
            gpu::Run { kernel: Some(s), ..Default::default() },
        )
        .unwrap_err();
        assert!(e.to_string().contains("cannot run on"), "{}: {e}", s.name());
    }
    // The exact precision never picks an f16 kernel.
    assert_eq!(gpu::select::forward(ctx, &gemm_shape, true, Precision::F32, DType::F32).precision(), Precision::F32);
}

#[test]
fn the_layer_runs_at_its_precision() {
    // On a context whose forced kernel is an f16 one (it applies to calls at precision `fast` only), the layer at
    // `fast` runs it and the same layer at `f32` runs an exact kernel; on the plain context, `fast` stays within
    // 1e-3 whatever the selector picks.
    let plain = common::ctx();
    let kernels = fast_kernels(plain);
    let forced = kernels.first().map(|k| common::ctx_with_strategy(*k));
    let options = ConvTranspose2dOptions::default().stride(2).padding(1).output_padding(1).precision(Precision::Fast);
    let mut layer = ConvTranspose2d::new(64, 32, 3, options, common::fresh_seed()).unwrap();
    assert_eq!(layer.precision(), Precision::Fast);
    assert_eq!(layer.options().precision, Precision::Fast);
    let x = Tensor::uniform(vec![2, 64, 10, 7], -1.0, 1.0, common::fresh_seed()).unwrap();
    let reference = layer.forward_cpu(&x).unwrap();
    let as_f64: Vec<f64> = reference.data().iter().map(|&v| v as f64).collect();
    let err = |ctx: &GpuContext, layer: &ConvTranspose2d| {
        ErrorStats::compare(layer.forward(ctx, &x).unwrap().data(), &as_f64).rel_l2
    };
    assert!(err(plain, &layer) <= 1e-3);
    let ctx = forced.unwrap_or(plain);
    let fast = err(ctx, &layer);
    let gpu_layer = layer.to_gpu(ctx).unwrap();
    let resident = gpu_layer.forward(&convt::GpuTensor::upload(ctx, &x).unwrap()).unwrap().download(ctx).unwrap();
    assert_eq!(gpu_layer.to_host().unwrap().precision(), Precision::Fast);
    let resident = ErrorStats::compare(resident.data(), &as_f64).rel_l2;
    layer.set_precision(Precision::F32);
    let exact = err(ctx, &layer);
    assert!(fast <= 1e-3 && resident <= 1e-3, "fast: {fast:e}, {resident:e}");
    assert!(exact <= common::F32_TOLERANCE, "exact: {exact:e}");
    if forced.is_some() {
        // The fast path really rounded to f16: its error is that of f16, far above the exact one's.
        assert!(fast > 10.0 * exact && resident > 10.0 * exact, "fast {fast:e}, {resident:e} vs exact {exact:e}");
    }
}

#[test]
fn padded_nhwc_kernel_takes_every_stride_with_every_option() {
    // The padded-NHWC tensor-core kernel (one group, one dispatch per stride phase) on shapes that move its
    // padding and phases: H != W, kernels wider than tall and taller than wide, strides 1 to 5 (per axis), kernels
    // smaller than the stride (phases without taps, bias only), dilation sharing a factor with the stride, padding
    // from none to beyond dilation*(kernel - 1), output padding, bias, a batch. Each of its tiles, against the f16
    // rounding bound; then with output bindings of one sample (a dispatch per output chunk). Where the adapter
    // has no cooperative matrices the kernel cannot run and the selector never picks it
    // (fast_says_which_path_ran_and_falls_back checks the refusal); the index math is checked on the CPU too
    // (coop_nhwc's unit test).
    let problem = |input: [usize; 4], weight: [usize; 4], stride, padding, output_padding, dilation, bias| Problem {
        input: input.to_vec(),
        weight: weight.to_vec(),
        bias,
        params: ConvTranspose2dOptions { stride, padding, output_padding, dilation, groups: 1, ..Default::default() },
        seed: common::fresh_seed(),
    };
    let problems = [
        problem([3, 32, 11, 17], [32, 64, 3, 5], [1, 1], [0, 0], [0, 0], [1, 1], true),
        problem([2, 16, 20, 7], [16, 32, 4, 2], [1, 1], [3, 1], [0, 0], [1, 1], false),
        problem([1, 48, 9, 30], [48, 64, 2, 3], [1, 1], [1, 2], [1, 1], [2, 2], true),
        problem([4, 16, 5, 6], [16, 128, 1, 1], [1, 1], [0, 0], [0, 0], [1, 1], true),
        problem([2, 32, 7, 9], [32, 64, 3, 3], [1, 1], [4, 1], [0, 0], [1, 1], true),
        problem([3, 32, 9, 6], [32, 64, 3, 3], [2, 2], [1, 1], [1, 1], [1, 1], true),
        problem([4, 16, 5, 5], [16, 128, 4, 4], [2, 2], [1, 1], [0, 0], [1, 1], false),
        problem([2, 16, 6, 10], [16, 32, 3, 5], [2, 3], [1, 2], [0, 0], [2, 1], true),
        problem([2, 32, 4, 7], [32, 64, 3, 3], [5, 5], [1, 1], [0, 0], [2, 2], true),
        problem([1, 16, 5, 4], [16, 32, 2, 3], [4, 2], [0, 3], [3, 1], [2, 4], true),
        // Staged tiles: input channels staged in slices (96: three of 32), a kernel row's taps in two stages
        // (dilation 9 along W: two taps within the staged rows' halo of 16 pixels; dilation 16: two taps that fill
        // the staged rows to their capacity, with 128 output channels for the 128 x 128 tile).
        problem([2, 96, 6, 20], [96, 64, 2, 3], [1, 1], [0, 1], [0, 0], [1, 9], true),
        problem([2, 96, 4, 40], [96, 128, 1, 3], [1, 1], [0, 1], [0, 0], [1, 16], true),
        // The epilogue's stores straight to the output (`direct_run`): output rows of 60 (a multiple of 4) in
        // padded rows of 64, so three of each row's four 16-pixel fragments are consecutive aligned outputs and the
        // fourth crosses the row's end (with and without bias: the bias as a matrix); rows of 26 in a plane of 104,
        // so only even rows start 16-byte aligned.
        problem([2, 16, 6, 56], [16, 128, 3, 5], [1, 1], [0, 0], [0, 0], [1, 1], true),
        problem([3, 32, 5, 56], [32, 64, 2, 5], [1, 1], [0, 0], [0, 0], [1, 1], false),
        problem([2, 16, 4, 22], [16, 32, 1, 5], [1, 1], [0, 0], [0, 0], [1, 1], true),
    ];
    let ctx = common::ctx();
    let tiles: Vec<Strategy> = fast_kernels(ctx).into_iter().filter(|k| matches!(k, Strategy::CoopNhwc(_))).collect();
    assert_eq!(tiles.is_empty(), !ctx.has_coop_f16(), "every padded-NHWC tile runs where tensor cores are");
    for p in problems {
        let shape = p.shape();
        let (x, w, b) = p.tensors();
        let taking = tiles.iter().filter(|t| t.takes_shape(ctx, &shape)).count();
        assert!(tiles.is_empty() || taking >= 1, "no padded-NHWC tile takes {p:?}");
        // Bindings of one output sample (or of the weight or an input sample, where larger: those must fit).
        let sample_bytes = (4 * shape.out_channels * shape.out_hw[0] * shape.out_hw[1])
            .max(4 * w.numel())
            .max(4 * x.numel() / shape.batch);
        for &k in tiles.iter().filter(|t| t.takes_shape(ctx, &shape)) {
            for limited in [false, true] {
                let one_sample = common::ctx_with_binding_limit(sample_bytes as u64, Some(k));
                let run_ctx = if limited { &one_sample } else { common::ctx_with_strategy(k) };
                let (out, ran) = run_fast(run_ctx, &p, &x, &w, b.as_ref());
                let what = format!("{} on {p:?} (bindings of one sample: {limited})", k.name());
                if limited && ran != k {
                    // The padded input no longer fits one binding of this size: the kernel declines the shape.
                    assert!(!k.takes_shape(&one_sample, &shape), "{what}: {} ran instead", ran.name());
                } else {
                    assert_eq!(ran, k, "{what}");
                }
                check_within_f16_rounding(&shape, &x, &w, b.as_ref(), &out).unwrap_or_else(|e| panic!("{what}: {e}"));
            }
        }
    }
}

#[test]
fn padded_nhwc_kernel_refuses_what_it_cannot_compute() {
    // On any adapter: the shape test of the padded-NHWC kernel answers with an error, never a panic or a wrong
    // answer, for groups, channel counts off its tiles and sizes beyond 32-bit indexing (hostile dilation); and it
    // takes plain shapes at strides 1 and 2, padding beyond dilation * (kernel - 1) and a stride of 2^31 - 4
    // (promptly). Forced on a shape it refuses, the selector runs another kernel.
    let ctx = common::ctx();
    let p = |stride: i64, padding: i64, dilation: i64, groups: i64| ConvTranspose2dOptions {
        stride: [stride, 1],
        padding: [padding, 0],
        output_padding: [0, 0],
        dilation: [dilation, 1],
        groups,
        ..Default::default()
    };
    let refused = [
        p(1, 0, 1, 2).resolve(&[1, 32, 5, 6], &[32, 64, 3, 3], None).unwrap(),
        p(1, 0, 1, 1).resolve(&[1, 24, 5, 6], &[24, 64, 3, 3], None).unwrap(),
        p(1, 0, 1, 1).resolve(&[1, 16, 5, 6], &[16, 48, 3, 3], None).unwrap(),
        p(1, 1 << 40, 1 << 40, 1).resolve(&[1, 16, 4, 6], &[16, 64, 3, 3], None).unwrap(),
    ];
    let taken = [
        p(1, 1, 2, 1).resolve(&[2, 16, 5, 6], &[16, 64, 3, 3], None).unwrap(),
        p(2, 0, 1, 1).resolve(&[1, 16, 5, 6], &[16, 64, 3, 3], None).unwrap(),
        p(1, 3, 1, 1).resolve(&[1, 16, 9, 6], &[16, 64, 3, 3], None).unwrap(),
        // A stride far beyond the output: its few phases with outputs are found at once.
        p((1 << 31) - 4, 0, 1, 1).resolve(&[1, 16, 1, 2], &[16, 64, 2, 2], None).unwrap(),
    ];
    // Every padded-NHWC tile, whether or not this adapter runs it (the shape test needs no tensor cores). The tiles
    // whose channel tile divides 64 output channels take every shape of `taken`.
    let tiles: Vec<Strategy> =
        Strategy::fast_candidates().into_iter().filter(|k| matches!(k, Strategy::CoopNhwc(_))).collect();
    let plain = p(1, 0, 1, 1).resolve(&[1, 16, 5, 6], &[16, 64, 3, 3], None).unwrap();
    assert!(tiles.iter().any(|t| t.takes_shape(ctx, &plain)), "no tile takes 64 output channels");
    for t in &tiles {
        for shape in &refused {
            assert!(!t.takes_shape(ctx, shape), "{} takes {shape:?}", t.name());
        }
        for shape in taken.iter().filter(|_| t.takes_shape(ctx, &plain)) {
            assert!(t.takes_shape(ctx, shape), "{} does not take {shape:?}", t.name());
        }
    }
    // Forced on the groups it refuses, another kernel computes it, exactly.
    let forced = common::ctx_with_strategy(tiles[0]);
    let params = p(1, 1, 1, 2);
    let problem = Problem { input: vec![1, 32, 9, 6], weight: vec![32, 64, 3, 3], bias: true, params, seed: 5 };
    let (x, w, b) = problem.tensors();
    let (out, ran) = common::forward_host_as(forced, Precision::Fast, &x, &w, b.as_ref(), &params).unwrap();
    assert_ne!(ran, tiles[0]);
    check_within_f16_rounding(&problem.shape(), &x, &w, b.as_ref(), &out).unwrap();
}

#[test]
fn small_values_beside_a_huge_one_keep_the_subnormal_bound() {
    // Found by the property test above: one input value of 3e6 (in a cropped row, so it reaches no output) sets
    // the input's scale, and values near 1e-4 then fall below f16's normal range. Their error is f16's
    // subnormal spacing (2^-39 of the largest), which the bound must and does account for.
    let p = Problem {
        input: vec![2, 2, 5, 3],
        weight: vec![2, 2, 1, 2],
        bias: false,
        params: ConvTranspose2dOptions {
            stride: [1, 2],
            padding: [1, 0],
            output_padding: [0, 0],
            dilation: [1, 1],
            groups: 2,
            ..Default::default()
        },
        seed: 10836812742017280201,
    };
    let (x, w, b) = p.tensors();
    let x = with_huge_last_value(&x);
    for k in fast_kernels(common::ctx()) {
        let (out, _) = run_fast(common::ctx_with_strategy(k), &p, &x, &w, b.as_ref());
        check_within_f16_rounding(&p.shape(), &x, &w, b.as_ref(), &out).unwrap_or_else(|e| panic!("{}: {e}", k.name()));
    }
}
