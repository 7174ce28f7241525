//! Runs a KernelBench-like transposed convolution on the GPU and on the CPU reference, and prints the adapter,
//! the shapes, both times and the error between them.
//!
//! `cargo run --release --example compare_cpu` uses kb78's configuration (3x7 kernel, padding 1,3) and
//! kb75's (stride 2,3, padding 1,2, dilation 2,1, groups 4), scaled down so the f64 CPU reference takes
//! seconds; pass `--full` to run them at KernelBench's size (the CPU reference then takes a long time).

use std::time::Instant;

use convt::suite;
use convt::{ConvTranspose2d, ConvTranspose2dOptions, ErrorStats, GpuContext, Tensor};

fn main() -> convt::Result<()> {
    env_logger::init();
    let full = std::env::args().any(|a| a == "--full");
    let ctx = GpuContext::new()?;
    let info = ctx.adapter_info();
    println!(
        "adapter: {} ({:?}, {:?}, driver {} {})",
        info.name, info.backend, info.device_type, info.driver, info.driver_info
    );

    for name in ["kb78", "kb75"] {
        let mut case = *suite::find(name).expect("suite case");
        if !full {
            case.batch = 2;
            case.in_hw = [case.in_hw[0] / 4, case.in_hw[1] / 4];
        }
        let p = case.params;
        let layer = ConvTranspose2d::new(
            case.in_channels,
            case.out_channels,
            (case.kernel[0] as i64, case.kernel[1] as i64),
            ConvTranspose2dOptions { bias: true, ..p },
            42,
        )?;
        let x = Tensor::uniform(case.input_dims(), 0.0, 1.0, 7)?; // torch.rand, as KernelBench draws inputs

        // Weights stay on the GPU; the first call builds the pipeline, the second is the one timed.
        let gpu_layer = layer.to_gpu(&ctx)?;
        let xg = convt::GpuTensor::upload(&ctx, &x)?;
        gpu_layer.forward(&xg)?.download(&ctx)?;
        let t = Instant::now();
        let y_gpu = gpu_layer.forward(&xg)?.download(&ctx)?;
        let gpu_s = t.elapsed().as_secs_f64();

        let t = Instant::now();
        let y_cpu = layer.forward_cpu(&x)?;
        let cpu_s = t.elapsed().as_secs_f64();

        let reference: Vec<f64> = y_cpu.data().iter().map(|&v| v as f64).collect();
        let err = ErrorStats::compare(y_gpu.data(), &reference);
        let shape = p.resolve(x.shape(), layer.weight().shape(), layer.bias().map(|b| b.shape()))?;
        println!(
            "{name}{}: input {:?} weight {:?} -> output {:?}, {:.2} GFLOP",
            if full { "" } else { " (scaled down)" },
            x.shape(),
            layer.weight().shape(),
            y_gpu.shape(),
            shape.useful_flops() as f64 / 1e9
        );
        println!(
            "  gpu {:.1} ms (wall clock, incl. read-back)   cpu reference {:.1} ms   rel L2 {:.2e}   max abs {:.2e}   {}",
            gpu_s * 1e3,
            cpu_s * 1e3,
            err.rel_l2,
            err.max_abs,
            if err.rel_l2 <= 1e-5 { "ok" } else { "MISMATCH" }
        );
        if err.rel_l2 > 1e-5 {
            std::process::exit(1);
        }
    }
    Ok(())
}
