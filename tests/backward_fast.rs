//! The backward pass at precision `fast` (f16 operands scaled by a power of two per tensor, f32 sums): every fast
//! grad_weight and grad_input kernel this adapter runs, forced, against the float64 reference element by element
//! within what rounding both operands to f16 can cost (and within 1e-3 relative L2) on random problems covering
//! every option, also with tensors split over several bindings; range safety (tiny and large gradients, values near
//! f16's largest, the scale's cap) and non-finite values; the same bits on every run; half-precision tensors and
//! f32 gradients for an f32 master weight; the GPU dtype conversion (`GpuTensor::to_dtype`) against the host's; the
//! selectors at `fast`, with and without a tuning cache; and `convt verify --backward --precision fast`.
//!
//! On Mesa's software driver (SHADER_F16, no cooperative matrices) the fast kernels that run are grad_weight's FMA
//! tile (`grad_weight_f16_64x64x32`) and grad_input's f16-operand GEMM tiles, on the transposed convolution (stride 1)
//! and on the sampled correlation (any stride). The tensor-core tiles (`grad_weight_coop_*`, and grad_input's
//! cooperative-matrix and padded-NHWC kernels) are checked by this same binary on an adapter with cooperative
//! matrices: every test loops over whatever kernels the adapter runs.

mod common;

use common::cli::{convt_ok, describe, text};
use common::problems::{self, Problem};
use convt::gpu::tune::{Pass, TuneCache, TuneEntry, TuneKey};
use convt::gpu::{self, select, BackwardRun, GpuOptions, GradInputKernel, GradWeightKernel, Strategy};
use convt::{
    cpu, ConvShape, ConvTranspose2dOptions, ConvtError, DType, ErrorStats, GpuContext, GpuGradients, GpuTensor,
    Gradients, Precision, Tensor,
};
use proptest::prelude::*;
use proptest::strategy::Strategy as _;

/// Unit roundoff of f16 (11 significant bits, round to nearest).
const F16_ROUNDOFF: f64 = 1.0 / 2048.0;
/// Unit roundoff of f32.
const F32_ROUNDOFF: f64 = 1.0 / 16_777_216.0;
/// Relative slack of exact f32 kernels against the sum of the terms' magnitudes (tests/dtype.rs's: f32 sums, and
/// the Winograd kernel's transforms, which round a little more).
const F32_SUM_SLACK: f64 = 1e-5;
/// The relative L2 error a fast gradient must reach (as the forward at `fast`).
const FAST_TOLERANCE: f64 = 1e-3;
/// Tensors with fewer elements than this are held to the element-wise bound only: on a handful of elements, a sum
/// that happens to nearly cancel can put even a correctly rounded result above 1e-3 in relative L2 (the element
/// bound does not depend on cancellation).
const REL_L2_MIN_ELEMENTS: usize = 100;

const HALVES: [DType; 2] = [DType::F16, DType::BF16];

fn p2(e: i32) -> f64 {
    2f64.powi(e)
}

// ---------------------------------------------------------------------------------------------------------
// The kernels, the problems, the runs
// ---------------------------------------------------------------------------------------------------------

/// The fast grad_weight kernels this adapter runs on `shape` (the per-tap tiles take every shape, the NHWC tiles
/// one group of whole channel tiles).
fn fast_grad_weight_kernels(ctx: &GpuContext, shape: &ConvShape) -> Vec<GradWeightKernel> {
    GradWeightKernel::all()
        .into_iter()
        .filter(|k| k.precision() == Precision::Fast && k.computes(ctx, shape, [1, 1]))
        .collect()
}

/// The fast grad_input kernels that compute `shape` on this adapter: each f16 strategy it runs on the transposed
/// convolution (stride 1, see `GradInputKernel::transposed_problem`) and on the sampled correlation (any stride).
fn fast_grad_input_kernels(ctx: &GpuContext, shape: &ConvShape) -> Vec<GradInputKernel> {
    Strategy::fast_candidates()
        .into_iter()
        .filter(|s| s.runs_on(ctx))
        .flat_map(|s| [GradInputKernel::Transposed(s), GradInputKernel::Sampled(s)])
        .filter(|k| k.computes(ctx, shape))
        .collect()
}

/// `problem` made one whose grad_input is a transposed convolution (stride 1, no output padding, padding within
/// dilation * (kernel - 1)), if its output is not empty then.
fn transposable(mut p: Problem) -> Option<Problem> {
    p.params.stride = [1, 1];
    p.params.output_padding = [0, 0];
    for a in 0..2 {
        p.params.padding[a] %= p.params.dilation[a] * (p.weight[2 + a] as i64 - 1) + 1;
    }
    let cout = p.weight[1] * p.params.groups as usize;
    p.params.resolve(&p.input, &p.weight, p.bias.then_some(&[cout][..])).ok().map(|_| p)
}

/// Random valid problems covering every option (batch, groups, stride, padding, output padding, dilation, bias, odd
/// sizes), wider than `common::problems` (up to 40 channels, 12 pixels a side); half of them with stride 1 and
/// padding within the kernel's reach, where grad_input is a transposed convolution.
fn fast_problems() -> impl proptest::strategy::Strategy<Value = Problem> {
    let drawn = (1usize..=4)
        .prop_flat_map(|g| (Just(g), 1usize..=40 / g, 1usize..=40 / g))
        .prop_flat_map(|(g, cig, cog)| {
            (
                (1usize..=3, Just(g), Just(cig), Just(cog)), // batch, groups, in and out per group
                (1usize..=12, 1usize..=12, 1usize..=5, 1usize..=5), // H, W, kH, kW
                ([1i64..=4, 1i64..=4], [1i64..=3, 1i64..=3]), // stride, dilation
                ([0i64..=3, 0i64..=3], [0i64..=3, 0i64..=3], any::<bool>(), any::<u64>()),
            )
        })
        .prop_filter_map("output must be non-empty", problems::problem_of);
    (drawn, any::<bool>()).prop_filter_map("stride 1 must leave an output", |(p, stride_1)| match stride_1 {
        true => transposable(p),
        false => Some(p),
    })
}

/// The tensors of a backward call on the host: the input, the weight, the bias and grad_output.
#[derive(Clone)]
struct Operands {
    x: Tensor,
    w: Tensor,
    b: Option<Tensor>,
    go: Tensor,
}

/// The problem's tensors (U(-1, 1) with its seed) and a random grad_output of the output's size.
fn operands(p: &Problem) -> Operands {
    let (x, w, b) = p.tensors();
    let go = Tensor::uniform(p.shape().output_dims_as_given(), -1.0, 1.0, p.seed ^ 3).unwrap();
    Operands { x, w, b, go }
}

fn scaled(t: &Tensor, factor: f32) -> Tensor {
    Tensor::new(t.shape().to_vec(), t.data().iter().map(|v| v * factor).collect()).unwrap().to_dtype(t.dtype())
}

impl Operands {
    fn to_dtype(&self, dtype: DType) -> Self {
        Self {
            x: self.x.clone().to_dtype(dtype),
            w: self.w.clone().to_dtype(dtype),
            b: self.b.clone().map(|b| b.to_dtype(dtype)),
            go: self.go.clone().to_dtype(dtype),
        }
    }
}

/// What a backward call gave: the gradients and the kernels that ran.
struct Ran {
    grads: Gradients,
    grad_input: GradInputKernel,
    grad_weight: GradWeightKernel,
}

/// The backward of `o` with `params` at `precision` on `ctx`, with the kernels given (the selector's where `None`),
/// into gradients of the tensors' dtype, or with f32 weight and bias gradients (`GpuGradients::
/// empty_with_f32_weight`) where `f32_master`.
#[allow(clippy::too_many_arguments)]
fn backward(
    ctx: &GpuContext,
    params: &ConvTranspose2dOptions,
    o: &Operands,
    precision: Precision,
    grad_input: Option<GradInputKernel>,
    grad_weight: Option<GradWeightKernel>,
    f32_master: bool,
) -> convt::Result<Ran> {
    let params = params.precision(precision);
    let up = |t: &Tensor| GpuTensor::upload(ctx, t);
    let (x, w, go) = (up(&o.x)?, up(&o.w)?, up(&o.go)?);
    let b = o.b.as_ref().map(up).transpose()?;
    let grads = match f32_master {
        true => GpuGradients::empty_with_f32_weight(ctx, &x, &w, b.as_ref(), &params)?,
        false => GpuGradients::empty(ctx, &x, &w, b.as_ref(), &params)?,
    };
    let run = BackwardRun { grad_input, grad_weight, ..Default::default() };
    let (gi, gw) = gpu::conv_transpose2d_backward_into(ctx, &x, &w, b.as_ref(), &go, &params, &grads, run)?;
    Ok(Ran { grads: grads.download(ctx)?, grad_input: gi, grad_weight: gw })
}

// ---------------------------------------------------------------------------------------------------------
// What a gradient may err by
// ---------------------------------------------------------------------------------------------------------

/// How a gradient was computed, for its bound.
#[derive(Debug, Clone, Copy)]
enum Arithmetic {
    /// An exact kernel: f32 sums of the exact products (the Winograd kernel's transforms round a little more),
    /// within `F32_SUM_SLACK` of the terms' magnitudes.
    Exact,
    /// f16 operands, each tensor scaled by a power of two, f32 sums. `roundoff` is each operand's relative
    /// rounding: f16's unit roundoff for f32 tensors; 0 for f16 and bf16 tensors, whose values (at most 11
    /// significant bits) f16 holds exactly once scaled into its normal range.
    F16 { roundoff: f64 },
}

/// A gradient that is a sum of products a * b of two tensors' values (grad_weight: the input and grad_output;
/// grad_input: grad_output and the weight; grad_bias: grad_output and ones), with what its bound needs, per element.
struct Reference {
    /// The float64 gradient.
    exact: Vec<f64>,
    /// The sum of |a| |b| over the element's terms.
    magnitude: Vec<f64>,
    /// The sum of Ma |b| + |a| Mb over the element's terms, Ma and Mb the tensors' largest finite magnitudes.
    subnormal: Vec<f64>,
    /// The number of the element's terms.
    terms: Vec<f64>,
    /// Ma * Mb.
    largest_product: f64,
}

fn abs(t: &Tensor) -> Vec<f32> {
    t.data().iter().map(|v| v.abs()).collect()
}

/// The largest finite magnitude of `t`, as the fast kernels' scales see it (non-finite values do not count).
fn largest(t: &Tensor) -> f32 {
    t.data().iter().filter(|v| v.is_finite()).fold(0f32, |m, v| m.max(v.abs()))
}

impl Reference {
    /// The gradient `f(a, b)`, bilinear in `a` and `b`, evaluated in float64.
    fn new(a: &Tensor, b: &Tensor, f: impl Fn(&[f32], &[f32]) -> Vec<f64>) -> Self {
        let (ma, mb) = (largest(a), largest(b));
        let everywhere = |m: f32, t: &Tensor| vec![m; t.numel()];
        let (abs_a, abs_b) = (abs(a), abs(b));
        let sub_a = f(&everywhere(ma, a), &abs_b);
        let sub_b = f(&abs_a, &everywhere(mb, b));
        Self {
            exact: f(a.data(), b.data()),
            magnitude: f(&abs_a, &abs_b),
            subnormal: sub_a.iter().zip(&sub_b).map(|(x, y)| x + y).collect(),
            terms: f(&everywhere(1.0, a), &everywhere(1.0, b)),
            largest_product: ma as f64 * mb as f64,
        }
    }

    fn grad_input(shape: &ConvShape, o: &Operands) -> Self {
        Self::new(&o.go, &o.w, |go, w| cpu::grad_input_f64(shape, go, w).unwrap())
    }

    fn grad_weight(shape: &ConvShape, o: &Operands) -> Self {
        Self::new(&o.x, &o.go, |x, go| cpu::grad_weight_f64(shape, x, go).unwrap())
    }

    /// grad_bias: sums of grad_output, always exact f32 (the bound's f16 terms are not used for it).
    fn grad_bias(shape: &ConvShape, o: &Operands) -> Self {
        let ones = Tensor::new(vec![1], vec![1.0]).unwrap();
        Self::new(&o.go, &ones, |go, _| cpu::grad_bias_f64(shape, go).unwrap())
    }

    /// What element `i` of a gradient computed with `arithmetic` may err by, before any rounding of the result to a
    /// half-precision dtype.
    ///
    /// With f16 operands (`Arithmetic::F16`): each tensor is scaled by 2^k so that its largest finite magnitude M
    /// lies in [2^14, 2^15) (shaders/common/scale.wgsl), then rounded to f16. A scaled value in f16's normal range
    /// (down to 2^-14, i.e. 2^-28 of M) errs by at most u |v| relatively; one below it (an f16 subnormal) by at
    /// most half the subnormal spacing, 2^-25 in scaled units, M 2^-39 in its own. So |a' - a| <= u|a| + Ma 2^-39
    /// (either case), and a product of two rounded operands
    ///   |a'b' - ab| <= |a' - a| |b'| + |a| |b' - b|
    ///              <= (2u + u^2) |a||b| + (1 + u) 2^-39 (Ma |b| + |a| Mb) + Ma Mb 2^-78,
    /// summed over the element's terms: (2u + u^2) magnitude + (1 + u) 2^-39 subnormal + terms Ma Mb 2^-78. (Where
    /// the scale is capped, for tensors whose largest magnitude lies below 2^-113, the f32 values, multiples of
    /// 2^-149, scale to multiples of 2^-22 that f16 holds exactly below its normal range: the bound still holds.)
    /// The products of f16 values are exact in f32 and the unscaling multiplies by a power of two (exact); what
    /// remains is the f32 sums of the rounded products, whose magnitudes add up to at most (1 + 2u + u^2) magnitude
    /// plus 2^-38 subnormal: summed in any order (per tile, per split of K, then the splits), n terms err by at most
    /// about (n - 1) f32 roundoffs of that. The bound takes 2 (n + 1): twice what sums rounded to nearest need, so
    /// that accumulators that truncate (up to one f32 ulp per addition, as tensor cores' may) are covered too. A
    /// result or partial sum in f32's subnormal range may be flushed to zero by the GPU: at most 2^-126 per
    /// addition. The float64 reference's own rounding is far below 1e-12 of the magnitude.
    fn bound(&self, i: usize, arithmetic: Arithmetic) -> f64 {
        let (mag, n) = (self.magnitude[i], self.terms[i]);
        let flushed = (n + 1.0) * p2(-126);
        match arithmetic {
            Arithmetic::Exact => F32_SUM_SLACK * mag + flushed,
            Arithmetic::F16 { roundoff: u } => {
                let per_product = 2.0 * u + u * u;
                let operands =
                    per_product * mag + (1.0 + u) * p2(-39) * self.subnormal[i] + n * self.largest_product * p2(-78);
                let sums = 2.0 * (n + 1.0) * F32_ROUNDOFF * ((1.0 + per_product) * mag + p2(-38) * self.subnormal[i]);
                operands + sums + flushed + 1e-12 * mag
            }
        }
    }

    /// Checks `got` element by element: within [`Self::bound`], plus half a unit in the last place of its dtype
    /// where that is f16 or bf16 (the f32 sum rounded once to it); every element finite; and within `rel_l2` of the
    /// reference in relative L2 where it has at least `REL_L2_MIN_ELEMENTS` elements.
    fn check(&self, what: &str, got: &Tensor, arithmetic: Arithmetic, rel_l2: f64) -> Result<(), String> {
        if got.numel() != self.exact.len() {
            return Err(format!("{what}: {} elements, the reference {}", got.numel(), self.exact.len()));
        }
        for (i, (&y, &r)) in got.data().iter().zip(&self.exact).enumerate() {
            let y = y as f64;
            let ulp = match got.dtype() {
                DType::F32 => 0.0,
                dtype => 0.5 * ulp(dtype, r.abs().max(y.abs())),
            };
            let bound = self.bound(i, arithmetic) + ulp;
            let err = (y - r).abs();
            #[allow(clippy::neg_cmp_op_on_partial_ord)] // a NaN error must fail too
            if !(err <= bound) {
                return Err(format!(
                    "{what}: element {i} is {y}, the reference {r} (error {err:e} > bound {bound:e}, {arithmetic:?})"
                ));
            }
        }
        let s = ErrorStats::compare(got.data(), &self.exact);
        if s.non_finite > 0 || (got.numel() >= REL_L2_MIN_ELEMENTS && s.rel_l2 > rel_l2) {
            return Err(format!("{what}: {s:?} (relative L2 at most {rel_l2:e})"));
        }
        Ok(())
    }
}

/// The spacing of `dtype`'s values around |v| (f16's subnormals below 2^-14), as tests/dtype.rs has it.
fn ulp(dtype: DType, v: f64) -> f64 {
    let e = v.abs().max(f64::MIN_POSITIVE).log2().floor();
    match dtype {
        DType::F32 => 2f64.powf(e - 23.0).max(p2(-149)),
        DType::F16 => 2f64.powf(e - 10.0).max(p2(-24)),
        DType::BF16 => 2f64.powf(e - 7.0).max(p2(-133)),
    }
}

/// The arithmetic of a kernel of `precision` on tensors of `dtype`.
fn arithmetic(precision: Precision, dtype: DType) -> Arithmetic {
    match (precision, dtype) {
        (Precision::F32, _) => Arithmetic::Exact,
        (Precision::Fast, DType::F32) => Arithmetic::F16 { roundoff: F16_ROUNDOFF },
        (Precision::Fast, _) => Arithmetic::F16 { roundoff: 0.0 },
    }
}

/// The tolerance in relative L2 of a kernel of `precision` (a half-precision result adds its dtype's roundoff).
fn tolerance(precision: Precision, dtype: DType) -> f64 {
    let rounding = match dtype {
        DType::F32 => 0.0,
        DType::F16 => p2(-11),
        DType::BF16 => p2(-8),
    };
    rounding
        + match precision {
            Precision::F32 => common::F32_TOLERANCE,
            Precision::Fast => FAST_TOLERANCE,
        }
}

/// Checks the three gradients `ran` gave for `o` (tensors of one dtype) against the float64 reference, each within
/// the bound of the kernel that computed it (grad_bias is always an exact f32 sum).
fn check_gradients(shape: &ConvShape, o: &Operands, ran: &Ran) -> Result<(), String> {
    let dtype = o.x.dtype();
    let g = &ran.grads;
    if g.grad_input.shape() != &shape.input_dims_as_given()[..] || g.grad_weight.shape() != &shape.weight_dims()[..] {
        return Err(format!("gradient shapes {:?}, {:?}", g.grad_input.shape(), g.grad_weight.shape()));
    }
    let gi = ran.grad_input.precision();
    Reference::grad_input(shape, o).check(
        &format!("grad_input ({})", ran.grad_input.name()),
        &g.grad_input,
        arithmetic(gi, dtype),
        tolerance(gi, dtype),
    )?;
    let gw = ran.grad_weight.precision();
    let what = format!("grad_weight ({})", ran.grad_weight.name());
    let gw_dtype = g.grad_weight.dtype();
    Reference::grad_weight(shape, o).check(&what, &g.grad_weight, arithmetic(gw, dtype), tolerance(gw, gw_dtype))?;
    match (&g.grad_bias, &o.b) {
        (Some(gb), Some(_)) => Reference::grad_bias(shape, o).check(
            "grad_bias",
            gb,
            Arithmetic::Exact,
            tolerance(Precision::F32, gb.dtype()),
        ),
        (None, None) => Ok(()),
        _ => Err("grad_bias present exactly when the bias is".into()),
    }
}

/// Deterministic problems with every option. Strided: H != W, asymmetric kernel, stride, padding, output padding,
/// dilation, two groups, bias, odd sizes.
fn strided_problem(seed: u64) -> Problem {
    let params = ConvTranspose2dOptions::default()
        .stride([2, 3])
        .padding([1, 0])
        .output_padding([1, 2])
        .dilation([1, 2])
        .groups(2);
    Problem { input: vec![2, 12, 7, 9], weight: vec![12, 5, 3, 2], bias: true, params, seed }
}

/// Stride 1 with padding within the kernel's reach (grad_input a transposed convolution): dilation, groups, bias.
fn stride_one_problem(seed: u64) -> Problem {
    let params = ConvTranspose2dOptions::default().padding([1, 2]).dilation([2, 1]).groups(2);
    let p = Problem { input: vec![2, 10, 8, 7], weight: vec![10, 6, 3, 4], bias: true, params, seed };
    assert!(GradInputKernel::transposed_problem(&p.shape()).is_some());
    p
}

/// One group of channels that are multiples of 16, the shapes grad_weight's NHWC GEMM takes
/// (src/gpu/backward/grad_weight_nhwc.rs): strided along both axes, padded, output-padded and dilated, a row of 19
/// pixels (the copy rounds it to two blocks of 16), a 3 x 3 kernel (the 4-tap groups end past its taps); 16 output
/// channels, which only its 16 x 16 tiles take.
fn nhwc_problem(seed: u64) -> Problem {
    let params =
        ConvTranspose2dOptions::default().stride([2, 3]).padding([1, 2]).output_padding([1, 0]).dilation([1, 2]);
    Problem { input: vec![2, 32, 5, 19], weight: vec![32, 16, 3, 3], bias: true, params, seed }
}

/// The NHWC GEMM's other side: stride 1 and no padding, 64 channels in and out (every tile of it takes them),
/// rows of 19 pixels, so that the zero pixels the copy adds past each row meet real grad_output values.
fn nhwc_wide_problem(seed: u64) -> Problem {
    let params = ConvTranspose2dOptions::default();
    Problem { input: vec![2, 64, 5, 19], weight: vec![64, 64, 3, 3], bias: true, params, seed }
}

/// A grad_input kernel and a grad_weight kernel to force (the selector's where `None`).
type Pair = (Option<GradInputKernel>, Option<GradWeightKernel>);

/// The fast kernels of both gradients on `p`, paired so that each is forced at least once: (grad_input's,
/// grad_weight's), `None` where the adapter runs no fast kernel for that gradient.
fn kernel_pairs(ctx: &GpuContext, p: &Problem) -> Vec<Pair> {
    let shape = p.shape();
    let (gi, gw) = (fast_grad_input_kernels(ctx, &shape), fast_grad_weight_kernels(ctx, &shape));
    (0..gi.len().max(gw.len()).max(1))
        .map(|i| (gi.get(i % gi.len().max(1)).copied(), gw.get(i % gw.len().max(1)).copied()))
        .collect()
}

/// Runs `o` at `fast` with the kernels of `pair` forced and checks that they ran.
fn run_pair(ctx: &GpuContext, p: &Problem, o: &Operands, pair: Pair) -> Ran {
    let ran = backward(ctx, &p.params, o, Precision::Fast, pair.0, pair.1, false)
        .unwrap_or_else(|e| panic!("{pair:?} on {p:?}: {e}"));
    assert!(pair.0.is_none_or(|k| k == ran.grad_input), "{pair:?}: {} ran", ran.grad_input.name());
    assert!(pair.1.is_none_or(|k| k == ran.grad_weight), "{pair:?}: {} ran", ran.grad_weight.name());
    ran
}

// ---------------------------------------------------------------------------------------------------------
// Every fast kernel against the reference
// ---------------------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(32), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_fast_kernel_is_within_f16_rounding_of_the_reference(
        p in fast_problems(), gi in 0usize..64, gw in 0usize..64
    ) {
        // One fast grad_input kernel (on the transposed convolution at stride 1, on the sampled correlation at any
        // stride) and one fast grad_weight kernel forced per problem; every gradient against its bound.
        let ctx = common::ctx();
        let shape = p.shape();
        let (gis, gws) = (fast_grad_input_kernels(ctx, &shape), fast_grad_weight_kernels(ctx, &shape));
        // (Without f16 shaders, as on wgpu's GL backend, no kernel is forced: `fast` runs exact kernels.)
        let pair = (gis.get(gi % gis.len().max(1)).copied(), gws.get(gw % gws.len().max(1)).copied());
        let o = operands(&p);
        let ran = run_pair(ctx, &p, &o, pair);
        if !ctx.has_f16() {
            let precisions = (ran.grad_input.precision(), ran.grad_weight.precision());
            prop_assert_eq!(precisions, (Precision::F32, Precision::F32));
        }
        check_gradients(&shape, &o, &ran).map_err(|e| TestCaseError::fail(format!("{e} for {p:?}")))?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(16), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn fast_kernels_scale_tensors_split_across_bindings(
        p in fast_problems(), gi in 0usize..64, gw in 0usize..64
    ) {
        // Bindings of the weight's size (or one plane, if larger): the input and grad_output span several chunks,
        // the kernels run per slice, and grad_weight's partial sums (in a buffer of that size too) cover several K
        // steps per split. The operands' largest values (3e6 in the input, -7e4 in grad_output: each beyond f16's
        // range, and different, so that a scale taken from the other tensor would not do) sit in their last chunk
        // only: a scale taken from the first chunk alone would overflow f16 there.
        let shape = p.shape();
        let plane = (shape.in_hw[0] * shape.in_hw[1]).max(shape.out_hw[0] * shape.out_hw[1]);
        let weight: usize = p.weight.iter().product();
        let limit = 4 * weight.max(plane).max(shape.out_channels);
        let ctx = common::ctx_with_binding_limit(limit as u64, None);
        let (gis, gws) = (fast_grad_input_kernels(&ctx, &shape), fast_grad_weight_kernels(&ctx, &shape));
        let pair = (gis.get(gi % gis.len().max(1)).copied(), gws.get(gw % gws.len().max(1)).copied());
        let mut o = operands(&p);
        for (t, largest) in [(&mut o.x, 3.0e6), (&mut o.go, -7.0e4)] {
            let mut data = t.data().to_vec();
            *data.last_mut().unwrap() = largest;
            *t = Tensor::new(t.shape().to_vec(), data).unwrap();
        }
        let ran = run_pair(&ctx, &p, &o, pair);
        check_gradients(&shape, &o, &ran).map_err(|e| TestCaseError::fail(format!("{e} for {p:?}")))?;
    }
}

#[test]
fn the_nhwc_grad_weight_copies_tensors_split_across_bindings() {
    // grad_weight's NHWC GEMM copies each tensor chunk by chunk into one f16 copy: with bindings of 48 KiB, x and
    // grad_output (64 KiB each in f32) span two chunks while their copies (38 KiB) and the partial sums (two splits
    // and the taps' scratch, 48 KiB) fit one. The largest values sit in the last chunks (as in the property above),
    // so that a scale taken from a first chunk alone would overflow f16. Every NHWC kernel this adapter runs, forced.
    let p = Problem {
        input: vec![4, 64, 4, 16],
        weight: vec![64, 64, 1, 1],
        bias: false,
        params: ConvTranspose2dOptions::default(),
        seed: common::fresh_seed(),
    };
    let shape = p.shape();
    let ctx = common::ctx_with_binding_limit(48 << 10, None);
    let mut o = operands(&p);
    for (t, largest) in [(&mut o.x, 3.0e6), (&mut o.go, -7.0e4)] {
        let mut data = t.data().to_vec();
        *data.last_mut().unwrap() = largest;
        *t = Tensor::new(t.shape().to_vec(), data).unwrap();
    }
    let nhwc: Vec<_> =
        fast_grad_weight_kernels(&ctx, &shape).into_iter().filter(|k| matches!(k, GradWeightKernel::Nhwc(_))).collect();
    assert_eq!(nhwc.is_empty(), !ctx.has_f16(), "{nhwc:?}");
    for k in nhwc {
        let up = |t: &Tensor| GpuTensor::upload(&ctx, t).unwrap();
        assert!(up(&o.x).chunks().len() > 1 && up(&o.go).chunks().len() > 1, "the tensors span several bindings");
        let ran = run_pair(&ctx, &p, &o, (None, Some(k)));
        check_gradients(&shape, &o, &ran).unwrap_or_else(|e| panic!("{k:?}: {e}"));
    }
}

#[test]
fn an_empty_batch_gives_zero_weight_gradients_from_the_nhwc_grad_weight() {
    // A batch of none: nothing to sum, grad_weight zero (its poisoned buffer cleared), from every NHWC kernel this
    // adapter runs, forced.
    let ctx = common::ctx();
    let p = Problem { input: vec![0, 64, 5, 19], ..nhwc_wide_problem(common::fresh_seed()) };
    let shape = p.shape();
    let o = operands(&p);
    let nhwc = fast_grad_weight_kernels(ctx, &shape).into_iter().filter(|k| matches!(k, GradWeightKernel::Nhwc(_)));
    for k in nhwc {
        let ran = backward(ctx, &p.params, &o, Precision::Fast, None, Some(k), false).unwrap();
        assert_eq!(ran.grad_weight, k);
        assert!(ran.grads.grad_weight.data().iter().all(|&v| v == 0.0), "{k:?}: {:?}", ran.grads.grad_weight.data());
    }
}

#[test]
fn every_fast_kernel_runs_on_the_fixed_problems_and_on_wide_groups() {
    // Each fast kernel of this adapter forced on a strided problem, a stride-1 one (the transposed-convolution
    // form) and one whose groups span several tiles of both gradients (80 input and 70 output channels: 2 x 2 of
    // grad_weight's 64 x 64 tiles, partial ones included); the selector's own `fast` choice too.
    let ctx = common::ctx();
    // What runs where: grad_weight's FMA tile and grad_input's f16 GEMM tiles (both forms) wherever the adapter has
    // f16 shaders, every tensor-core tile where it has cooperative matrices.
    let shape = stride_one_problem(0).shape();
    let (gi, gw) = (fast_grad_input_kernels(ctx, &shape), fast_grad_weight_kernels(ctx, &shape));
    let f16_gemm = |k: &GradInputKernel| match k {
        GradInputKernel::Transposed(s) | GradInputKernel::Sampled(s) => matches!(s, Strategy::Gemm(_)),
        GradInputKernel::Gather => false,
    };
    let transposed = gi.iter().filter(|k| f16_gemm(k) && matches!(k, GradInputKernel::Transposed(_))).count();
    let sampled = gi.iter().filter(|k| f16_gemm(k) && matches!(k, GradInputKernel::Sampled(_))).count();
    let fast_gemm_tiles = Strategy::fast_candidates().iter().filter(|s| matches!(s, Strategy::Gemm(_))).count();
    let expected = if ctx.has_f16() { fast_gemm_tiles } else { 0 };
    assert_eq!((transposed, sampled), (expected, expected), "{gi:?}");
    // The per-tap f16 tiles take every shape; the NHWC tiles one group of whole channel tiles (not this one's two
    // groups), and each of them nhwc_wide_problem.
    let count = |of: &dyn Fn(&GradWeightKernel) -> bool| GradWeightKernel::all().iter().filter(|k| of(k)).count();
    let per_tap = count(&|k| matches!(k, GradWeightKernel::Half(_)));
    let nhwc = count(&|k| matches!(k, GradWeightKernel::Nhwc(_)));
    // (On the FMA units: the NHWC tile in rows and gathered.)
    let nhwc_fma = count(&|k| matches!(k, GradWeightKernel::Nhwc(_)) && k.name().contains("_fma_"));
    assert_eq!(nhwc_fma, 2);
    let (expected, expected_nhwc) = match (ctx.has_coop_f16(), ctx.has_f16()) {
        (true, _) => (per_tap, nhwc),
        (false, true) => (1, nhwc_fma),
        (false, false) => (0, 0),
    };
    assert_eq!(gw.len(), expected, "{gw:?}");
    let on_nhwc = fast_grad_weight_kernels(ctx, &nhwc_wide_problem(0).shape());
    let nhwc_ran = on_nhwc.iter().filter(|k| matches!(k, GradWeightKernel::Nhwc(_))).count();
    assert_eq!(nhwc_ran, expected_nhwc, "{on_nhwc:?}");
    let wide = Problem {
        input: vec![2, 80, 5, 6],
        weight: vec![80, 70, 2, 3],
        bias: true,
        params: ConvTranspose2dOptions::default().padding([0, 1]),
        seed: common::fresh_seed(),
    };
    for p in [
        strided_problem(common::fresh_seed()),
        stride_one_problem(common::fresh_seed()),
        nhwc_problem(common::fresh_seed()),
        nhwc_wide_problem(common::fresh_seed()),
        wide,
    ] {
        let o = operands(&p);
        let mut pairs = kernel_pairs(ctx, &p);
        pairs.push((None, None));
        for pair in pairs {
            let ran = run_pair(ctx, &p, &o, pair);
            check_gradients(&p.shape(), &o, &ran).unwrap_or_else(|e| panic!("{pair:?}: {e} for {p:?}"));
        }
    }
}

#[test]
fn fast_kernels_this_adapter_lacks_are_refused() {
    // Forced where the adapter cannot run them (the tensor-core tiles without cooperative matrices, every f16 tile
    // without f16 shaders): an error naming the kernel, before anything runs; a padded-NHWC tile is no
    // sampled-correlation kernel on any adapter.
    let ctx = common::ctx();
    let p = strided_problem(common::fresh_seed());
    let shape = p.shape();
    let o = operands(&p);
    let lacking_gw = GradWeightKernel::all()
        .into_iter()
        .filter(|k| k.precision() == Precision::Fast && !k.computes(ctx, &shape, [1, 1]));
    let lacking_gi = Strategy::fast_candidates()
        .into_iter()
        .map(GradInputKernel::Sampled)
        .chain(Strategy::fast_candidates().into_iter().map(GradInputKernel::Transposed))
        .filter(|k| !k.computes(ctx, &shape));
    let mut refused = 0;
    for (gi, gw) in lacking_gi.map(|k| (Some(k), None)).chain(lacking_gw.map(|k| (None, Some(k)))) {
        let e = backward(ctx, &p.params, &o, Precision::Fast, gi, gw, false)
            .err()
            .unwrap_or_else(|| panic!("{gi:?} {gw:?} ran"));
        let (what, name) = match (gi, gw) {
            (Some(k), _) => ("grad_input kernel", k.name()),
            (_, Some(k)) => ("grad_weight kernel", k.name()),
            _ => unreachable!(),
        };
        assert!(e.to_string().contains(&format!("{what} {name} does not compute")), "{e}");
        refused += 1;
    }
    // At least the transposed-convolution forms, which this strided shape lacks.
    assert!(refused >= Strategy::fast_candidates().len(), "{refused}");
    if !ctx.has_coop_f16() {
        assert!(refused >= Strategy::fast_candidates().len() + 3, "{refused}: the tensor-core tiles");
    }
}

// ---------------------------------------------------------------------------------------------------------
// Range safety and non-finite values
// ---------------------------------------------------------------------------------------------------------

/// grad_output with magnitudes in [1/2, 1) times 2^e and random signs: every value a normal f32 however small the
/// factor (GPUs may flush f32 subnormals to zero, docs/RELIABILITY.md).
fn normal_values_times(t: &Tensor, e: i32) -> Tensor {
    let data = t.data().iter().map(|&v| (0.5 + 0.5 * v.abs()).copysign(v) * 2f32.powi(e)).collect();
    Tensor::new(t.shape().to_vec(), data).unwrap()
}

#[test]
fn tiny_and_large_gradients_keep_f16_precision() {
    // What the scaling does at the edges (shaders/common/scale.wgsl, SCALED_MODULE in src/gpu/forward/gemm.rs):
    // - each tensor is scaled by 2^k so that its largest finite magnitude M lies in [2^14, 2^15): gradients far
    //   below f16's smallest normal (6.1e-5; its smallest subnormal is 6e-8) or above its largest (65504) keep f16's
    //   relative precision instead of flushing to zero or overflowing to infinity;
    // - values below 2^-28 of their tensor's M fall below f16's normal range once scaled and lose relative
    //   precision: their absolute error is at most 2^-39 M (the bound's subnormal term: the split-bindings property
    //   puts 3e6 in an input of U(-1, 1) values, about 1% of which lie below 2^-28 of it);
    // - k is capped at 127 (one normal f32 factor): a tensor whose M lies below 2^-113 reaches the cap and is
    //   scaled less than to [2^14, 2^15). Its f32 values, multiples of 2^-149, then scale to multiples of 2^-22,
    //   which f16 holds exactly below its normal range: nothing is lost (the 2^-116 case below);
    // - the products' inverse scale, 2^-(kx + kg), may lie beyond f32's exponents: it is applied by two halves.
    // Each case: (x factor, grad_output's values). Every gradient within its bound, relative L2 <= 1e-3, every element
    // finite, none zero where the reference is not (beyond its bound).
    let go_times = |f: f32| move |t: &Tensor| scaled(t, f);
    type Values = Box<dyn Fn(&Tensor) -> Tensor>;
    let cases: Vec<(&str, f32, Values)> = vec![
        ("grad_output * 1e-7", 1.0, Box::new(go_times(1e-7))),
        ("grad_output * 2^-30", 1.0, Box::new(go_times(2f32.powi(-30)))),
        ("grad_output * 1e4", 1.0, Box::new(go_times(1e4))),
        ("x * 65504", 65504.0, Box::new(go_times(1.0))),
        ("x * 6e4, grad_output * 1e4", 6.0e4, Box::new(go_times(1e4))),
        ("x * 1e5, grad_output * 1e-7", 1.0e5, Box::new(go_times(1e-7))),
        ("grad_output near 2^-116 (the scale's cap)", 1.0, Box::new(|t: &Tensor| normal_values_times(t, -116))),
    ];
    let ctx = common::ctx();
    for p in [
        strided_problem(common::fresh_seed()),
        stride_one_problem(common::fresh_seed()),
        nhwc_problem(common::fresh_seed()),
        nhwc_wide_problem(common::fresh_seed()),
    ] {
        let shape = p.shape();
        let plain = operands(&p);
        for pair in kernel_pairs(ctx, &p) {
            for (what, fx, go) in &cases {
                let o = Operands { x: scaled(&plain.x, *fx), go: go(&plain.go), ..plain.clone() };
                let ran = run_pair(ctx, &p, &o, pair);
                let context = format!("{what}, {pair:?}, seed {}", p.seed);
                check_gradients(&shape, &o, &ran).unwrap_or_else(|e| panic!("{context}: {e}"));
                for (name, got, reference, kernel_precision) in [
                    (
                        "grad_input",
                        &ran.grads.grad_input,
                        Reference::grad_input(&shape, &o),
                        ran.grad_input.precision(),
                    ),
                    (
                        "grad_weight",
                        &ran.grads.grad_weight,
                        Reference::grad_weight(&shape, &o),
                        ran.grad_weight.precision(),
                    ),
                ] {
                    let a = arithmetic(kernel_precision, DType::F32);
                    let flushed = got
                        .data()
                        .iter()
                        .zip(&reference.exact)
                        .enumerate()
                        .filter(|(i, (&y, &r))| y == 0.0 && r.abs() > reference.bound(*i, a));
                    assert_eq!(flushed.count(), 0, "{context}: {name} flushed to zero");
                }
            }
        }
    }
}

#[test]
fn non_finite_gradients_propagate_as_in_the_exact_kernels() {
    // An inf and a NaN in grad_output (in different channels), and a large finite value (2e5) that, not the inf,
    // sets its scale: the gradients they reach (grad_input's pixels under their taps, grad_weight's elements of
    // their channels, grad_bias's channels) are non-finite exactly where the exact kernels' are, inf and NaN alike,
    // and the finite ones keep f16 accuracy.
    let ctx = common::ctx();
    for p in [
        strided_problem(common::fresh_seed()),
        stride_one_problem(common::fresh_seed()),
        nhwc_problem(common::fresh_seed()),
        nhwc_wide_problem(common::fresh_seed()),
    ] {
        let shape = p.shape();
        let mut o = operands(&p);
        let mut go = o.go.data().to_vec();
        let plane = shape.out_hw[0] * shape.out_hw[1];
        go[plane + 3] = f32::INFINITY; // channel 1
        go[plane + 2 * shape.out_hw[1] - 1] = f32::INFINITY; // channel 1, the last column of row 1
        go[4 * plane + 5] = f32::NAN; // channel 4
        go[7 * plane + 1] = 2.0e5;
        o.go = Tensor::new(o.go.shape().to_vec(), go).unwrap();
        let exact = backward(ctx, &p.params, &o, Precision::F32, None, None, false).unwrap();
        assert_eq!(exact.grad_weight.precision(), Precision::F32);
        for pair in kernel_pairs(ctx, &p) {
            let ran = run_pair(ctx, &p, &o, pair);
            let gradients = [
                ("grad_input", &ran.grads.grad_input, &exact.grads.grad_input, Reference::grad_input(&shape, &o)),
                ("grad_weight", &ran.grads.grad_weight, &exact.grads.grad_weight, Reference::grad_weight(&shape, &o)),
                (
                    "grad_bias",
                    ran.grads.grad_bias.as_ref().unwrap(),
                    exact.grads.grad_bias.as_ref().unwrap(),
                    Reference::grad_bias(&shape, &o),
                ),
            ];
            // grad_weight's NHWC GEMM also multiplies the zeros its copies add (a row's last block, grad_output's
            // padding): an inf or NaN meeting one gives NaN in its channel's weight gradients, where the exact
            // kernels may have a finite value or an inf (docs/RELIABILITY.md). Everything else as the exact kernels.
            let nhwc = matches!(ran.grad_weight, GradWeightKernel::Nhwc(_));
            let cog = shape.out_per_group();
            for (name, got, want, reference) in gradients {
                let mut finite = (Vec::new(), Vec::new());
                for (i, (&y, &e)) in got.data().iter().zip(want.data()).enumerate() {
                    let what = format!("{pair:?}: {name} element {i}: {y} vs exact {e}");
                    // Output channel 1 holds the infs, 4 the NaN (grad_weight is [ic][oc][kh][kw]).
                    let channel = (i / (shape.kernel[0] * shape.kernel[1])) % cog;
                    if nhwc && name == "grad_weight" && y.is_nan() && [1, 4].contains(&channel) {
                        continue;
                    }
                    assert_eq!((y.is_finite(), y.is_nan()), (e.is_finite(), e.is_nan()), "{what}");
                    assert!(y.is_finite() || y.is_nan() || y.signum() == e.signum(), "{what}");
                    if y.is_finite() {
                        finite.0.push(y);
                        finite.1.push(reference.exact[i]);
                    }
                }
                assert!(finite.0.len() < got.numel(), "{pair:?}: {name}: the non-finite values reach it");
                assert!(!finite.0.is_empty(), "{pair:?}: {name}: every element non-finite");
                let s = ErrorStats::compare(&finite.0, &finite.1);
                assert!(s.rel_l2 <= FAST_TOLERANCE, "{pair:?}: {name}: the finite elements: {s:?}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Determinism
// ---------------------------------------------------------------------------------------------------------

fn bits(g: &Gradients) -> Vec<Vec<u32>> {
    [Some(&g.grad_input), Some(&g.grad_weight), g.grad_bias.as_ref()]
        .into_iter()
        .flatten()
        .map(|t| t.data().iter().map(|v| v.to_bits()).collect())
        .collect()
}

#[test]
fn fast_gradients_are_the_same_bits_on_every_run() {
    // Fixed-order reductions, no atomics (the operand maxima are order-independent): every fast kernel, and the
    // selector's `fast` choice, give the same bits twice; also with tensors split over bindings of the weight's
    // size (several slices, partial sums accumulated in place).
    for p in [
        strided_problem(common::fresh_seed()),
        stride_one_problem(common::fresh_seed()),
        nhwc_problem(common::fresh_seed()),
        nhwc_wide_problem(common::fresh_seed()),
    ] {
        let o = operands(&p);
        let shape = p.shape();
        let plane = (shape.in_hw[0] * shape.in_hw[1]).max(shape.out_hw[0] * shape.out_hw[1]);
        let limit = 4 * p.weight.iter().product::<usize>().max(plane);
        let split = common::ctx_with_binding_limit(limit as u64, None);
        for ctx in [common::ctx(), &split] {
            let mut pairs = kernel_pairs(ctx, &p);
            pairs.push((None, None));
            for pair in pairs {
                let first = run_pair(ctx, &p, &o, pair);
                let second = run_pair(ctx, &p, &o, pair);
                assert!(bits(&first.grads) == bits(&second.grads), "{pair:?}: two runs differ (seed {})", p.seed);
            }
        }
    }
}

#[test]
fn the_nhwc_grad_weight_copies_x_at_a_guessed_scale_to_the_same_bits() {
    // grad_weight's NHWC GEMM copies x at the scale the last call of the shape found and copies it again where x's
    // largest magnitude asks for another (src/gpu/nhwc_copy.rs, `encode_at_guess`). On a fresh context: the first
    // call's guess misses (U(-1, 1) values: largest magnitudes below 1, not the first guess's [1, 2)), the second's
    // holds, the third's (x times 2^-20) misses again. The first two give the same bits, and the third grad_weight
    // exactly 2^-20 times theirs: x's copy holds the same f16 values at every scale. Every NHWC kernel this adapter
    // runs, forced, strided and at stride 1 (where grad_input runs the padded-NHWC kernel, beside its copy of
    // grad_output, whose maxima hold x's in another slot).
    for p in [nhwc_problem(common::fresh_seed()), nhwc_wide_problem(common::fresh_seed())] {
        let shape = p.shape();
        let o = operands(&p);
        let small = Operands { x: scaled(&o.x, 2f32.powi(-20)), ..o.clone() };
        let probe = common::ctx();
        let nhwc: Vec<_> = fast_grad_weight_kernels(probe, &shape)
            .into_iter()
            .filter(|k| matches!(k, GradWeightKernel::Nhwc(_)))
            .collect();
        assert_eq!(nhwc.is_empty(), !probe.has_f16(), "{nhwc:?}");
        for k in nhwc {
            let ctx = common::ctx_with_binding_limit(1 << 30, None);
            let first = run_pair(&ctx, &p, &o, (None, Some(k)));
            check_gradients(&shape, &o, &first).unwrap_or_else(|e| panic!("{k:?}: {e}"));
            let second = run_pair(&ctx, &p, &o, (None, Some(k)));
            assert!(bits(&first.grads) == bits(&second.grads), "{k:?}: the guess held, other bits (seed {})", p.seed);
            let third = run_pair(&ctx, &p, &small, (None, Some(k)));
            check_gradients(&shape, &small, &third).unwrap_or_else(|e| panic!("{k:?} at 2^-20: {e}"));
            let want: Vec<u32> =
                first.grads.grad_weight.data().iter().map(|v| (v * 2f32.powi(-20)).to_bits()).collect();
            let got: Vec<u32> = third.grads.grad_weight.data().iter().map(|v| v.to_bits()).collect();
            assert!(got == want, "{k:?}: x at 2^-20 gives other grad_weight values (seed {})", p.seed);
        }
    }
}

#[test]
fn grad_weight_reads_grad_inputs_copy_of_grad_output_to_the_same_bits() {
    // At stride 1, with grad_input on the padded-NHWC tensor-core kernel and grad_weight on the NHWC GEMM, the
    // GEMM reads the copy of grad_output that grad_input's kernel made (laid out for both) instead of its own: the
    // same values at the same scale, so grad_weight has the same bits as beside the gather kernel (which makes no
    // copy), in every dtype; in f32 and bf16 with grad_output's largest value beyond f16's range, so that the shared
    // scale matters.
    // Every padded-NHWC tile and NHWC grad_weight tile this adapter runs, paired; none without cooperative
    // matrices.
    let ctx = common::ctx();
    let wide = nhwc_wide_problem(common::fresh_seed());
    let padded = Problem {
        input: vec![2, 32, 6, 21],
        weight: vec![32, 32, 3, 5],
        bias: true,
        params: ConvTranspose2dOptions::default().padding([1, 2]),
        seed: common::fresh_seed(),
    };
    let mut pairs = 0;
    for p in [wide, padded] {
        let shape = p.shape();
        let o = operands(&p);
        let mut data = o.go.data().to_vec();
        *data.last_mut().unwrap() = -7.0e4;
        let large = Operands { go: Tensor::new(o.go.shape().to_vec(), data).unwrap(), ..o.clone() };
        let nhwc_gi = fast_grad_input_kernels(ctx, &shape)
            .into_iter()
            .filter(|k| matches!(k, GradInputKernel::Transposed(Strategy::CoopNhwc(_))));
        let nhwc_gw: Vec<_> = fast_grad_weight_kernels(ctx, &shape)
            .into_iter()
            .filter(|k| matches!(k, GradWeightKernel::Nhwc(_)))
            .collect();
        for gi in nhwc_gi {
            for &gw in &nhwc_gw {
                for dtype in [DType::F32, DType::F16, DType::BF16] {
                    let o = if dtype == DType::F16 { o.to_dtype(dtype) } else { large.to_dtype(dtype) };
                    let context = format!("{} and {} on {dtype} (seed {})", gi.name(), gw.name(), p.seed);
                    let shared = run_pair(ctx, &p, &o, (Some(gi), Some(gw)));
                    let own = run_pair(ctx, &p, &o, (Some(GradInputKernel::Gather), Some(gw)));
                    let gw_bits = |r: &Ran| r.grads.grad_weight.data().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    assert!(gw_bits(&shared) == gw_bits(&own), "{context}: grad_weight differs");
                    check_gradients(&shape, &o, &shared).unwrap_or_else(|e| panic!("{context}: {e}"));
                    pairs += 1;
                }
            }
        }
    }
    assert_eq!(pairs == 0, !ctx.has_coop_f16(), "{pairs} pairs");
}

// ---------------------------------------------------------------------------------------------------------
// Half-precision tensors, f32 master gradients
// ---------------------------------------------------------------------------------------------------------

#[test]
fn half_precision_tensors_take_the_fast_backward() {
    // f16 and bf16 tensors at `fast` (each fast kernel forced) and at `f32` (the selector: exact kernels): the
    // gradients in the tensors' dtype, each within half a unit in the last place of it plus its kernel's bound (for
    // `fast` the f16 bound without the operands' relative rounding: values of at most 11 significant bits scale into
    // f16 exactly). With `GpuGradients::empty_with_f32_weight`, grad_weight and grad_bias come back in f32 within
    // the bound alone: not rounded to the tensors' dtype (that would cost up to 2^-12 relative for f16, 2^-9 for
    // bf16: far above the bound, which with half-precision operands holds f32 sums' rounding only).
    let ctx = common::ctx();
    for dtype in HALVES {
        for p in [
            strided_problem(common::fresh_seed()),
            stride_one_problem(common::fresh_seed()),
            nhwc_problem(common::fresh_seed()),
            nhwc_wide_problem(common::fresh_seed()),
        ] {
            let shape = p.shape();
            let o = operands(&p).to_dtype(dtype);
            let mut runs: Vec<(Precision, Pair)> =
                kernel_pairs(ctx, &p).into_iter().map(|pair| (Precision::Fast, pair)).collect();
            runs.push((Precision::F32, (None, None)));
            for (precision, pair) in runs {
                for f32_master in [false, true] {
                    let ran = backward(ctx, &p.params, &o, precision, pair.0, pair.1, f32_master)
                        .unwrap_or_else(|e| panic!("{dtype} {precision} {pair:?}: {e}"));
                    let context = format!("{dtype} {precision} {pair:?}, f32 master: {f32_master}, seed {}", p.seed);
                    if precision == Precision::F32 {
                        assert_eq!(ran.grad_input.precision(), Precision::F32, "{context}");
                        assert_eq!(ran.grad_weight.precision(), Precision::F32, "{context}");
                    }
                    let g = &ran.grads;
                    let master = if f32_master { DType::F32 } else { dtype };
                    assert_eq!(g.grad_input.dtype(), dtype, "{context}");
                    assert_eq!(g.grad_weight.dtype(), master, "{context}");
                    assert_eq!(g.grad_bias.as_ref().map(|b| b.dtype()), Some(master), "{context}");
                    check_gradients(&shape, &o, &ran).unwrap_or_else(|e| panic!("{context}: {e}"));
                }
            }
        }
    }
}

#[test]
fn a_weight_gradient_of_a_third_dtype_is_refused() {
    // f16 tensors take f16 or f32 weight and bias gradients (an f32 master copy), never bf16 ones; f32 tensors
    // take f32 ones only; grad_input always has the input's dtype.
    let ctx = common::ctx();
    let p = strided_problem(1);
    let shape = p.shape();
    let o = operands(&p).to_dtype(DType::F16);
    let up = |t: &Tensor| GpuTensor::upload(ctx, t).unwrap();
    let (x, w, b, go) = (up(&o.x), up(&o.w), up(o.b.as_ref().unwrap()), up(&o.go));
    let params = p.params.precision(Precision::Fast);
    let run = |grads: &GpuGradients| {
        gpu::conv_transpose2d_backward_into(ctx, &x, &w, Some(&b), &go, &params, grads, BackwardRun::default())
    };
    let empty = |dims: &[usize], dtype| GpuTensor::empty_with(ctx, dims, dtype).unwrap();
    let refused = |grads: GpuGradients, what: &str, expected: DType, actual: DType| {
        let e = run(&grads).expect_err(what);
        assert!(
            matches!(&e, ConvtError::DTypeMismatch { expected: x, actual: y, .. } if *x == expected && *y == actual),
            "{what}: {e:?}"
        );
        assert!(e.to_string().contains(what), "{e}");
    };
    let master = || GpuGradients::empty_with_f32_weight(ctx, &x, &w, Some(&b), &params).unwrap();
    refused(
        GpuGradients { grad_weight: empty(&shape.weight_dims(), DType::BF16), ..master() },
        "grad_weight",
        DType::F16,
        DType::BF16,
    );
    refused(
        GpuGradients { grad_bias: Some(empty(&[shape.out_channels], DType::BF16)), ..master() },
        "grad_bias",
        DType::F16,
        DType::BF16,
    );
    refused(
        GpuGradients { grad_input: empty(&shape.input_dims(), DType::F32), ..master() },
        "grad_input",
        DType::F16,
        DType::F32,
    );
    // The master gradients themselves run.
    run(&master()).unwrap();
    // f32 tensors: an f16 weight gradient is refused.
    let o32 = operands(&p);
    let (x, w, b) = (up(&o32.x), up(&o32.w), up(o32.b.as_ref().unwrap()));
    let grads = GpuGradients {
        grad_weight: empty(&shape.weight_dims(), DType::F16),
        ..GpuGradients::empty(ctx, &x, &w, Some(&b), &params).unwrap()
    };
    let e =
        gpu::conv_transpose2d_backward_into(ctx, &x, &w, Some(&b), &up(&o32.go), &params, &grads, Default::default())
            .expect_err("f16 grad_weight for f32 tensors");
    assert!(matches!(e, ConvtError::DTypeMismatch { expected: DType::F32, actual: DType::F16, .. }), "{e:?}");
}

// ---------------------------------------------------------------------------------------------------------
// GpuTensor::to_dtype
// ---------------------------------------------------------------------------------------------------------

/// Values across f16's and bf16's ranges and beyond, with ties and near-ties of both (odd in number): from f32's
/// smallest normal up (GPUs may flush f32 subnormals to zero, as PyTorch's kernels may), zeros, infinities, NaN.
fn rounding_values() -> Vec<f32> {
    let mut values: Vec<f32> = Vec::new();
    for bits in (0x0080_0000u32..0x7f00_0000).step_by(0x0_9876) {
        let v = f32::from_bits(bits);
        // v, -v, v with f16's rounding bits set, an f16 tie (bit 12 alone below f16's last place), a bf16 tie.
        values.extend([
            v,
            -v,
            f32::from_bits(bits | 0xfff),
            f32::from_bits((bits & !0x1fff) | 0x1000),
            f32::from_bits((bits & !0xffff) | 0x8000),
        ]);
    }
    values.extend([
        0.0,
        -0.0,
        1.0,
        65504.0,
        65519.99,
        65520.0,
        -65520.0,
        2f32.powi(-24),
        2f32.powi(-25),
        2f32.powi(-24) * 1.5,
        6.0e-8,
        f32::MAX,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ]);
    if values.len().is_multiple_of(2) {
        values.push(-3.0);
    }
    values
}

/// Checks that `gpu` is `host` bit for bit (NaN as any NaN), in the same dtype and shape.
fn same_values(what: &str, gpu: &Tensor, host: &Tensor) {
    assert_eq!((gpu.dtype(), gpu.shape()), (host.dtype(), host.shape()), "{what}");
    for (i, (a, b)) in gpu.data().iter().zip(host.data()).enumerate() {
        assert!(
            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
            "{what}: element {i}: {a} vs {b} on the host"
        );
    }
}

#[test]
fn gpu_dtype_conversion_rounds_as_the_host_does() {
    // GpuTensor::to_dtype between every pair of dtypes against Tensor::to_dtype (round to nearest even; beyond f16's
    // range infinity): f32 -> f16 -> f32 and f32 -> bf16 among them. An odd number of values in one plane, and a
    // tensor of 3 x 5 planes of 7 x 9 values over bindings of one plane's f32 size: 15 chunks, each of an odd
    // number of half-precision values (the last in a 4-byte word alone). The source is left as it was.
    let values = rounding_values();
    let n = values.len();
    let flat = Tensor::new(vec![n], values.clone()).unwrap();
    let planes: Vec<f32> = (0..3 * 5 * 7 * 9).map(|i| values[(i * 7919) % n]).collect();
    let split = Tensor::new(vec![3, 5, 7, 9], planes).unwrap();
    let limited = common::ctx_with_binding_limit(7 * 9 * 4, None);
    for (ctx, t) in [(common::ctx(), &flat), (&limited, &split)] {
        for from in DType::ALL {
            let source = t.clone().to_dtype(from);
            let gpu_source = GpuTensor::upload(ctx, &source).unwrap();
            if std::ptr::eq(ctx, &limited) {
                assert_eq!(gpu_source.chunks().len(), 15);
            }
            for to in DType::ALL {
                let what = format!("{from} -> {to} ({:?})", t.shape());
                let converted = gpu_source.to_dtype(ctx, to).unwrap();
                assert_eq!(converted.dtype(), to, "{what}");
                same_values(&what, &converted.download(ctx).unwrap(), &source.clone().to_dtype(to));
                // And back to f32: the converted values unchanged.
                let back = converted.to_dtype(ctx, DType::F32).unwrap().download(ctx).unwrap();
                same_values(&format!("{what} -> f32"), &back, &source.clone().to_dtype(to).to_dtype(DType::F32));
            }
            same_values(&format!("{from} source"), &gpu_source.download(ctx).unwrap(), &source);
        }
    }
    // f32 -> f16 -> f32 as a chain of GPU conversions.
    let ctx = common::ctx();
    let round_trip = GpuTensor::upload(ctx, &flat)
        .unwrap()
        .to_dtype(ctx, DType::F16)
        .unwrap()
        .to_dtype(ctx, DType::F32)
        .unwrap()
        .download(ctx)
        .unwrap();
    let host: Vec<f32> = values.iter().map(|&v| DType::F16.round(v)).collect();
    same_values("f32 -> f16 -> f32", &round_trip, &Tensor::new(vec![n], host).unwrap());
}

// ---------------------------------------------------------------------------------------------------------
// The selectors at `fast`
// ---------------------------------------------------------------------------------------------------------

/// A context reading its tuning cache from `path`, with no forced strategy (which would decide before the cache),
/// outputs poisoned.
fn ctx_with_cache(path: &std::path::Path) -> GpuContext {
    let opts = GpuOptions {
        tune_cache: Some(path.to_path_buf()),
        poison_outputs: true,
        strategy: None,
        ..GpuOptions::from_env().unwrap()
    };
    GpuContext::with_options(opts).unwrap()
}

#[test]
fn the_selectors_keep_exact_kernels_without_tensor_cores_and_for_exact_calls() {
    let dir = common::TempDir::new("backward-fast-select");
    let path = dir.path("cache.json");
    let untuned = ctx_with_cache(&path);
    let strided = ConvTranspose2dOptions::default().stride(2).padding(1).output_padding(1);
    let shapes = [
        // Strided decoders with 64+ channels a side (where tensor cores are taken) and with few.
        strided.resolve(&[2, 64, 5, 6], &[64, 64, 3, 3], None).unwrap(),
        strided.resolve(&[2, 8, 5, 6], &[8, 16, 3, 3], None).unwrap(),
        // Stride 1 (grad_input a transposed convolution), 64 channels, and 16.
        ConvTranspose2dOptions::default().padding(1).resolve(&[1, 64, 6, 7], &[64, 64, 3, 3], None).unwrap(),
        ConvTranspose2dOptions::default().resolve(&[2, 16, 5, 4], &[16, 32, 2, 3], None).unwrap(),
    ];
    for shape in &shapes {
        let gw_fast = select::grad_weight(&untuned, shape, [1, 1], Precision::Fast, DType::F32);
        let gi_fast = select::grad_input(&untuned, shape, Precision::Fast, DType::F32);
        let gw_exact = select::grad_weight(&untuned, shape, [1, 1], Precision::F32, DType::F32);
        let gi_exact = select::grad_input(&untuned, shape, Precision::F32, DType::F32);
        assert_eq!((gw_exact.precision(), gi_exact.precision()), (Precision::F32, Precision::F32), "{shape:?}");
        if untuned.has_coop_f16() {
            // Tensor cores: grad_weight's f16 GEMM where a group has 64+ channels a side, or 32+ at stride 1.
            let channels = shape.in_per_group().min(shape.out_per_group());
            let wide = channels >= 64 || (channels >= 32 && shape.stride == [1, 1]);
            assert_eq!(gw_fast.precision() == Precision::Fast, wide, "{}: {shape:?}", gw_fast.name());
        } else {
            // No cooperative matrices (Mesa's software driver): `fast` takes the exact kernels, as the forward does.
            assert_eq!(gw_fast, gw_exact, "{shape:?}");
            assert_eq!(gi_fast, gi_exact, "{shape:?}");
            assert_eq!((gw_fast.precision(), gi_fast.precision()), (Precision::F32, Precision::F32), "{shape:?}");
        }
    }

    // A cache naming fast kernels under the exact keys (claiming f32), and under the `fast` keys: an exact call
    // never takes them; a `fast` call takes the fast ones where this adapter runs them (the cache is read).
    let shape = shapes[0];
    let params = strided;
    let gw_fast_kernel = fast_grad_weight_kernels(&untuned, &shape).first().copied();
    let gi_fast_kernel = fast_grad_input_kernels(&untuned, &shape).first().copied();
    // Every fast kernel of this build is named, whether or not it runs here.
    let gw_named = GradWeightKernel::all().into_iter().find(|k| k.precision() == Precision::Fast).unwrap();
    let gi_named = GradInputKernel::Sampled(Strategy::fast_candidates()[0]);
    let gw_name = gw_fast_kernel.unwrap_or(gw_named).name();
    let gi_name = gi_fast_kernel.unwrap_or(gi_named).cache_name();
    let mut cache = TuneCache::default();
    let key = |pass, precision| TuneKey::new(untuned.adapter_info(), pass, &shape, false, precision, DType::F32);
    for precision in [Precision::F32, Precision::Fast] {
        cache.insert(&key(Pass::GradWeight, precision), TuneEntry::new(gw_name.clone(), 1.0, precision, DType::F32));
        cache.insert(&key(Pass::GradInput, precision), TuneEntry::new(gi_name.clone(), 1.0, precision, DType::F32));
    }
    cache.save(&path).unwrap();
    let tuned = ctx_with_cache(&path);
    assert_eq!(tuned.tuned().entries.len(), 4);
    assert_eq!(
        select::grad_weight(&tuned, &shape, [1, 1], Precision::F32, DType::F32),
        select::grad_weight(&untuned, &shape, [1, 1], Precision::F32, DType::F32)
    );
    assert_eq!(
        select::grad_input(&tuned, &shape, Precision::F32, DType::F32),
        select::grad_input(&untuned, &shape, Precision::F32, DType::F32)
    );
    if let Some(k) = gw_fast_kernel {
        assert_eq!(select::grad_weight(&tuned, &shape, [1, 1], Precision::Fast, DType::F32), k);
    }
    if let Some(k) = gi_fast_kernel {
        assert_eq!(select::grad_input(&tuned, &shape, Precision::Fast, DType::F32), k);
    }
    // The exact call runs exact kernels and gives exact gradients.
    let p = Problem {
        input: shape.input_dims(),
        weight: shape.weight_dims(),
        bias: false,
        params,
        seed: common::fresh_seed(),
    };
    let o = operands(&p);
    let ran = backward(&tuned, &params, &o, Precision::F32, None, None, false).unwrap();
    assert_eq!((ran.grad_input.precision(), ran.grad_weight.precision()), (Precision::F32, Precision::F32));
    check_gradients(&shape, &o, &ran).unwrap();
    // An entry recorded for `fast` under the exact key (a hand-edited cache) is ignored too.
    let mut cache = TuneCache::default();
    cache.insert(
        &key(Pass::GradWeight, Precision::F32),
        TuneEntry::new(gw_name.clone(), 1.0, Precision::Fast, DType::F32),
    );
    cache.insert(
        &key(Pass::GradInput, Precision::F32),
        TuneEntry::new(gi_name.clone(), 1.0, Precision::Fast, DType::F32),
    );
    cache.save(&path).unwrap();
    let tuned = ctx_with_cache(&path);
    assert_eq!(select::grad_weight(&tuned, &shape, [1, 1], Precision::F32, DType::F32).precision(), Precision::F32);
    assert_eq!(select::grad_input(&tuned, &shape, Precision::F32, DType::F32).precision(), Precision::F32);
}

// ---------------------------------------------------------------------------------------------------------
// The CLI
// ---------------------------------------------------------------------------------------------------------

#[test]
fn verify_backward_at_precision_fast_reports_its_kernels() {
    // `convt verify --backward --precision fast` on small shapes (a strided one with groups, and a stride-1 one), with
    // f32 and f16 tensors: it succeeds, each line names the kernels and how they compute, and each gradient meets
    // the tolerance (1e-3, plus f16's roundoff with f16 tensors).
    let shapes = [
        "--batch 2 --in-channels 16 --out-channels 24 --size 6,9 --kernel 3,2 --stride 2,1 --padding 1,0 --groups 2 \
         --bias",
        "--in-channels 12 --out-channels 20 --size 7,5 --kernel 3,3 --padding 1 --dilation 1,2",
    ];
    for shape in shapes {
        for dtype in ["f32", "f16"] {
            let mut args = vec!["verify", "--backward", "--precision", "fast", "--dtype", dtype, "--json"];
            args.extend(shape.split_whitespace());
            let out = convt_ok(&args);
            let what = describe(&args, &out);
            let line: serde_json::Value =
                serde_json::from_str(text(&out.stdout).trim()).unwrap_or_else(|e| panic!("{e}: {what}"));
            assert_eq!(line["ok"], true, "{what}");
            assert_eq!(line["all_finite"], true, "{what}");
            assert_eq!((line["precision"].as_str(), line["dtype"].as_str()), (Some("fast"), Some(dtype)), "{what}");
            let kernel = line["kernel"].as_str().unwrap_or_default();
            assert!(kernel.contains("grad_input") && kernel.contains("grad_weight"), "{what}");
            assert!(line["arithmetic"].as_str().is_some_and(|a| a.contains("f16") || a.contains("exact")), "{what}");
            let checks = line["checks"].as_array().unwrap();
            let tensors: Vec<&str> = checks.iter().filter_map(|c| c["tensor"].as_str()).collect();
            assert_eq!(
                tensors,
                ["grad_input", "grad_weight", "grad_bias"][..2 + usize::from(shape.contains("--bias"))],
                "{what}"
            );
            let tolerance = FAST_TOLERANCE + if dtype == "f16" { p2(-11) } else { 0.0 };
            for c in checks {
                assert!(c["rel_l2"].as_f64().is_some_and(|e| e <= tolerance), "{what}");
            }
        }
    }
}
