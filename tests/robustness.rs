//! Reliability under stress: NaN and Inf propagate exactly as in the definition (and PyTorch), requests larger
//! than the device can hold fail cleanly and leave the context usable, one context serves many threads, and
//! 10,000 calls over varying shapes do not grow memory.

mod common;

use common::problems::Problem;
use convt::{cpu, ConvTranspose2dOptions, GpuContext, Tensor};

/// Puts NaN, +Inf and -Inf at a few positions of `t` (deterministically from `seed`).
fn with_non_finite(mut t: Tensor, seed: u64) -> Tensor {
    let n = t.numel();
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY];
    for (i, v) in specials.iter().enumerate() {
        let at = (seed as usize).wrapping_mul(2654435761).wrapping_add(i * 7919) % n;
        t.data_mut()[at] = *v;
    }
    t
}

/// The GPU result must have the reference's non-finite values at the same places (NaN where NaN, the same
/// infinity where infinite) and be close elsewhere.
fn same_propagation(what: &str, got: &[f32], reference: &[f64]) {
    assert_eq!(got.len(), reference.len());
    let mut finite = (Vec::new(), Vec::new());
    for (i, (&g, &r)) in got.iter().zip(reference).enumerate() {
        if r.is_nan() {
            assert!(g.is_nan(), "{what}[{i}]: reference NaN, got {g}");
        } else if r.is_infinite() {
            assert!(g.is_infinite() && (g > 0.0) == (r > 0.0), "{what}[{i}]: reference {r}, got {g}");
        } else {
            finite.0.push(g);
            finite.1.push(r);
        }
    }
    let s = convt::ErrorStats::compare(&finite.0, &finite.1);
    assert!(s.non_finite == 0 && s.rel_l2 <= common::F32_TOLERANCE, "{what}: finite part {s:?}");
}

fn problem(params: ConvTranspose2dOptions, input: Vec<usize>, weight: Vec<usize>) -> Problem {
    Problem { input, weight, bias: true, params, seed: common::fresh_seed() }
}

fn nan_problems() -> Vec<Problem> {
    vec![
        problem(
            ConvTranspose2dOptions::default().stride(2).padding(1).output_padding(1),
            vec![2, 16, 6, 5],
            vec![16, 24, 3, 3],
        ),
        problem(ConvTranspose2dOptions::default().padding((1, 2)), vec![1, 12, 7, 6], vec![12, 20, 3, 5]),
        problem(
            ConvTranspose2dOptions::default().stride((2, 3)).dilation((2, 1)).padding((1, 2)).groups(4),
            vec![2, 8, 5, 6],
            vec![8, 4, 3, 5],
        ),
    ]
}

#[test]
fn nan_and_inf_in_the_input_and_bias_propagate_as_in_the_definition() {
    // Every algorithm and tile, forced: the non-finite values land exactly where the float64 reference puts them.
    for strategy in convt::gpu::Strategy::candidates() {
        let ctx = common::ctx_with_strategy(strategy);
        for p in nan_problems() {
            let (x, w, b) = p.tensors();
            let x = with_non_finite(x, p.seed);
            let b = b.map(|b| with_non_finite(b, p.seed ^ 1));
            let shape = p.shape();
            let y = common::forward_host(ctx, &x, &w, b.as_ref(), &p.params).unwrap();
            let reference =
                cpu::conv_transpose2d_f64(&shape, x.data(), w.data(), b.as_ref().map(|b| b.data())).unwrap();
            assert!(reference.iter().any(|v| v.is_nan()) && reference.iter().any(|v| v.is_infinite()));
            same_propagation(&format!("{} output", strategy.name()), y.data(), &reference);
        }
    }
}

#[test]
fn nan_and_inf_in_the_weight_are_never_masked() {
    // A non-finite weight makes non-finite every output its tap reaches inside the output, on every algorithm.
    // PyTorch itself differs here between backends (scripts/nan_probe.py, docs/results/nan_probe.txt): its CPU
    // path follows the definition, cuDNN's implicit GEMM also multiplies the weight with zero padding (0 * Inf =
    // NaN) and marks more outputs NaN. convt's gather kernel follows the definition exactly; its GEMM kernel
    // zero-fills padding like cuDNN, so it may add NaN at such outputs, and nothing else.
    for strategy in convt::gpu::Strategy::candidates() {
        let ctx = common::ctx_with_strategy(strategy);
        for p in nan_problems() {
            let (x, w, b) = p.tensors();
            let w = with_non_finite(w, p.seed ^ 2);
            let shape = p.shape();
            // A forced strategy gives way to the selector's on shapes it does not compute (the Winograd tiles):
            // what is checked is what ran.
            let (y, ran) = common::forward_host_as(ctx, convt::Precision::F32, &x, &w, b.as_ref(), &p.params).unwrap();
            let reference =
                cpu::conv_transpose2d_f64(&shape, x.data(), w.data(), b.as_ref().map(|b| b.data())).unwrap();
            let what = format!("{} output (forced {})", ran.name(), strategy.name());
            // The gather kernels (direct, rows) multiply only the taps the definition sums; the Winograd kernel
            // recomputes every output its transforms leave non-finite by the definition.
            if matches!(
                ran,
                convt::gpu::Strategy::Direct | convt::gpu::Strategy::Rows(_) | convt::gpu::Strategy::Winograd(_)
            ) {
                same_propagation(&what, y.data(), &reference);
                continue;
            }
            // GEMM: compare outside the extra NaNs (where the reference is finite or infinite), which only zero
            // padding times a non-finite weight makes.
            let (mut got, mut want) = (Vec::new(), Vec::new());
            for (&g, &r) in y.data().iter().zip(&reference) {
                if !g.is_nan() || r.is_nan() {
                    got.push(g);
                    want.push(r);
                }
            }
            assert!(
                got.len() * 10 >= y.numel() * 9,
                "{what}: too many extra NaNs ({} of {})",
                y.numel() - got.len(),
                y.numel()
            );
            same_propagation(&what, &got, &want);
        }
    }
}

#[test]
fn nan_and_inf_propagate_through_the_backward_as_in_the_definition() {
    let ctx = common::ctx();
    for p in nan_problems() {
        let (x, w, b) = p.tensors();
        let shape = p.shape();
        let go = Tensor::uniform(shape.output_dims(), -1.0, 1.0, p.seed ^ 3).unwrap();
        let (x, go) = (with_non_finite(x, p.seed), with_non_finite(go, p.seed ^ 4));
        let g = common::backward_host(ctx, &x, &w, b.as_ref(), &go, &p.params).unwrap();
        same_propagation("grad_input", g.grad_input.data(), &cpu::grad_input_f64(&shape, go.data(), w.data()).unwrap());
        same_propagation(
            "grad_weight",
            g.grad_weight.data(),
            &cpu::grad_weight_f64(&shape, x.data(), go.data()).unwrap(),
        );
        same_propagation("grad_bias", g.grad_bias.unwrap().data(), &cpu::grad_bias_f64(&shape, go.data()).unwrap());
    }
}

/// A normal call must succeed on `ctx` and give the reference's answer.
fn normal_call_works(ctx: &GpuContext) {
    let params = ConvTranspose2dOptions::default().stride(2).padding(1);
    let x = Tensor::uniform(vec![2, 4, 6, 5], -1.0, 1.0, common::fresh_seed()).unwrap();
    let w = Tensor::uniform(vec![4, 3, 3, 3], -1.0, 1.0, common::fresh_seed()).unwrap();
    let y = common::forward_host(ctx, &x, &w, None, &params).unwrap();
    let shape = params.resolve(x.shape(), w.shape(), None).unwrap();
    let reference = cpu::conv_transpose2d_f64(&shape, x.data(), w.data(), None).unwrap();
    assert!(convt::ErrorStats::compare(y.data(), &reference).rel_l2 <= common::F32_TOLERANCE);
}

#[test]
fn a_request_larger_than_the_device_holds_fails_cleanly_and_the_context_stays_usable() {
    let ctx = common::ctx_with_budget(64 << 20);
    normal_call_works(&ctx);
    // 2 x 64 x 1024 x 1024 floats of output (512 MiB) from a small input: refused before allocating.
    let params = ConvTranspose2dOptions::default().stride(8);
    let x = Tensor::uniform(vec![2, 8, 128, 128], -1.0, 1.0, 1).unwrap();
    let w = Tensor::uniform(vec![8, 64, 8, 8], -1.0, 1.0, 2).unwrap();
    let e = common::forward_host(&ctx, &x, &w, None, &params).unwrap_err();
    assert!(matches!(e, convt::ConvtError::OutOfMemory(_)), "{e}");
    assert!(e.to_string().contains("[2, 64, 1024, 1024]") && e.to_string().contains("budget"), "{e}");
    // Nothing stays reserved; the same context serves the next call, forward and backward.
    assert_eq!(ctx.tensor_bytes(), 0);
    normal_call_works(&ctx);
    let go = Tensor::uniform(vec![2, 64, 1024, 1024], -1.0, 1.0, 3).unwrap();
    let e = common::backward_host(&ctx, &x, &w, None, &go, &params).unwrap_err();
    assert!(matches!(e, convt::ConvtError::OutOfMemory(_)), "{e}");
    normal_call_works(&ctx);
    assert_eq!(ctx.tensor_bytes(), 0);
}

#[test]
fn a_software_adapter_has_a_memory_budget_by_default() {
    // So that an oversized request on Mesa's software driver is an error, not the process killed for memory.
    let ctx = common::ctx();
    if ctx.adapter_info().device_type == wgpu::DeviceType::Cpu {
        let budget = ctx.memory_budget().expect("a budget on a CPU adapter");
        assert!(budget > 0);
        // A tensor far beyond any machine's memory (4 TiB): refused before anything is allocated.
        let e = convt::GpuTensor::empty(ctx, &[1 << 14, 64, 1024, 1024]).expect_err("refused");
        assert!(matches!(e, convt::ConvtError::OutOfMemory(_)), "{e}");
        normal_call_works(ctx);
    }
}

#[test]
#[ignore = "exhausts the device's memory: run on a GPU machine with --ignored (docs/RELIABILITY.md)"]
fn exhausting_the_real_device_memory_is_an_error_and_the_context_recovers() {
    // Without a budget: tensors of 1 GiB until the driver refuses one, which must come back as OutOfMemory.
    let mut opts = convt::GpuOptions::from_env().unwrap();
    opts.memory_budget = Some(u64::MAX);
    let ctx = GpuContext::with_options(opts).unwrap();
    let mut held = Vec::new();
    let error = loop {
        match convt::GpuTensor::empty(&ctx, &[256, 1024, 1024]) {
            Ok(t) => held.push(t),
            Err(e) => break e,
        }
        assert!(held.len() < 4096, "4 TiB allocated without an error");
    };
    println!("refused after {} GiB: {error}", held.len());
    assert!(matches!(error, convt::ConvtError::OutOfMemory(_)), "{error}");
    drop(held);
    normal_call_works(&ctx);
}

#[test]
fn one_context_serves_many_threads_at_once() {
    // Four threads, each its own layer (different options, shapes and bias), forward and backward in a loop on
    // one shared context; every result checked against the reference computed once per thread.
    let ctx = common::ctx();
    let configs = [
        (
            ConvTranspose2dOptions::default().stride(2).padding(1).output_padding(1),
            vec![2, 8, 6, 5],
            vec![8, 4, 3, 3],
            true,
        ),
        (ConvTranspose2dOptions::default().dilation((2, 1)).padding((1, 0)), vec![1, 6, 7, 4], vec![6, 5, 3, 2], false),
        (ConvTranspose2dOptions::default().stride((3, 2)).groups(2), vec![3, 4, 5, 5], vec![4, 3, 2, 3], true),
        (ConvTranspose2dOptions::default(), vec![2, 16, 5, 6], vec![16, 20, 3, 3], true),
    ];
    std::thread::scope(|scope| {
        for (i, (params, input, weight, bias)) in configs.iter().enumerate() {
            scope.spawn(move || {
                let p = Problem {
                    input: input.clone(),
                    weight: weight.clone(),
                    bias: *bias,
                    params: *params,
                    seed: common::fresh_seed(),
                };
                let shape = p.shape();
                let (x, w, b) = p.tensors();
                let go = Tensor::uniform(shape.output_dims(), -1.0, 1.0, p.seed ^ 9).unwrap();
                let y_ref =
                    cpu::conv_transpose2d_f64(&shape, x.data(), w.data(), b.as_ref().map(|b| b.data())).unwrap();
                let gw_ref = cpu::grad_weight_f64(&shape, x.data(), go.data()).unwrap();
                for _ in 0..25 {
                    let y = common::forward_host(ctx, &x, &w, b.as_ref(), &p.params).unwrap();
                    let s = convt::ErrorStats::compare(y.data(), &y_ref);
                    assert!(s.rel_l2 <= common::F32_TOLERANCE && s.non_finite == 0, "thread {i}: {s:?}");
                    let g = common::backward_host(ctx, &x, &w, b.as_ref(), &go, &p.params).unwrap();
                    let s = convt::ErrorStats::compare(g.grad_weight.data(), &gw_ref);
                    assert!(s.rel_l2 <= common::F32_TOLERANCE && s.non_finite == 0, "thread {i} grad_weight: {s:?}");
                }
            });
        }
    });
}

/// Resident memory of this process, from /proc (Linux); 0 elsewhere.
#[test]
fn a_wgpu_error_raised_outside_convt_becomes_an_error_of_the_next_call_not_an_abort() {
    let ctx = common::ctx_with_budget(u64::MAX);
    normal_call_works(&ctx);
    // An invalid buffer (MAP_READ with STORAGE is not allowed) made directly on the context's device, outside
    // any error scope: wgpu reports it to the uncaptured-error handler convt installs.
    let _bad = ctx.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("invalid on purpose"),
        size: 16,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    });
    let x = Tensor::uniform(vec![1, 2, 3, 3], -1.0, 1.0, 1).unwrap();
    let w = Tensor::uniform(vec![2, 2, 2, 2], -1.0, 1.0, 2).unwrap();
    let e = common::forward_host(&ctx, &x, &w, None, &ConvTranspose2dOptions::default()).unwrap_err();
    assert!(matches!(e, convt::ConvtError::Gpu(_)), "{e}");
    // Reported once; the context goes on working.
    normal_call_works(&ctx);
}

#[test]
fn a_lost_device_is_an_error_on_every_later_call() {
    let ctx = common::ctx_with_budget(u64::MAX);
    normal_call_works(&ctx);
    ctx.device().destroy();
    let x = Tensor::uniform(vec![1, 2, 3, 3], -1.0, 1.0, 1).unwrap();
    let w = Tensor::uniform(vec![2, 2, 2, 2], -1.0, 1.0, 2).unwrap();
    for _ in 0..2 {
        let e = common::forward_host(&ctx, &x, &w, None, &ConvTranspose2dOptions::default()).unwrap_err();
        assert!(matches!(e, convt::ConvtError::DeviceLost(_) | convt::ConvtError::Gpu(_)), "{e}");
    }
}

#[test]
fn a_gemm_tile_forced_on_a_huge_stride_returns_promptly_and_correctly() {
    // Phases past the output's size have no pixel; with a stride of 2^31 - 4 (the largest the index check lets through here) on a 1x2 input there are only a
    // few outputs, and every GEMM tile must enumerate only the phases that hold them.
    let params = ConvTranspose2dOptions::default().stride(((1 << 31) - 4, 3));
    let x = Tensor::uniform(vec![1, 3, 1, 2], -1.0, 1.0, common::fresh_seed()).unwrap();
    let w = Tensor::uniform(vec![3, 2, 2, 2], -1.0, 1.0, common::fresh_seed()).unwrap();
    let shape = params.resolve(x.shape(), w.shape(), None).unwrap();
    let reference = cpu::conv_transpose2d_f64(&shape, x.data(), w.data(), None).unwrap();
    for strategy in convt::gpu::Strategy::candidates() {
        let t = std::time::Instant::now();
        let y = common::forward_host(common::ctx_with_strategy(strategy), &x, &w, None, &params).unwrap();
        assert!(t.elapsed().as_secs() < 10, "{} took {:?}", strategy.name(), t.elapsed());
        let s = convt::ErrorStats::compare(y.data(), &reference);
        assert!(s.non_finite == 0 && s.rel_l2 <= common::F32_TOLERANCE, "{}: {s:?}", strategy.name());
    }
}
