//! A GPU layer prepares its weight once for the kernel that runs (packed, transformed) and reuses it on later
//! calls until the weight changes: repeated calls, calls after an SGD step and after a copy into the weight all
//! match the float64 reference, and the functional call bit for bit, with every kernel that prepares its weight.

mod common;

use convt::gpu::Strategy;
use convt::{ConvTranspose2d, ConvTranspose2dOptions, ErrorStats, GpuTensor, Precision, Tensor};

/// Every value's bits: the layer and the functional call must agree exactly, not within a tolerance.
fn bits(t: &Tensor) -> Vec<u32> {
    t.data().iter().map(|v| v.to_bits()).collect()
}

/// The layer's output for `x` against the f64 reference from its current weights, within the tolerance of the
/// kernel's precision.
fn check(layer: &convt::GpuConvTranspose2d, ctx: &convt::GpuContext, strategy: Strategy, x: &Tensor, what: &str) {
    let xg = GpuTensor::upload(ctx, x).unwrap();
    let host = layer.to_host().unwrap();
    let shape = host.options().resolve(x.shape(), host.weight().shape(), host.bias().map(|b| b.shape())).unwrap();
    let out = GpuTensor::empty(ctx, &shape.output_dims()).unwrap();
    let ran = layer.forward_into(&xg, &out, None).unwrap();
    assert_eq!(ran, strategy, "{what}");
    let got = out.download(ctx).unwrap();
    let bias = host.bias().map(|b| b.data());
    let want = convt::cpu::conv_transpose2d_f64(&shape, x.data(), host.weight().data(), bias).unwrap();
    let s = ErrorStats::compare(got.data(), &want);
    let tolerance = match strategy.precision() {
        Precision::F32 => common::F32_TOLERANCE,
        Precision::Fast => 1e-3,
    };
    assert!(s.non_finite == 0 && s.rel_l2 <= tolerance, "{} {what}: {s:?}", strategy.name());
    // Bit for bit the functional call's, which prepares the weight (and finds an f16 kernel's weight scale) in
    // its own pass: the prepared weight and its scale carried into the call are the same values.
    let (functional, used) =
        common::forward_host_as(ctx, strategy.precision(), x, host.weight(), host.bias(), host.options()).unwrap();
    assert_eq!(used, strategy, "{what}");
    assert!(
        bits(&got) == bits(&functional),
        "{} {what}: the layer's and the functional call's bits differ",
        strategy.name()
    );
}

#[test]
fn a_layer_reuses_its_prepared_weight_until_the_weight_changes() {
    let ctx = common::ctx();
    // Stride 1 for the Winograd and padded-NHWC kernels, stride 2 for the GEMM tiles (one group: the padded-NHWC
    // kernel's condition).
    let problems = [(1i64, 0i64, [2usize, 32, 9, 10]), (2, 1, [2, 32, 6, 5])];
    let prepares = |s: &Strategy| {
        matches!(s, Strategy::Gemm(_) | Strategy::Coop(_) | Strategy::CoopNhwc(_) | Strategy::Winograd(_))
    };
    let strategies: Vec<Strategy> =
        Strategy::candidates_for(ctx, Precision::Fast).into_iter().filter(prepares).collect();
    for strategy in common::sample(&strategies, 6) {
        let ctx = common::ctx_with_strategy(strategy);
        let Some((stride, padding, input)) = problems.into_iter().find(|(stride, padding, input)| {
            let params = ConvTranspose2dOptions::default().stride(*stride).padding(*padding);
            params.resolve(input, &[32, 64, 3, 3], Some(&[64])).is_ok_and(|shape| strategy.computes(ctx, &shape))
        }) else {
            continue;
        };
        let options = ConvTranspose2dOptions::default().stride(stride).padding(padding).precision(strategy.precision());
        let seed = common::fresh_seed();
        let mut layer = ConvTranspose2d::new(32, 64, 3, options, seed).unwrap().to_gpu(ctx).unwrap();
        let fresh = |i: u64| Tensor::uniform(input.to_vec(), -1.0, 1.0, seed ^ (i + 1)).unwrap();
        check(&layer, ctx, strategy, &fresh(1), &format!("first call (seed {seed})"));
        check(&layer, ctx, strategy, &fresh(2), &format!("second call, prepared weight reused (seed {seed})"));
        // An SGD step rewrites the weight: the next call prepares it again.
        let x = GpuTensor::upload(ctx, &fresh(3)).unwrap();
        let go = GpuTensor::upload(
            ctx,
            &Tensor::uniform(layer.forward(&x).unwrap().shape().to_vec(), -1.0, 1.0, seed ^ 9).unwrap(),
        )
        .unwrap();
        let grads = layer.backward(&x, &go).unwrap();
        layer.sgd_step(&grads, 0.5).unwrap();
        check(&layer, ctx, strategy, &fresh(4), &format!("after an SGD step (seed {seed})"));
        // So does a copy into it.
        let w = Tensor::uniform(vec![32, 64, 3, 3], -0.5, 0.5, seed ^ 5).unwrap();
        GpuTensor::upload(ctx, &w).unwrap().copy_to(ctx, layer.weight()).unwrap();
        check(&layer, ctx, strategy, &fresh(5), &format!("after a copy into the weight (seed {seed})"));
        check(&layer, ctx, strategy, &fresh(6), &format!("and again (seed {seed})"));
    }
}

/// `layer`'s backward for `x` and `go` against the float64 reference from its current weight (within the tolerance
/// of `precision`), and bit for bit against the functional backward, which flips and prepares the weight in its
/// own pass.
fn check_backward(layer: &convt::GpuConvTranspose2d, ctx: &convt::GpuContext, x: &Tensor, go: &Tensor, what: &str) {
    let (xg, gg) = (GpuTensor::upload(ctx, x).unwrap(), GpuTensor::upload(ctx, go).unwrap());
    let got = layer.backward(&xg, &gg).unwrap().download(ctx).unwrap();
    let host = layer.to_host().unwrap();
    let options = *host.options();
    let shape = options.resolve(x.shape(), host.weight().shape(), host.bias().map(|b| b.shape())).unwrap();
    let (w, b) = (layer.weight(), layer.bias());
    let functional =
        convt::gpu::conv_transpose2d_backward(ctx, &xg, w, b, &gg, &options).unwrap().download(ctx).unwrap();
    let tolerance = match options.precision {
        Precision::F32 => common::F32_TOLERANCE,
        Precision::Fast => 1e-3,
    };
    let want = [
        convt::cpu::grad_input_f64(&shape, go.data(), host.weight().data()).unwrap(),
        convt::cpu::grad_weight_f64(&shape, x.data(), go.data()).unwrap(),
    ];
    for (name, g, f, want) in [
        ("grad_input", &got.grad_input, &functional.grad_input, &want[0]),
        ("grad_weight", &got.grad_weight, &functional.grad_weight, &want[1]),
    ] {
        let s = ErrorStats::compare(g.data(), want);
        assert!(s.non_finite == 0 && s.rel_l2 <= tolerance, "{name} {what}: {s:?}");
        assert!(bits(g) == bits(f), "{name} {what}: the layer's and the functional backward's bits differ");
    }
}

#[test]
fn a_layer_backward_reuses_its_flipped_weight_until_the_weight_changes() {
    // grad_input's transposed-convolution form (stride 1) and sampled correlation (stride 2) with each strategy
    // that computes them: the layer keeps the flipped weight and its prepared form between calls and makes them
    // again after an SGD step or a copy into the weight; every call matches the reference and the functional
    // backward.
    let ctx = common::ctx();
    let problems = [(1i64, 0i64, [2usize, 32, 7, 6]), (2, 1, [2, 32, 5, 4])];
    let strategies: Vec<Strategy> = Strategy::candidates_for(ctx, Precision::Fast)
        .into_iter()
        .filter(|s| !matches!(s, Strategy::Direct | Strategy::Rows(_)))
        .collect();
    let mut ran = 0;
    for strategy in common::sample(&strategies, 6) {
        let ctx = common::ctx_with_strategy(strategy);
        for (stride, padding, input) in problems {
            let options =
                ConvTranspose2dOptions::default().stride(stride).padding(padding).precision(strategy.precision());
            let seed = common::fresh_seed();
            let mut layer = ConvTranspose2d::new(32, 64, 3, options, seed).unwrap().to_gpu(ctx).unwrap();
            let shape = options.resolve(&input, &[32, 64, 3, 3], Some(&[64])).unwrap();
            let kernel = convt::gpu::select::grad_input(ctx, &shape, options.precision, convt::DType::F32);
            if !kernel.computes(ctx, &shape) || matches!(kernel, convt::gpu::GradInputKernel::Gather) {
                continue;
            }
            ran += 1;
            let fresh = |i: u64, dims: &[usize]| Tensor::uniform(dims.to_vec(), -1.0, 1.0, seed ^ (i + 1)).unwrap();
            let out = shape.output_dims();
            let what = |w: &str| format!("{} {w} (stride {stride}, seed {seed})", kernel.name());
            check_backward(&layer, ctx, &fresh(1, &input), &fresh(2, &out), &what("first call"));
            check_backward(&layer, ctx, &fresh(3, &input), &fresh(4, &out), &what("second call, flipped weight kept"));
            let (x, go) =
                (GpuTensor::upload(ctx, &fresh(5, &input)).unwrap(), GpuTensor::upload(ctx, &fresh(6, &out)).unwrap());
            let grads = layer.backward(&x, &go).unwrap();
            layer.sgd_step(&grads, 0.5).unwrap();
            check_backward(&layer, ctx, &fresh(7, &input), &fresh(8, &out), &what("after an SGD step"));
            let w = Tensor::uniform(vec![32, 64, 3, 3], -0.5, 0.5, seed ^ 5).unwrap();
            GpuTensor::upload(ctx, &w).unwrap().copy_to(ctx, layer.weight()).unwrap();
            check_backward(&layer, ctx, &fresh(9, &input), &fresh(10, &out), &what("after a copy into the weight"));
        }
    }
    assert!(ran >= 2, "{ran} problems ran");
}
