//! The backward pass: all three gradients on the GPU (outputs poisoned with NaN before the kernels run) against
//! the float64 CPU reference on random problems covering every option, relative L2 <= 1e-5; the CPU reference
//! itself against the adjoint identities; determinism; validation. PyTorch's own gradients are checked in
//! tests/fixtures.rs.

mod common;

use common::problems::{problems, Problem};
use convt::gpu::{GradInputKernel, GradWeightKernel};
use convt::{cpu, ConvShape, ErrorStats, GpuContext, GpuTensor, Tensor};
use proptest::prelude::*;

/// The problem's tensors and a random grad_output of the output's size.
fn operands(p: &Problem) -> (Tensor, Tensor, Option<Tensor>, Tensor) {
    let (x, w, b) = p.tensors();
    let go = Tensor::uniform(p.shape().output_dims_as_given(), -1.0, 1.0, p.seed ^ 3).unwrap();
    (x, w, b, go)
}

/// Compares a GPU gradient with its f64 reference: every element written and finite, rel L2 <= 1e-5.
fn close(what: &str, got: &Tensor, reference: &[f64], p: &Problem) -> Result<(), TestCaseError> {
    let s = ErrorStats::compare(got.data(), reference);
    prop_assert!(s.non_finite == 0, "{what}: {} unwritten or non-finite elements for {:?}", s.non_finite, p);
    prop_assert!(s.rel_l2 <= common::F32_TOLERANCE, "{what}: rel L2 {:e} for {:?}", s.rel_l2, p);
    Ok(())
}

/// Runs the backward of `p` on the GPU and compares each gradient with the f64 reference.
fn check(ctx: &GpuContext, p: &Problem) -> Result<(), TestCaseError> {
    let shape = p.shape();
    let (x, w, b, go) = operands(p);
    let g = common::backward_host(ctx, &x, &w, b.as_ref(), &go, &p.params).unwrap();
    prop_assert_eq!(g.grad_input.shape(), &shape.input_dims_as_given()[..]);
    prop_assert_eq!(g.grad_weight.shape(), &shape.weight_dims()[..]);
    close("grad_input", &g.grad_input, &cpu::grad_input_f64(&shape, go.data(), w.data()).unwrap(), p)?;
    close("grad_weight", &g.grad_weight, &cpu::grad_weight_f64(&shape, x.data(), go.data()).unwrap(), p)?;
    match (&g.grad_bias, &b) {
        (Some(gb), Some(_)) => close("grad_bias", gb, &cpu::grad_bias_f64(&shape, go.data()).unwrap(), p)?,
        (None, None) => {}
        _ => prop_assert!(false, "grad_bias present iff the bias is"),
    }
    Ok(())
}

fn dot(a: &[f32], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(&a, &b)| a as f64 * b).sum()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(96), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn gpu_gradients_match_reference_on_random_problems(p in problems()) {
        check(common::ctx(), &p)?;
    }

    #[test]
    fn gpu_gradients_match_reference_with_every_forward_strategy(p in problems(), pick in 0usize..64) {
        // At stride 1 grad_input runs as a transposed convolution through the forward's selector, and at any
        // stride a forced GEMM tile runs it as a sampled correlation: every algorithm and tile, forced, also on
        // problems the selector would not pick them for.
        let all = convt::gpu::Strategy::candidates();
        check(common::ctx_with_strategy(all[pick % all.len()]), &p)?;
    }

    #[test]
    fn gpu_gradients_match_reference_with_tiny_bindings(p in problems(), pick in 0usize..64) {
        // Bindings of the weight's size (or one plane, if larger): every tensor split over chunks, samples split
        // across channel chunks, so the sliced dispatches and the in-place accumulation of the reductions run.
        let shape = p.shape();
        let plane = (shape.in_hw[0] * shape.in_hw[1]).max(shape.out_hw[0] * shape.out_hw[1]);
        let weight: usize = p.weight.iter().product();
        let limit = 4 * weight.max(plane).max(shape.out_channels);
        let all = convt::gpu::Strategy::candidates();
        check(&common::ctx_with_binding_limit(limit as u64, Some(all[pick % all.len()])), &p)?;
    }

    #[test]
    fn reference_gradients_satisfy_the_adjoint_identities(p in problems()) {
        // The output is linear in x and in w: <y(x, w), go> = <x, grad_input> = <w, grad_weight> (without bias),
        // and <bias, grad_bias> is the bias's share. This checks the three reference gradients against the
        // forward reference, which tests/fixtures.rs checks against PyTorch.
        let shape: ConvShape = p.shape();
        let (x, w, b, go) = operands(&p);
        let y = cpu::conv_transpose2d_f64(&shape, x.data(), w.data(), None).unwrap();
        let go64: Vec<f64> = go.data().iter().map(|&v| v as f64).collect();
        let lhs: f64 = y.iter().zip(&go64).map(|(a, b)| a * b).sum();
        let via_input = dot(x.data(), &cpu::grad_input_f64(&shape, go.data(), w.data()).unwrap());
        let via_weight = dot(w.data(), &cpu::grad_weight_f64(&shape, x.data(), go.data()).unwrap());
        let scale = 1.0 + y.iter().map(|v| v.abs()).sum::<f64>();
        prop_assert!((lhs - via_input).abs() <= 1e-9 * scale, "<y,go> {} vs <x,gi> {} for {:?}", lhs, via_input, p);
        prop_assert!((lhs - via_weight).abs() <= 1e-9 * scale, "<y,go> {} vs <w,gw> {} for {:?}", lhs, via_weight, p);
        if let Some(b) = &b {
            let with_bias = cpu::conv_transpose2d_f64(&shape, x.data(), w.data(), Some(b.data())).unwrap();
            let lhs_b: f64 = with_bias.iter().zip(&go64).map(|(a, b)| a * b).sum::<f64>() - lhs;
            let via_bias = dot(b.data(), &cpu::grad_bias_f64(&shape, go.data()).unwrap());
            prop_assert!((lhs_b - via_bias).abs() <= 1e-9 * scale, "bias: {} vs {} for {:?}", lhs_b, via_bias, p);
        }
    }
}

#[test]
fn gradients_are_the_same_bits_on_every_run() {
    // Reductions in a fixed order, no atomics: two runs agree exactly, also when split over bindings.
    let p = Problem {
        input: vec![3, 8, 9, 7],
        weight: vec![8, 6, 3, 4],
        bias: true,
        params: convt::ConvTranspose2dOptions::default().stride((2, 1)).padding((1, 2)).groups(2),
        seed: common::fresh_seed(),
    };
    let (x, w, b, go) = operands(&p);
    // A binding of the weight's size (8*6*3*4 floats) splits x and grad_output over many chunks.
    for ctx in [common::ctx(), &common::ctx_with_binding_limit(4 * 8 * 6 * 3 * 4, None)] {
        let run = || common::backward_host(ctx, &x, &w, b.as_ref(), &go, &p.params).unwrap();
        let first = run();
        for _ in 0..3 {
            assert!(run() == first, "gradients differ between runs (seed {})", p.seed);
        }
    }
}

#[test]
fn unbatched_input_gives_unbatched_grad_input() {
    let params = convt::ConvTranspose2dOptions::default().stride(2).padding(1).output_padding(1);
    let x = Tensor::uniform(vec![3, 4, 5], -1.0, 1.0, common::fresh_seed()).unwrap();
    let w = Tensor::uniform(vec![3, 2, 3, 3], -1.0, 1.0, common::fresh_seed()).unwrap();
    let go = Tensor::uniform(vec![2, 8, 10], -1.0, 1.0, common::fresh_seed()).unwrap();
    let gpu = common::backward_host(common::ctx(), &x, &w, None, &go, &params).unwrap();
    let cpu = cpu::conv_transpose2d_backward(&x, &w, None, &go, &params).unwrap();
    assert_eq!(gpu.grad_input.shape(), &[3, 4, 5]);
    assert_eq!(cpu.grad_input.shape(), &[3, 4, 5]);
    assert!(gpu.grad_bias.is_none() && cpu.grad_bias.is_none());
    let reference: Vec<f64> = cpu.grad_input.data().iter().map(|&v| v as f64).collect();
    assert!(ErrorStats::compare(gpu.grad_input.data(), &reference).rel_l2 <= common::F32_TOLERANCE);
}

#[test]
fn grad_bias_is_exact_to_f32_when_its_terms_nearly_cancel() {
    // A random problem once drew a grad_output whose sum was far smaller than its terms: summed plainly in f32,
    // grad_bias erred by 4.7e-5 relative. Here 1296 terms of magnitude up to 1 sum to about 0.01 (the sum of
    // their magnitudes is near 650): plain f32 sums err by about 1e-4 relative, compensated ones by about 1e-7.
    let ctx = common::ctx();
    let params = convt::ConvTranspose2dOptions::default();
    let shape = params.resolve(&[4, 1, 16, 16], &[1, 1, 3, 3], Some(&[1])).unwrap();
    let x = Tensor::uniform(shape.input_dims(), -1.0, 1.0, 11).unwrap();
    let w = Tensor::uniform(shape.weight_dims(), -1.0, 1.0, 12).unwrap();
    let b = Tensor::uniform(vec![1], -1.0, 1.0, 13).unwrap();
    let mut go = Tensor::uniform(shape.output_dims(), -1.0, 1.0, 14).unwrap().data().to_vec();
    // Centred (the sum of the rounded terms is then within rounding of 0), then one term moved by 0.01.
    let mean = go.iter().map(|&v| v as f64).sum::<f64>() / go.len() as f64;
    go.iter_mut().for_each(|v| *v = (*v as f64 - mean) as f32);
    go[0] += 0.01;
    let go = Tensor::new(shape.output_dims(), go).unwrap();
    let reference = cpu::grad_bias_f64(&shape, go.data()).unwrap();
    let magnitudes: f64 = go.data().iter().map(|&v| (v as f64).abs()).sum();
    assert!(
        reference[0].abs() < 1e-3 * magnitudes,
        "the test's sum must nearly cancel: {} of {magnitudes}",
        reference[0]
    );
    let g = common::backward_host(ctx, &x, &w, Some(&b), &go, &params).unwrap();
    let s = ErrorStats::compare(g.grad_bias.as_ref().unwrap().data(), &reference);
    assert!(s.rel_l2 <= common::F32_TOLERANCE, "grad_bias: rel L2 {:e} (sum {})", s.rel_l2, reference[0]);
}

#[test]
fn grad_bias_of_few_channels_of_many_pixels_is_split_exactly() {
    // Two channels of 27 x 128 x 128 values: the sums split over several workgroups per channel (src/gpu/backward/
    // grad_bias.rs), then a second dispatch adds the splits: in one binding 6 splits of 5, 5, 5, 5, 5 and 2 planes
    // of a channel; in bindings of 9 samples (three chunks, each adding into what the earlier ones stored) 2 of 5
    // and 4; in bindings of one plane (chunks starting at either channel) one split. Small integers: every order
    // of the sum is exact in f32, so grad_bias must equal the float64 sum bit for bit (a plane counted twice or
    // missed shows).
    let params = convt::ConvTranspose2dOptions::default().stride(2);
    let shape = params.resolve(&[27, 2, 64, 64], &[2, 2, 2, 2], Some(&[2])).unwrap();
    let seed = common::fresh_seed();
    let x = Tensor::uniform(shape.input_dims(), -1.0, 1.0, seed).unwrap();
    let w = Tensor::uniform(shape.weight_dims(), -1.0, 1.0, seed + 1).unwrap();
    let b = Tensor::uniform(vec![2], -1.0, 1.0, seed + 2).unwrap();
    let go = Tensor::uniform(shape.output_dims(), -8.0, 8.0, seed + 3).unwrap();
    let go = Tensor::new(shape.output_dims(), go.data().iter().map(|v| v.round()).collect()).unwrap();
    let reference = cpu::grad_bias_f64(&shape, go.data()).unwrap();
    let plane = 4 * 128 * 128;
    for limit in [None, Some(18 * plane), Some(plane)] {
        let limited = limit.map(|l| common::ctx_with_binding_limit(l, None));
        let ctx = limited.as_ref().unwrap_or(common::ctx());
        let g = common::backward_host(ctx, &x, &w, Some(&b), &go, &params).unwrap();
        let got: Vec<f64> = g.grad_bias.as_ref().unwrap().data().iter().map(|&v| v as f64).collect();
        assert_eq!(got, reference, "grad_bias (seed {seed}, bindings of {limit:?} bytes)");
    }
}

#[test]
fn grad_output_of_the_wrong_size_is_rejected_by_both_backends() {
    let params = convt::ConvTranspose2dOptions::default().stride(2);
    let x = Tensor::uniform(vec![1, 3, 4, 4], -1.0, 1.0, 1).unwrap();
    let w = Tensor::uniform(vec![3, 2, 3, 3], -1.0, 1.0, 2).unwrap();
    let go = Tensor::uniform(vec![1, 2, 9, 8], -1.0, 1.0, 3).unwrap(); // the output is [1, 2, 9, 9]
    let cpu_err = cpu::conv_transpose2d_backward(&x, &w, None, &go, &params).unwrap_err();
    let gpu_err = common::backward_host(common::ctx(), &x, &w, None, &go, &params).unwrap_err();
    for e in [&cpu_err, &gpu_err] {
        assert!(matches!(e, convt::ConvtError::GradOutputShape { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            "grad_output must have the output's size [1, 2, 9, 9], but got grad_output of size [1, 2, 9, 8]"
        );
    }
}

#[test]
fn gradient_tensors_of_the_wrong_size_are_rejected() {
    let ctx = common::ctx();
    let params = convt::ConvTranspose2dOptions::default();
    let up = |dims: Vec<usize>| GpuTensor::upload(ctx, &Tensor::uniform(dims, -1.0, 1.0, 5).unwrap()).unwrap();
    let (x, w, go) = (up(vec![1, 3, 4, 4]), up(vec![3, 2, 3, 3]), up(vec![1, 2, 6, 6]));
    let mut grads = convt::GpuGradients::empty(ctx, &x, &w, None, &params).unwrap();
    grads.grad_weight = up(vec![3, 2, 3, 2]);
    let e = convt::gpu::conv_transpose2d_backward_into(ctx, &x, &w, None, &go, &params, &grads, Default::default())
        .unwrap_err();
    assert!(matches!(e, convt::ConvtError::ShapeMismatch { .. }), "{e}");
}

#[test]
fn mse_gradient_on_the_gpu_is_two_over_n_times_the_difference() {
    let ctx = common::ctx();
    let pred = Tensor::uniform(vec![2, 3, 5, 4], -1.0, 1.0, common::fresh_seed()).unwrap();
    let target = Tensor::uniform(vec![2, 3, 5, 4], -1.0, 1.0, common::fresh_seed()).unwrap();
    let grad = GpuTensor::empty(ctx, pred.shape()).unwrap();
    let (p, t) = (GpuTensor::upload(ctx, &pred).unwrap(), GpuTensor::upload(ctx, &target).unwrap());
    convt::gpu::elementwise::mse_grad(ctx, &p, &t, &grad).unwrap();
    let n = pred.numel() as f64;
    let expected: Vec<f64> =
        pred.data().iter().zip(target.data()).map(|(&a, &b)| 2.0 / n * (a as f64 - b as f64)).collect();
    let s = ErrorStats::compare(grad.download(ctx).unwrap().data(), &expected);
    assert!(s.non_finite == 0 && s.rel_l2 <= common::F32_TOLERANCE, "{s:?}");
}

/// Parameters from stride, padding, output padding, dilation and groups.
fn params(s: [i64; 2], pad: [i64; 2], op: [i64; 2], d: [i64; 2], g: i64) -> convt::ConvTranspose2dOptions {
    convt::ConvTranspose2dOptions {
        stride: s,
        padding: pad,
        output_padding: op,
        dilation: d,
        groups: g,
        ..Default::default()
    }
}

/// A problem with a bias and fresh random tensors.
fn with_bias(input: &[usize], weight: &[usize], params: convt::ConvTranspose2dOptions) -> Problem {
    Problem { input: input.to_vec(), weight: weight.to_vec(), bias: true, params, seed: common::fresh_seed() }
}

#[test]
fn stride_one_grad_input_runs_through_every_forward_strategy() {
    // The configurations whose grad_input is a transposed convolution (stride 1, no output_padding, padding
    // <= dilation*(k-1)), each with every algorithm and tile forced, so every GEMM variant computes grad_input.
    let p = |pad: [i64; 2], d: [i64; 2], g: i64| convt::ConvTranspose2dOptions {
        stride: [1, 1],
        padding: pad,
        output_padding: [0, 0],
        dilation: d,
        groups: g,
        ..Default::default()
    };
    let cases = [
        (vec![2, 16, 7, 9], vec![16, 24, 3, 3], p([0, 0], [1, 1], 1)),
        (vec![1, 12, 6, 5], vec![12, 5, 3, 5], p([2, 1], [2, 1], 3)),
        (vec![2, 9, 5, 6], vec![9, 7, 1, 1], p([0, 0], [1, 1], 1)),
    ];
    for (input, weight, params) in cases {
        let shape = params.resolve(&input, &weight, None).unwrap();
        assert!(GradInputKernel::transposed_problem(&shape).is_some(), "{shape:?}");
        for strategy in common::sample(&convt::gpu::Strategy::candidates(), 4) {
            let prob = with_bias(&input, &weight, params);
            check(common::ctx_with_strategy(strategy), &prob).unwrap_or_else(|e| panic!("{}: {e}", strategy.name()));
        }
    }
}

#[test]
fn strided_grad_input_runs_on_every_gemm_tile() {
    // Strides, output_padding, padding beyond dilation*(k-1), dilation and groups: grad_input is then a strided
    // convolution, which the GEMM kernel runs as one sampled phase. Each exact GEMM tile forced, and the heuristic
    // (the GEMM on these channel counts, the gather kernel on the kb81-like problem, whose grad_output is 15 times
    // its input), against the float64 reference; H != W and channel counts that leave partial tiles.
    let p = params;
    let cases = [
        // up2x-like: 3x3, stride 2, padding 1, output_padding 1.
        (vec![2, 40, 6, 9], vec![40, 24, 3, 3], p([2, 2], [1, 1], [1, 1], [1, 1], 1)),
        // dcgan-like: 4x4, stride 2, padding 1.
        (vec![3, 36, 5, 4], vec![36, 20, 4, 4], p([2, 2], [1, 1], [0, 0], [1, 1], 1)),
        // kb81-like: stride 5, dilation 2; and a stride larger than the kernel on one axis.
        (vec![1, 32, 4, 7], vec![32, 18, 3, 3], p([5, 3], [1, 1], [0, 2], [2, 2], 1)),
        // Groups, asymmetric stride and dilation, padding beyond dilation*(k-1) (2 > 1) along W.
        (vec![2, 48, 5, 6], vec![48, 12, 3, 2], p([2, 1], [1, 2], [1, 0], [2, 1], 2)),
    ];
    let mut strategies = vec![None];
    strategies.extend(
        convt::gpu::Strategy::candidates().into_iter().filter(|s| matches!(s, convt::gpu::Strategy::Gemm(_))).map(Some),
    );
    for (input, weight, params) in cases {
        let shape = params.resolve(&input, &weight, None).unwrap();
        assert!(GradInputKernel::transposed_problem(&shape).is_none(), "{shape:?}");
        for strategy in &common::sample(&strategies, 3) {
            let prob = with_bias(&input, &weight, params);
            let ctx = match strategy {
                Some(s) => common::ctx_with_strategy(*s),
                None => common::ctx(),
            };
            check(ctx, &prob).unwrap_or_else(|e| panic!("{strategy:?}: {e}"));
        }
    }
}

#[test]
fn many_channels_span_several_grad_weight_tiles() {
    // More than 64 input and output channels per group: several 64 x 64 tiles of the grad_weight GEMM per group,
    // the last ones partial, with groups; split-K over a batch of 3.
    let params = convt::ConvTranspose2dOptions::default().stride((2, 1)).padding((1, 0)).groups(2);
    let p = Problem {
        input: vec![3, 160, 4, 5],
        weight: vec![160, 70, 2, 3],
        bias: true,
        params,
        seed: common::fresh_seed(),
    };
    check(common::ctx(), &p).unwrap();
}

#[test]
fn grad_weight_is_right_with_every_tile_size() {
    // The grad_weight GEMM's tile follows the channels per group (16, 32 or 64 wide): each size against the
    // float64 reference, with the channels filling the tile exactly and partly. Stride 1, or more than 32 input
    // channels per group: shapes the per-tap GEMM computes (strided ones with fewer go to the rows kernel, below).
    let mut sizes = std::collections::BTreeSet::new();
    for (cin, cout, groups, stride) in
        [(12usize, 6usize, 2i64, 1i64), (16, 16, 1, 1), (24, 20, 1, 1), (32, 8, 1, 1), (40, 36, 1, 3)]
    {
        let params = convt::ConvTranspose2dOptions::default().stride((stride, 1)).padding((1, 0)).groups(groups);
        let p = Problem {
            input: vec![2, cin, 5, 4],
            weight: vec![cin, cout / groups as usize, 3, 2],
            bias: true,
            params,
            seed: common::fresh_seed(),
        };
        let shape = p.shape();
        match convt::gpu::select::grad_weight(common::ctx(), &shape, [1, 1], convt::Precision::F32, convt::DType::F32) {
            GradWeightKernel::Taps(tile) => sizes.insert(tile),
            k => panic!("{k:?} took {shape:?}"),
        };
        check(common::ctx(), &p).unwrap();
    }
    assert_eq!(
        sizes.into_iter().collect::<Vec<_>>(),
        GradWeightKernel::all()
            .into_iter()
            .filter_map(|k| match k {
                GradWeightKernel::Taps(t) => Some(t),
                _ => None,
            })
            .collect::<Vec<_>>()
    );
}

#[test]
fn grad_weight_rows_kernel_takes_strided_problems_with_few_channels() {
    // The rows kernel (shaders/backward/grad_weight_rows.wgsl) on the strided shapes it takes (groups of at most
    // 16 x 16 channels, or 32 input channels and 3 kernel rows), against the float64 reference: kb75-like (groups,
    // stride 2 x 3, padding 1 x 2, dilation 2 x 1, 3 x 5 kernel) and kb81-like (stride 5, dilation 2: rows and columns no tap reaches); input channels per group
    // that are not a multiple of 4 (its vec4s padded); rows longer than its staged columns (several chunks per row:
    // 16 channels, 300 columns); padding beyond dilation * (kernel - 1), so that some input rows reach no output
    // row; output padding; a stride along one axis only; a batch of 3 and input rows that leave a partial block of
    // rows; kernel rows in blocks whose last is partial; groups of 32 input channels whose 3 kernel rows fit one
    // invocation. Wider groups go to the per-tap GEMM.
    let p = params;
    let cases = [
        (vec![2, 32, 6, 9], vec![32, 16, 3, 5], p([2, 3], [1, 2], [0, 0], [2, 1], 4)),
        (vec![2, 16, 5, 7], vec![16, 16, 3, 3], p([5, 5], [1, 1], [0, 0], [2, 2], 1)),
        (vec![3, 6, 7, 5], vec![6, 5, 2, 3], p([2, 2], [0, 1], [1, 1], [1, 1], 2)),
        (vec![1, 16, 3, 300], vec![16, 8, 2, 2], p([1, 2], [0, 0], [0, 1], [1, 1], 1)),
        (vec![2, 5, 9, 4], vec![5, 7, 2, 3], p([3, 1], [4, 1], [0, 0], [1, 2], 1)),
        // A kernel 20 columns wide: 12 output channels per workgroup (256 invocations at most), so blocks of 12 and 4.
        (vec![1, 4, 3, 30], vec![4, 16, 2, 20], p([2, 2], [0, 0], [0, 0], [1, 1], 1)),
        // Five kernel rows, 4 an invocation: two invocations along them in one workgroup (rows 0-3 and 4), or with
        // 16 x 9 invocations for the channels and columns, one per workgroup (blocks of rows 0-3 and 4).
        (vec![2, 8, 5, 12], vec![8, 16, 5, 7], p([2, 2], [2, 3], [0, 0], [1, 1], 1)),
        (vec![1, 4, 6, 20], vec![4, 16, 5, 9], p([2, 2], [1, 2], [0, 0], [1, 1], 1)),
        // kb81-like groups of 32 x 24 channels: 8 vec4s of input channels for each of the 3 kernel rows.
        (vec![2, 32, 5, 7], vec![32, 24, 3, 3], p([5, 5], [1, 1], [0, 0], [2, 2], 1)),
    ];
    let gemm = |input: [usize; 4], weight: [usize; 4], why: &str| {
        let wider = p([2, 2], [0, 0], [0, 0], [1, 1], 1).resolve(&input, &weight, None).unwrap();
        assert_ne!(
            convt::gpu::select::grad_weight(common::ctx(), &wider, [1, 1], convt::Precision::F32, convt::DType::F32),
            GradWeightKernel::Rows,
            "{why}"
        );
    };
    gemm([1, 64, 4, 4], [64, 32, 3, 3], "64 input channels per group");
    gemm([1, 32, 4, 4], [32, 32, 4, 3], "32 input channels per group and 4 kernel rows");
    for (input, weight, params) in cases {
        let shape = params.resolve(&input, &weight, None).unwrap();
        let kernel =
            convt::gpu::select::grad_weight(common::ctx(), &shape, [1, 1], convt::Precision::F32, convt::DType::F32);
        assert_eq!(kernel, GradWeightKernel::Rows, "the rows kernel does not take {shape:?}");
        for bias in [true, false] {
            let prob = Problem { bias, ..with_bias(&input, &weight, params) };
            check(common::ctx(), &prob).unwrap_or_else(|e| panic!("{shape:?}: {e}"));
        }
    }
}

#[test]
fn gather_grad_input_is_right_at_every_tile() {
    // The gather kernel (shaders/backward/grad_input.wgsl; the direct strategy forces it for grad_input) at each
    // of its tiles (src/gpu/backward/grad_input.rs, `GatherTile`), against the float64 reference with its output
    // poisoned: 1, 2, 4 and 8 vec4s of input channels (3, 8, 12, 32, 20 and 40 a group: partial blocks, and two
    // blocks of 32 channels), 4, 2 and 1 pixels an invocation (planes of 2400, 1152, 640, 600 and 240 pixels: the
    // last workgroup's partly past the plane), weights
    // staged in one and in three chunks of output channels or, for a 33 x 33 kernel, read from storage; borders
    // on every side (padding, strides, dilation), groups. Each also with bindings of one plane, so that grad_output's
    // channels of a sample arrive in several slices and the later ones add to what the first wrote.
    let p = params;
    let cases = [
        (vec![1, 6, 48, 50], vec![6, 5, 3, 3], p([2, 2], [1, 1], [1, 1], [1, 1], 2)),
        (vec![1, 32, 24, 48], vec![32, 16, 3, 5], p([2, 3], [1, 2], [0, 0], [2, 1], 4)),
        (vec![1, 32, 16, 40], vec![32, 18, 3, 3], p([5, 5], [1, 1], [0, 0], [2, 2], 1)),
        (vec![2, 12, 20, 30], vec![12, 24, 5, 5], p([1, 2], [2, 2], [0, 1], [1, 1], 1)),
        (vec![1, 2, 3, 3], vec![2, 3, 33, 33], p([1, 1], [0, 0], [0, 0], [1, 1], 1)),
        (vec![1, 40, 12, 20], vec![40, 3, 3, 3], p([3, 2], [1, 0], [0, 1], [1, 2], 2)),
        (vec![1, 40, 12, 20], vec![40, 6, 3, 3], p([3, 2], [1, 0], [0, 1], [1, 2], 1)),
    ];
    let direct = convt::gpu::Strategy::Direct;
    for (input, weight, params) in cases {
        let prob = with_bias(&input, &weight, params);
        let shape = prob.shape();
        assert_eq!(
            convt::gpu::select::grad_input(
                common::ctx_with_strategy(direct),
                &shape,
                convt::Precision::F32,
                convt::DType::F32
            ),
            GradInputKernel::Gather
        );
        check(common::ctx_with_strategy(direct), &prob).unwrap_or_else(|e| panic!("{shape:?}: {e}"));
        let plane = 4 * (shape.in_hw[0] * shape.in_hw[1]).max(shape.out_hw[0] * shape.out_hw[1]);
        let limit = plane.max(4 * weight.iter().product::<usize>());
        let prob = with_bias(&input, &weight, params);
        check(&common::ctx_with_binding_limit(limit as u64, Some(direct)), &prob)
            .unwrap_or_else(|e| panic!("{shape:?}, bindings of {limit} bytes: {e}"));
    }
}
