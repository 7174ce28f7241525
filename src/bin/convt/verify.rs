//! `convt verify`: the GPU against the CPU reference on fresh random inputs, for suite cases or a shape given
//! by flags. Small problems are checked element by element against the full f64 reference; large ones at
//! randomly sampled output positions (the reference evaluated there), and every element is checked to be
//! finite (outputs are poisoned with NaN before the kernel runs, so an unwritten element fails). With
//! `--backward` the same is done for the three gradients (grad_output drawn at random too); grad_bias is
//! always checked in full.

use std::time::Instant;

use anyhow::Result;
use clap::{Args, ValueEnum};
use convt::gpu::{GradInputKernel, GradWeightKernel};
use convt::suite::Case;
use convt::{cpu, ConvShape, DType, ErrorStats, GpuContext, Precision, Tensor};
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::args::{non_negative, positive, shape_of, ShapeArgs};
use crate::Outcome;

#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
pub enum Check {
    /// Full reference when it costs at most --full-check-gflop, else sampled.
    Auto,
    /// Every output element against the f64 reference.
    Full,
    /// --samples random output elements against the f64 reference, and every element finite.
    Sampled,
}

#[derive(Args, Debug)]
pub struct VerifyArgs {
    #[command(flatten)]
    shape: ShapeArgs,
    /// Run cases at their full size even on a software adapter (otherwise they are scaled down to
    /// --max-gflop there).
    #[arg(long)]
    full_size: bool,
    /// On a software (CPU) adapter, scale cases down to about this many GFLOP (batch first, then H and W).
    #[arg(long, default_value = "2", value_parser = positive, allow_hyphen_values = true)]
    max_gflop: f64,
    #[arg(long, value_enum, default_value = "auto")]
    check: Check,
    /// In auto mode, the largest problem (GFLOP) checked against the full reference.
    #[arg(long, default_value = "2", value_parser = non_negative, allow_hyphen_values = true)]
    full_check_gflop: f64,
    /// Output elements compared in sampled mode (at least 1).
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    samples: u64,
    /// Seed for the inputs (fresh each run by default).
    #[arg(long)]
    seed: Option<u64>,
    /// Relative L2 error above which the check fails (default: 1e-5 for f32, 1e-3 for fast; with f16 or bf16
    /// tensors plus the dtype's unit roundoff, 2^-11 or 2^-8, for the result's rounding).
    #[arg(long, value_parser = non_negative, allow_hyphen_values = true)]
    tolerance: Option<f64>,
    /// Arithmetic of the forward and the backward: `f32` (exact) or `fast` (the fastest kernel within 1e-3: f16 operands with f32
    /// accumulation, or an exact kernel where that measured faster). Each line names the kernel that ran and how
    /// it computes.
    #[arg(long, default_value = "f32")]
    precision: Precision,
    /// The tensors' dtype (f32, f16, bf16): the random inputs rounded to it, the result in it, compared with the
    /// float64 reference computed from the values the inputs hold.
    #[arg(long, default_value = "f32")]
    dtype: DType,
    /// Print one JSON object per case instead of a table.
    #[arg(long)]
    json: bool,
    /// Check the backward pass (grad_input, grad_weight, grad_bias) instead of the forward.
    #[arg(long)]
    backward: bool,
}

/// The relative L2 error a result of `precision` in tensors of `dtype` is held to (forward and every gradient):
/// 1e-5 for exact f32 sums, 1e-3 for `fast` (f16 operands: a product of two rounded f32 values is off by up to twice
/// f16's unit roundoff 2^-11, and by less in relative L2 as independent roundings partly cancel in a sum), plus, for f16 or bf16 tensors, the dtype's unit
/// roundoff (2^-11 or 2^-8): a result rounded once to its dtype errs by at most that relative to each element, so
/// by at most that in relative L2 too.
pub fn tolerance(precision: Precision, dtype: DType) -> f64 {
    let roundoff = match dtype {
        DType::F32 => 0.0,
        DType::F16 => 2f64.powi(-11),
        DType::BF16 => 2f64.powi(-8),
    };
    roundoff
        + match precision {
            Precision::F32 => 1e-5,
            Precision::Fast => 1e-3,
        }
}

/// --samples as a count (at most every element of a tensor is compared).
fn sample_count(a: &VerifyArgs) -> usize {
    usize::try_from(a.samples).unwrap_or(usize::MAX)
}

/// Halves batch, then the larger spatial side, until the problem costs at most `max_gflop`.
fn scale_down(mut c: Case, max_gflop: f64) -> Result<Case> {
    let gflop = |c: &Case| -> Result<f64> { Ok(shape_of(c)?.useful_flops() as f64 / 1e9) };
    while gflop(&c)? > max_gflop {
        if c.batch > 1 {
            c.batch = c.batch.div_ceil(2);
        } else if c.in_hw[0].max(c.in_hw[1]) > 4 {
            let a = if c.in_hw[0] >= c.in_hw[1] { 0 } else { 1 };
            c.in_hw[a] = c.in_hw[a].div_ceil(2);
        } else {
            break;
        }
    }
    Ok(c)
}

pub fn run(a: VerifyArgs) -> Result<Outcome> {
    // Every case, at the batch asked for, must be a valid problem before the GPU is touched.
    let mut cases = a.shape.cases()?;
    let tolerance = a.tolerance.unwrap_or(tolerance(a.precision, a.dtype));
    let mut opts = crate::args::gpu_options()?;
    opts.poison_outputs = true;
    let ctx = GpuContext::with_options(opts)?;
    let software = ctx.adapter_info().device_type == wgpu::DeviceType::Cpu;
    if !a.json {
        println!("adapter: {} ({:?}), {} tensors", ctx.adapter_info().name, ctx.adapter_info().backend, a.dtype);
    }
    let mut failed = 0;
    for case in cases.iter_mut() {
        if software && !a.full_size {
            let whole = *case;
            *case = scale_down(*case, a.max_gflop)?;
            if (case.batch, case.in_hw) != (whole.batch, whole.in_hw) {
                let size = |c: &Case| format!("N={} {}x{}", c.batch, c.in_hw[0], c.in_hw[1]);
                eprintln!(
                    "{}: scaled down on this software adapter from {} to {} (--full-size runs it whole)",
                    case.name,
                    size(&whole),
                    size(case)
                );
            }
        }
        let seed = a.seed.unwrap_or_else(rand::random);
        let r = if a.backward { verify_backward(&ctx, case, seed, &a)? } else { verify_case(&ctx, case, seed, &a)? };
        let ok = r.checks.iter().all(|(_, s)| s.rel_l2 <= tolerance && s.non_finite == 0) && r.all_finite;
        failed += usize::from(!ok);
        let shape = shape_of(case)?;
        if a.json {
            let checks: Vec<serde_json::Value> = r
                .checks
                .iter()
                .map(|(what, s)| json!({"tensor": what, "compared": s.compared, "rel_l2": s.rel_l2, "max_abs": s.max_abs}))
                .collect();
            println!(
                "{}",
                json!({"case": case.name, "input": shape.input_dims(), "output": shape.output_dims(), "seed": seed,
                       "precision": a.precision, "dtype": a.dtype, "kernel": r.kernel, "arithmetic": r.arithmetic, "check": r.mode, "checks": checks, "all_finite": r.all_finite, "gpu_s": r.gpu_s,
                       "reference_s": r.reference_s, "ok": ok})
            );
        } else {
            let errors: Vec<String> = r
                .checks
                .iter()
                .map(|(what, s)| {
                    format!("{what} {} of {}: rel L2 {:.2e}, max abs {:.2e}", r.mode, s.compared, s.rel_l2, s.max_abs)
                })
                .collect();
            println!(
                "{:<6} in {:?} -> out {:?}  {}{}  ({}: {}; gpu {:.2}s, reference {:.2}s, seed {seed})  {}",
                case.name,
                shape.input_dims(),
                shape.output_dims(),
                errors.join("; "),
                if r.all_finite { "" } else { ", NON-FINITE OUTPUT" },
                r.kernel,
                r.arithmetic,
                r.gpu_s,
                r.reference_s,
                if ok { "ok" } else { "MISMATCH" }
            );
        }
    }
    Ok(if failed == 0 { Outcome::Ok } else { Outcome::Mismatch })
}

struct CaseResult {
    mode: &'static str,
    /// The kernel that ran and how it computes.
    kernel: String,
    arithmetic: String,
    /// (tensor checked, its errors).
    checks: Vec<(&'static str, ErrorStats)>,
    all_finite: bool,
    gpu_s: f64,
    reference_s: f64,
}

fn verify_case(ctx: &GpuContext, case: &Case, seed: u64, a: &VerifyArgs) -> Result<CaseResult> {
    let shape = shape_of(case)?;
    let random = |dims, seed| random_tensor(dims, seed, a.dtype);
    let input = random(shape.input_dims(), seed)?;
    let weight = random(shape.weight_dims(), seed ^ 1)?;
    let bias = case.bias.then(|| random(vec![shape.out_channels], seed ^ 2)).transpose()?;
    let t = Instant::now();
    let (out, strategy) = crate::host::forward(ctx, a.precision, &input, &weight, bias.as_ref(), &case.params)?;
    let gpu_s = t.elapsed().as_secs_f64();
    let all_finite = out.data().iter().all(|v| v.is_finite());
    let full = full_check(&shape, a);
    let t = Instant::now();
    let bias_data = bias.as_ref().map(|b| b.data());
    let stats = if full {
        let reference = cpu::conv_transpose2d_f64(&shape, input.data(), weight.data(), bias_data)?;
        ErrorStats::compare(out.data(), &reference)
    } else {
        let (got, want): (Vec<f32>, Vec<f64>) =
            sample_positions(&shape.output_dims(), sample_count(a).min(out.numel()), seed ^ 3)
                .into_iter()
                .map(|(i, p)| (out.data()[i], cpu::output_at(&shape, input.data(), weight.data(), bias_data, p)))
                .unzip();
        ErrorStats::compare(&got, &want)
    };
    Ok(CaseResult {
        mode: if full { "full" } else { "sampled" },
        kernel: strategy.name(),
        arithmetic: strategy.arithmetic().to_string(),
        checks: vec![("output", stats)],
        all_finite,
        gpu_s,
        reference_s: t.elapsed().as_secs_f64(),
    })
}

/// Values drawn from U(-1, 1) with `seed`, rounded to `dtype`.
fn random_tensor(dims: Vec<usize>, seed: u64, dtype: DType) -> convt::Result<Tensor> {
    Ok(Tensor::uniform(dims, -1.0, 1.0, seed)?.to_dtype(dtype))
}

/// Whether the check compares every element (else sampled ones).
fn full_check(shape: &ConvShape, a: &VerifyArgs) -> bool {
    match a.check {
        Check::Full => true,
        Check::Sampled => false,
        Check::Auto => shape.useful_flops() as f64 / 1e9 <= a.full_check_gflop,
    }
}

/// `count` random positions in a tensor of `dims` (4-D): (flat index, position).
pub fn sample_positions(dims: &[usize], count: usize, seed: u64) -> Vec<(usize, [usize; 4])> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..count)
        .map(|_| {
            let idx = [0, 1, 2, 3].map(|d| rng.random_range(0..dims[d]));
            (((idx[0] * dims[1] + idx[1]) * dims[2] + idx[2]) * dims[3] + idx[3], idx)
        })
        .collect()
}

fn verify_backward(ctx: &GpuContext, case: &Case, seed: u64, a: &VerifyArgs) -> Result<CaseResult> {
    let shape = shape_of(case)?;
    let random = |dims, seed| random_tensor(dims, seed, a.dtype);
    let input = random(shape.input_dims(), seed)?;
    let weight = random(shape.weight_dims(), seed ^ 1)?;
    let bias = case.bias.then(|| random(vec![shape.out_channels], seed ^ 2)).transpose()?;
    let grad_output = random(shape.output_dims(), seed ^ 4)?;
    let t = Instant::now();
    let params = case.params.precision(a.precision);
    let (g, (grad_input, grad_weight)) =
        crate::host::backward(ctx, &input, &weight, bias.as_ref(), &grad_output, &params)?;
    let gpu_s = t.elapsed().as_secs_f64();
    // What computed grad_input and grad_weight, and how (grad_bias is an exact f32 sum).
    let all_finite = [Some(&g.grad_input), Some(&g.grad_weight), g.grad_bias.as_ref()]
        .into_iter()
        .flatten()
        .all(|t| t.data().iter().all(|v| v.is_finite()));
    let full = full_check(&shape, a);
    let t = Instant::now();
    let (x, w, go) = (input.data(), weight.data(), grad_output.data());
    let mut checks = Vec::new();
    if full {
        checks.push(("grad_input", ErrorStats::compare(g.grad_input.data(), &cpu::grad_input_f64(&shape, go, w)?)));
        checks.push(("grad_weight", ErrorStats::compare(g.grad_weight.data(), &cpu::grad_weight_f64(&shape, x, go)?)));
    } else {
        // grad_weight elements each sum over the whole batch: sample fewer of them.
        let sampled = |t: &Tensor, count: usize, salt: u64, at: &dyn Fn([usize; 4]) -> f64| {
            let (got, want): (Vec<f32>, Vec<f64>) = sample_positions(t.shape(), count.min(t.numel()), seed ^ salt)
                .into_iter()
                .map(|(i, p)| (t.data()[i], at(p)))
                .unzip();
            ErrorStats::compare(&got, &want)
        };
        let gw_samples = (sample_count(a) / 100).max(16);
        checks.push((
            "grad_input",
            sampled(&g.grad_input, sample_count(a), 5, &|p| cpu::grad_input_at(&shape, go, w, p)),
        ));
        checks
            .push(("grad_weight", sampled(&g.grad_weight, gw_samples, 6, &|p| cpu::grad_weight_at(&shape, x, go, p))));
    }
    if let Some(gb) = &g.grad_bias {
        checks.push(("grad_bias", ErrorStats::compare(gb.data(), &cpu::grad_bias_f64(&shape, go)?)));
    }
    Ok(CaseResult {
        mode: if full { "full" } else { "sampled" },
        kernel: format!("backward, grad_input {}, {}", grad_input.name(), grad_weight.name()),
        arithmetic: backward_arithmetic(grad_input, grad_weight),
        checks,
        all_finite,
        gpu_s,
        reference_s: t.elapsed().as_secs_f64(),
    })
}

/// How the backward's kernels compute, in words: grad_input's arithmetic, and grad_weight's where it differs (its
/// f16 tiles, named `grad_weight_coop_*` on tensor cores and `grad_weight_f16_*` on the FMA units).
fn backward_arithmetic(grad_input: GradInputKernel, grad_weight: GradWeightKernel) -> String {
    let (gi, gw) = (grad_input.arithmetic(), grad_weight.arithmetic());
    if gi == gw {
        gi.to_string()
    } else {
        format!("grad_input {gi}; grad_weight {gw}")
    }
}
