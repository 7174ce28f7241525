//! Mixed-precision training on the GPU, as PyTorch's autocast and GradScaler run it: a ConvTranspose2d learns a
//! hidden one from input/output pairs with f16 activations (or bf16: `--dtype bf16`), an f32 master copy of the
//! weight and bias, precision `fast`, and dynamic loss scaling.
//!
//! `cargo run --release --example train_mixed [-- --steps N --dtype f16|bf16 --seed S --no-loss-scale]`
//!
//! Each step, on the GPU: the master weight and bias are rounded to the dtype (`GpuTensor::to_dtype`); the forward
//! runs on the half-precision input, weight and bias at `Precision::Fast`; the mean squared error's gradient is taken
//! in f32 against the hidden layer's f32 output, multiplied by the loss scale and rounded to the dtype; the backward
//! writes f32 weight and bias gradients (`GpuGradients::empty_with_f32_weight`); the host reads those (a few hundred
//! values) to check that they are finite, and SGD updates the f32 master with the gradients unscaled
//! (`elementwise::axpby`).
//!
//! The loss scale follows GradScaler's rule for f16: it starts at 2^16, halves on a step whose gradients are not
//! finite (the step is skipped), and doubles after `GROWTH_INTERVAL` good steps in a row, so it climbs until the
//! scaled loss gradient brushes f16's largest value (65504) and then hovers there, skipping a step now and then (the
//! run prints how many, and the final scale). Without it f16 could not hold the loss gradient: each element is 2/n
//! times a residual (n = 65536 outputs a batch), below f16's smallest normal (2^-14) from the first step and below
//! half its smallest subnormal (2^-25, where it rounds to zero) once the residual falls under about 1e-3, so nearly
//! all of it vanishes long before the weight is learned (`--no-loss-scale` shows it: the weight stalls several times
//! farther from the hidden one). bf16 has f32's exponent range: its scale stays 1.
//!
//! The hidden layer is train_hidden's: 8 -> 4 channels, 4x4 kernel, stride 2, padding 1, groups 2, with a bias.
//! Exits non-zero unless the learned weight and bias are within the tolerance below of the hidden ones.

use convt::gpu::elementwise::axpby;
use convt::gpu::{conv_transpose2d, conv_transpose2d_backward_into, BackwardRun, GpuGradients};
use convt::{ConvTranspose2d, ConvTranspose2dOptions, DType, GpuContext, GpuTensor, Precision, Tensor};

/// Good steps in a row after which the loss scale doubles (GradScaler's default is 2000, for runs of many
/// thousands of steps; this run is a few hundred).
const GROWTH_INTERVAL: usize = 10;

/// How close the learned parameters must come to the hidden ones (relative L2): twice the dtype's unit roundoff,
/// 2^-10 for f16 and 2^-7 for bf16. The forward and the backward see the master weight and bias only rounded to the
/// dtype, so the loss cannot tell apart master values that round alike: SGD leaves each master element hovering
/// about the midpoint between the two representable values around the hidden one, which is off by at most half their
/// spacing, the unit roundoff (2^-11 of the value in f16, 2^-8 in bf16), and by about that over sqrt(3) on average.
/// The output's rounding to the dtype adds noise of the same relative size to every gradient; the factor 2 covers
/// it. Over six seeds (`--seed 0` to `5`, 300 steps) the weight reached 1.7e-4 to 2.0e-4 in f16 and 1.4e-3 to
/// 1.6e-3 in bf16, the four-element bias at most 1.8e-4 and 2.1e-3: 4.8x and 3.8x inside the bounds, and four
/// orders of magnitude below the student's starting error (about 1.4). Without the loss scale (`--no-loss-scale`)
/// the f16 weight stalled at 1.2e-3 to 1.3e-3, outside its bound.
fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::BF16 => 2f64.powi(-7),
        _ => 2f64.powi(-10),
    }
}

fn rel_l2(a: &Tensor, b: &Tensor) -> f64 {
    let (num, den) = a
        .data()
        .iter()
        .zip(b.data())
        .fold((0.0, 0.0), |(n, d), (&x, &y)| (n + (x as f64 - y as f64).powi(2), d + (y as f64).powi(2)));
    (num / den).sqrt()
}

fn mse(a: &Tensor, b: &Tensor) -> f64 {
    a.data().iter().zip(b.data()).map(|(&x, &y)| (x as f64 - y as f64).powi(2)).sum::<f64>() / a.numel() as f64
}

/// The fraction of the nonzero `values` that round to zero in f16 (magnitude at most 2^-25).
fn flushed_in_f16(values: &[f32]) -> f64 {
    let nonzero = values.iter().filter(|v| **v != 0.0).count();
    let flushed = values.iter().filter(|v| **v != 0.0 && v.abs() <= 2f32.powi(-25)).count();
    flushed as f64 / nonzero.max(1) as f64
}

fn main() -> anyhow::Result<()> {
    env_logger::init();
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let steps: usize = arg("--steps").map(|s| s.parse()).transpose()?.unwrap_or(300);
    let seed: u64 = arg("--seed").map(|s| s.parse()).transpose()?.unwrap_or(0);
    let dtype: DType = arg("--dtype").map(|s| s.parse()).transpose()?.unwrap_or(DType::F16);
    if dtype == DType::F32 {
        anyhow::bail!("--dtype is the activations' half-precision dtype: f16 or bf16");
    }
    // GradScaler scales f16 only: bf16 holds f32's range.
    let scaling = dtype == DType::F16 && !args.iter().any(|a| a == "--no-loss-scale");

    let ctx = GpuContext::new()?;
    println!("adapter: {} ({:?})", ctx.adapter_info().name, ctx.adapter_info().backend);
    let options = ConvTranspose2dOptions::default().stride(2).padding(1).groups(2);
    let fast = options.precision(Precision::Fast);
    let hidden = ConvTranspose2d::new(8, 4, 4, options, 2 * seed + 1)?;
    let student = ConvTranspose2d::new(8, 4, 4, options, 2 * seed + 2)?;
    let hidden_gpu = hidden.to_gpu(&ctx)?;
    // The f32 master copy of the student's parameters.
    let weight = GpuTensor::upload(&ctx, student.weight())?;
    let bias = GpuTensor::upload(&ctx, student.bias().expect("bias"))?;

    // Learning rate: train_hidden's (the loss and its curvature are the same; see there).
    let lr = 1.5;
    let batch = [16usize, 8, 16, 16];
    let mut scale: f32 = if scaling { 2f32.powi(16) } else { 1.0 };
    let (mut good_in_a_row, mut skipped, mut overflow_steps) = (0, 0, Vec::new());
    println!(
        "learning a hidden ConvTranspose2d(8, 4, 4, stride 2, padding 1, groups 2) from {batch:?} batches of {dtype} \
         activations, precision fast, f32 master weights, loss scale {}",
        if scaling { "dynamic from 2^16" } else { "1" }
    );
    println!("{:>6} {:>12} {:>14} {:>12}", "step", "loss", "weight error", "loss scale");
    let (mut last_loss, mut flushed) = (f64::INFINITY, (0.0, 0.0));
    for step in 0..=steps {
        let data_seed = seed * 1_000_000 + 1000 + step as u64;
        // The input in the dtype, and the hidden layer's exact f32 output on the values it holds.
        let x = GpuTensor::upload(&ctx, &Tensor::uniform(batch.to_vec(), -1.0, 1.0, data_seed)?.to_dtype(dtype))?;
        let target = hidden_gpu.forward(&x.to_dtype(&ctx, DType::F32)?)?;

        // Forward on half-precision copies of the master parameters.
        let (w_half, b_half) = (weight.to_dtype(&ctx, dtype)?, bias.to_dtype(&ctx, dtype)?);
        let y = conv_transpose2d(&ctx, &x, &w_half, Some(&b_half), &fast)?.to_dtype(&ctx, DType::F32)?;

        // The scaled loss gradient, scale * 2/n * (y - target) (elementwise::mse_grad's, the scale folded in), in
        // f32, then rounded to the dtype for the backward.
        let grad = GpuTensor::empty(&ctx, y.shape())?;
        y.copy_to(&ctx, &grad)?;
        let c = scale * 2.0 / y.numel() as f32;
        axpby(&ctx, -c, &target, c, &grad)?;
        let grad_half = grad.to_dtype(&ctx, dtype)?;

        // The backward: grad_weight and grad_bias in f32 for the master copy.
        let grads = GpuGradients::empty_with_f32_weight(&ctx, &x, &w_half, Some(&b_half), &fast)?;
        conv_transpose2d_backward_into(
            &ctx,
            &x,
            &w_half,
            Some(&b_half),
            &grad_half,
            &fast,
            &grads,
            BackwardRun::default(),
        )?;
        let gw = grads.grad_weight.download(&ctx)?;
        let gb = grads.grad_bias.as_ref().expect("grad_bias").download(&ctx)?;
        let finite = gw.data().iter().chain(gb.data()).all(|v| v.is_finite());

        if step % (steps / 10).max(1) == 0 || step == steps {
            let (y, target) = (y.download(&ctx)?, target.download(&ctx)?);
            last_loss = mse(&y, &target);
            let w_err = rel_l2(&weight.download(&ctx)?, hidden.weight());
            println!("{step:>6} {last_loss:>12.3e} {w_err:>14.3e} {:>12}", format!("2^{}", scale.log2()));
            if step == steps {
                // How much of the last step's loss gradient f16 keeps, unscaled and scaled.
                let g = grad.download(&ctx)?;
                let unscaled: Vec<f32> = g.data().iter().map(|v| v / scale).collect();
                flushed = (flushed_in_f16(&unscaled), flushed_in_f16(g.data()));
            }
        }
        if step == steps {
            break;
        }
        if !finite {
            // GradScaler's rule: skip the step, halve the scale.
            skipped += 1;
            overflow_steps.push(step);
            scale /= 2.0;
            good_in_a_row = 0;
            continue;
        }
        // SGD on the f32 master with the unscaled gradients: w -= lr * (grad / scale).
        axpby(&ctx, -lr / scale, &grads.grad_weight, 1.0, &weight)?;
        axpby(&ctx, -lr / scale, grads.grad_bias.as_ref().expect("grad_bias"), 1.0, &bias)?;
        good_in_a_row += 1;
        if scaling && good_in_a_row == GROWTH_INTERVAL {
            scale *= 2.0;
            good_in_a_row = 0;
        }
    }

    let w_err = rel_l2(&weight.download(&ctx)?, hidden.weight());
    let b_err = rel_l2(&bias.download(&ctx)?, hidden.bias().expect("bias"));
    let start = rel_l2(student.weight(), hidden.weight());
    println!(
        "learned vs hidden: weight rel L2 {w_err:.3e} (from {start:.3e}), bias rel L2 {b_err:.3e}, final loss {last_loss:.3e}"
    );
    println!(
        "loss scale: final 2^{}, {skipped} of {steps} steps skipped for non-finite gradients{}",
        scale.log2(),
        if overflow_steps.is_empty() { String::new() } else { format!(" (steps {overflow_steps:?})") }
    );
    if scaling {
        println!(
            "at the last step {:.1}% of the loss gradient's nonzero elements would have rounded to zero in f16 \
             without the scale, {:.1}% did with it",
            100.0 * flushed.0,
            100.0 * flushed.1
        );
    } else if dtype == DType::F16 {
        println!(
            "without a loss scale, {:.1}% of the last step's loss gradient (nonzero elements) rounded to zero in f16",
            100.0 * flushed.0
        );
    }
    let tol = tolerance(dtype);
    if !(w_err <= tol && b_err <= tol) {
        anyhow::bail!(
            "the hidden layer was not recovered within {tol:.1e} (weight error {w_err:.3e}, bias error {b_err:.3e})"
        );
    }
    println!("recovered within {tol:.1e} ({dtype} activations, f32 master weights)");
    Ok(())
}
