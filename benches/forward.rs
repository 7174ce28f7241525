//! Criterion benches of small shapes that run on any adapter, the software driver included:
//! `cargo bench --bench forward`. These time whole calls from the host (upload excluded, read-back included);
//! GPU-timestamp benchmarks of the full-size suite are `convt bench` (docs/PERFORMANCE.md).

use convt::{ConvTranspose2dOptions, GpuContext, GpuTensor, Precision, Tensor};
use criterion::{criterion_group, criterion_main, Criterion};

fn forward(c: &mut Criterion) {
    let ctx = GpuContext::new().expect("a GPU adapter (or Mesa's software Vulkan driver)");
    let shapes: [(&str, [usize; 4], [usize; 4], ConvTranspose2dOptions); 3] = [
        (
            "up2x_small",
            [1, 32, 32, 32],
            [32, 16, 3, 3],
            ConvTranspose2dOptions::default().stride(2).padding(1).output_padding(1),
        ),
        (
            "kb75_small",
            [1, 16, 32, 32],
            [16, 8, 3, 5],
            ConvTranspose2dOptions::default().stride((2, 3)).padding((1, 2)).dilation((2, 1)).groups(4),
        ),
        ("dcgan_small", [4, 64, 8, 8], [64, 32, 4, 4], ConvTranspose2dOptions::default().stride(2).padding(1)),
    ];
    for (name, input, weight, params) in shapes {
        let x = GpuTensor::upload(&ctx, &Tensor::uniform(input.to_vec(), -1.0, 1.0, 1).unwrap()).unwrap();
        let w = GpuTensor::upload(&ctx, &Tensor::uniform(weight.to_vec(), -1.0, 1.0, 2).unwrap()).unwrap();
        let out_dims = params.resolve(x.shape(), w.shape(), None).unwrap().output_dims();
        let out = GpuTensor::empty(&ctx, &out_dims).unwrap();
        // Each shape at both precisions (`fast`: f16 operands where the adapter has them).
        for precision in [Precision::F32, Precision::Fast] {
            c.bench_function(&format!("{name}_{precision}"), |b| {
                b.iter(|| {
                    let options = params.precision(precision);
                    convt::gpu::conv_transpose2d_into(&ctx, &x, &w, None, &options, &out, Default::default()).unwrap();
                    out.download(&ctx).unwrap()
                })
            });
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = forward
}
criterion_main!(benches);
