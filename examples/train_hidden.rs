//! Trains a ConvTranspose2d on the GPU to recover a hidden one from input/output pairs: forward, mean squared
//! error gradient, backward and SGD step all run on the GPU; the host only draws inputs and prints progress.
//!
//! `cargo run --release --example train_hidden [-- --steps N --out FILE]`
//!
//! The hidden layer is a DCGAN-style 2x upsampler (8 -> 4 channels, 4x4 kernel, stride 2, padding 1, bias,
//! groups 2). A student layer with PyTorch's initialisation learns it; the loss falls toward zero and the
//! learned weight approaches the hidden one. The learned layer is saved as a PyTorch state_dict (`--out`,
//! default `target/train_hidden.safetensors`) with an input/output pair beside it (`*_io.safetensors`), so
//! PyTorch can check it: `python3 scripts/state_dict.py check target/train_hidden.safetensors --io
//! target/train_hidden_io.safetensors`. Exits non-zero if the weight is not recovered.

use std::path::PathBuf;

use convt::gpu::elementwise::mse_grad;
use convt::io::save_tensors;
use convt::{ConvTranspose2d, ConvTranspose2dOptions, GpuContext, GpuTensor, Tensor};

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

fn main() -> anyhow::Result<()> {
    env_logger::init();
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let steps: usize = arg("--steps").map(|s| s.parse()).transpose()?.unwrap_or(400);
    let out = PathBuf::from(arg("--out").unwrap_or_else(|| "target/train_hidden.safetensors".into()));

    let ctx = GpuContext::new()?;
    println!("adapter: {} ({:?})", ctx.adapter_info().name, ctx.adapter_info().backend);
    let options = ConvTranspose2dOptions::default().stride(2).padding(1).groups(2);
    let hidden = ConvTranspose2d::new(8, 4, 4, options, 1)?;
    let student = ConvTranspose2d::new(8, 4, 4, options, 2)?;
    let hidden_gpu = hidden.to_gpu(&ctx)?;
    let mut model = student.to_gpu(&ctx)?;

    // Learning rate: with inputs from U(-1, 1) and the loss a mean over the output's elements, the loss's
    // curvature is about 2 * (1/Cout) = 0.5 along the bias (every output element of a channel sees it) and
    // 2 * E[x^2] / (Cout * sH * sW) = 0.04 along a weight (each tap sees one input per 4 output pixels). Plain
    // SGD is stable below 2 / 0.5 = 4; 1.5 shrinks the weight error by about 6% per step.
    let lr = 1.5;
    let batch = [16usize, 8, 16, 16];
    println!("learning a hidden ConvTranspose2d(8, 4, 4, stride 2, padding 1, groups 2) from {batch:?} batches");
    println!("{:>6} {:>12} {:>14}", "step", "loss", "weight error");
    let mut last_loss = f64::INFINITY;
    for step in 0..=steps {
        let x = GpuTensor::upload(&ctx, &Tensor::uniform(batch.to_vec(), -1.0, 1.0, 1000 + step as u64)?)?;
        let target = hidden_gpu.forward(&x)?;
        let y = model.forward(&x)?;
        let grad = GpuTensor::empty(&ctx, y.shape())?;
        mse_grad(&ctx, &y, &target, &grad)?;
        let grads = model.backward(&x, &grad)?;
        if step % (steps / 10).max(1) == 0 || step == steps {
            last_loss = mse(&y.download(&ctx)?, &target.download(&ctx)?);
            let w_err = rel_l2(&model.weight().download(&ctx)?, hidden.weight());
            println!("{step:>6} {last_loss:>12.3e} {w_err:>14.3e}");
        }
        if step < steps {
            model.sgd_step(&grads, lr)?;
        }
    }

    let learned = model.to_host()?;
    let w_err = rel_l2(learned.weight(), hidden.weight());
    let b_err = rel_l2(learned.bias().expect("bias"), hidden.bias().expect("bias"));
    println!("learned vs hidden: weight rel L2 {w_err:.3e}, bias rel L2 {b_err:.3e}, final loss {last_loss:.3e}");

    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    learned.save_state_dict(&out)?;
    let x = Tensor::uniform(vec![2, 8, 5, 7], -1.0, 1.0, 7)?;
    let io = out.with_file_name(format!("{}_io.safetensors", out.file_stem().unwrap_or_default().to_string_lossy()));
    save_tensors(&io, &[("input", &x), ("output", &learned.forward_cpu(&x)?)], None)?;
    println!("saved the learned layer to {} (PyTorch state_dict) and a check pair to {}", out.display(), io.display());

    if !(w_err <= 1e-3 && b_err <= 1e-3) {
        anyhow::bail!("the hidden layer was not recovered (weight error {w_err:.3e}, bias error {b_err:.3e})");
    }
    Ok(())
}
