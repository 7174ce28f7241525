//! The Rust code of README.md, run: each ```rust block of the README's "Library" section is here line for line
//! (the "own wgpu application" block is in examples/own_device.rs), in the README's order, so that
//! `cargo run --release --example readme` compiles and runs what the README shows, and checks what its comments
//! promise. tests/readme.rs checks that every README block is here (or in own_device.rs) as written.
//!
//! `cargo run --release --example readme` (writes `learned.safetensors` into a fresh temporary directory)

use convt::{ConvtError, ErrorStats};

/// An error unless `got` is `want`.
fn expect_shape(what: &str, got: &[usize], want: &[usize]) -> convt::Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(ConvtError::InvalidArgument(format!("{what}: shape {got:?}, expected {want:?}")))
    }
}

/// An error unless `got` is within `tolerance` relative L2 of `want`.
fn expect_close(what: &str, got: &convt::Tensor, want: &convt::Tensor, tolerance: f64) -> convt::Result<()> {
    let reference: Vec<f64> = want.data().iter().map(|&v| f64::from(v)).collect();
    let e = ErrorStats::compare(got.data(), &reference);
    println!("{what}: relative L2 error {:.1e}", e.rel_l2);
    if e.rel_l2 <= tolerance {
        Ok(())
    } else {
        Err(ConvtError::InvalidArgument(format!("{what}: relative L2 error {:.1e} > {tolerance:.0e}", e.rel_l2)))
    }
}

// The README's lines as written (rustfmt would rewrap the longest ones).
#[rustfmt::skip]
fn main() -> convt::Result<()> {
    // The README's state_dict lines write into the current directory: a fresh one of this run's own.
    let dir = std::env::temp_dir().join(format!("convt-readme-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|source| ConvtError::Io { path: dir.clone(), source })?;
    std::env::set_current_dir(&dir).map_err(|source| ConvtError::Io { path: dir.clone(), source })?;

    // README: Library
    use convt::{ConvTranspose2d, ConvTranspose2dOptions, GpuContext, GpuTensor, Precision, Run, Tensor};

    let ctx = GpuContext::new()?;               // adapter chosen once; reuse the context for every call

    // nn.ConvTranspose2d(16, 8, 3, stride=2, padding=1, output_padding=1), initialised like PyTorch from a seed
    let options = ConvTranspose2dOptions::default().stride(2).padding(1).output_padding(1);
    let layer = ConvTranspose2d::new(16, 8, 3, options, 0)?;
    let x = Tensor::uniform(vec![2, 16, 32, 32], -1.0, 1.0, 7)?;
    let y = layer.forward(&ctx, &x)?;           // upload, run, read back: [2, 8, 64, 64]
    let y_ref = layer.forward_cpu(&x)?;         // the float64 CPU reference

    // Device-resident: upload once, chain layers, read back once. The layer prepares its weight for the kernel that
    // runs (packed, transformed) on the first call and reuses it until the weight changes.
    let gpu_layer = layer.to_gpu(&ctx)?;
    let xg = GpuTensor::upload(&ctx, &x)?;
    let yg = gpu_layer.forward(&xg)?;           // stays on the GPU
    let y2 = yg.download(&ctx)?;

    // Functional form (F.conv_transpose2d) with given weights (PyTorch layout) and per-axis options.
    let params = ConvTranspose2dOptions::default().stride((2, 3)).padding((1, 2)).dilation((2, 1)).groups(4);
    let w = Tensor::uniform(vec![16, 2, 3, 5], -1.0, 1.0, 1)?;
    let wg = GpuTensor::upload(&ctx, &w)?;
    let z = convt::conv_transpose2d(&ctx, &xg, &wg, None, &params)?;
    // Into an existing tensor, with a forced kernel or a GPU timer slot (`Run`); returns the kernel that ran.
    let ran = convt::conv_transpose2d_into(&ctx, &xg, &wg, None, &params, &z, Run::default())?;
    let grouped = ConvTranspose2d::from_weights(w.clone(), None, params)?;

    // Tune the kernel choice for a shape of yours (GPU timestamps); save the cache where GpuOptions::tune_cache or
    // CONVT_TUNE_CACHE points, and later contexts use it for every shape of that bucket.
    let mut cache = convt::gpu::tune::TuneCache::default();
    let shape = params.resolve(xg.shape(), wg.shape(), None)?;
    let timed = convt::gpu::tune::tune_forward(&ctx, &shape, false, Precision::F32, convt::DType::F32, 20, &mut cache)?;

    // forward(input, output_size=...): the output_padding that reaches a size (PyTorch's range and messages).
    let sized = layer.forward_with_output_size(&ctx, &x, &[63, 64])?;   // [2, 8, 63, 64]
    expect_shape("y", y.shape(), &[2, 8, 64, 64])?;
    expect_close("y against the CPU reference", &y, &y_ref, 1e-5)?;
    expect_close("the device-resident y", &y2, &y_ref, 1e-5)?;
    expect_shape("z", z.shape(), &[2, 8, 65, 94])?;
    expect_shape("grouped", grouped.weight().shape(), &[16, 2, 3, 5])?;
    expect_shape("sized", sized.shape(), &[2, 8, 63, 64])?;
    println!("ran {}; tuned {} kernels; the fastest {}", ran.name(), timed.len(), timed[0].0.name());

    {
        // README: Precision
        use convt::Precision;
        let fast_layer = ConvTranspose2d::new(64, 32, 3, ConvTranspose2dOptions::default().precision(Precision::Fast), 0)?;
        let kernel = convt::conv_transpose2d_into(&ctx, &xg, &wg, None, &params.precision(Precision::Fast), &z, Run::default())?;
        println!("{} ({})", kernel.name(), kernel.arithmetic());   // which kernel ran, and how it computed
        expect_shape("the fast layer's weight", fast_layer.weight().shape(), &[64, 32, 3, 3])?;
    }
    {
        // README: Tensor dtypes
        use convt::DType;
        let layer = ConvTranspose2d::new(64, 32, 3, ConvTranspose2dOptions::default().precision(Precision::Fast), 0)?
            .to_dtype(DType::F16);                                   // like `layer.half()`
        let x = Tensor::uniform(vec![8, 64, 32, 32], -1.0, 1.0, 1)?.to_dtype(DType::F16);
        let y = layer.forward(&ctx, &x)?;                            // f16, [8, 32, 34, 34]
        expect_shape("the f16 y", y.shape(), &[8, 32, 34, 34])?;
        if y.dtype() != DType::F16 {
            return Err(ConvtError::InvalidArgument(format!("the f16 layer returned {}", y.dtype())));
        }
    }

    // README: Training
    // Gradients as PyTorch's autograd returns them, given the gradient of the output.
    let go = Tensor::uniform(y.shape().to_vec(), -1.0, 1.0, 3)?;
    let g = layer.backward(&ctx, &x, &go)?;     // g.grad_input [2,16,32,32], g.grad_weight [16,8,3,3], g.grad_bias Some([8])
    let g_ref = layer.backward_cpu(&x, &go)?;   // the float64 reference

    // A training step that stays on the GPU (examples/train_hidden.rs has the whole loop).
    let mut model = layer.to_gpu(&ctx)?;
    let (xg, target) = (GpuTensor::upload(&ctx, &x)?, GpuTensor::upload(&ctx, &y_ref)?);
    let pred = model.forward(&xg)?;
    let grad = GpuTensor::empty(&ctx, pred.shape())?;
    convt::gpu::elementwise::mse_grad(&ctx, &pred, &target, &grad)?;  // d mean((pred-target)^2) / d pred
    let grads = model.backward(&xg, &grad)?;
    model.sgd_step(&grads, 0.1)?;               // w -= lr * grad_weight, b -= lr * grad_bias, on the GPU

    // PyTorch state_dict interchange (safetensors; `weight`, `bias`): strict, like load_state_dict.
    model.to_host()?.save_state_dict("learned.safetensors")?;   // PyTorch: layer.load_state_dict(load_file(...))
    let loaded = ConvTranspose2d::from_state_dict("learned.safetensors", options)?;
    expect_shape("grad_input", g.grad_input.shape(), &[2, 16, 32, 32])?;
    expect_shape("grad_weight", g.grad_weight.shape(), &[16, 8, 3, 3])?;
    expect_close("grad_weight against the CPU reference", &g.grad_weight, &g_ref.grad_weight, 1e-5)?;
    expect_close("the loaded weight", loaded.weight(), model.to_host()?.weight(), 0.0)?;
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
