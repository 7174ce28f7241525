//! Property tests: random valid configurations covering every option, GPU (outputs poisoned with NaN before
//! each dispatch) against the float64 CPU reference, relative L2 <= 1e-5. Inputs are drawn fresh every run.

mod common;

use common::problems::{problems, Problem};
use convt::gpu::Strategy as GpuStrategy;
use convt::{cpu, ConvTranspose2dOptions, ErrorStats, GpuContext};
use proptest::prelude::*;

/// Runs `p` on the GPU and compares with the f64 reference.
fn check(ctx: &GpuContext, p: &Problem) -> Result<(), TestCaseError> {
    let shape = p.shape();
    let (x, w, b) = p.tensors();
    let out = common::forward_host(ctx, &x, &w, b.as_ref(), &p.params).unwrap();
    prop_assert_eq!(out.shape(), &shape.output_dims_as_given()[..]);
    let reference = cpu::conv_transpose2d_f64(&shape, x.data(), w.data(), b.as_ref().map(|b| b.data())).unwrap();
    let s = ErrorStats::compare(out.data(), &reference);
    prop_assert!(s.non_finite == 0, "{} unwritten or non-finite outputs for {:?}", s.non_finite, p);
    prop_assert!(s.rel_l2 <= common::F32_TOLERANCE, "rel L2 {:e} for {:?}", s.rel_l2, p);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(96), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn gpu_matches_reference_on_random_problems(p in problems()) {
        check(common::ctx(), &p)?;
    }

    #[test]
    fn every_strategy_matches_reference_on_random_problems(p in problems(), pick in 0usize..64) {
        // Every algorithm and tile the selector can choose, forced on problems it would not pick them for too.
        let all = GpuStrategy::candidates();
        check(common::ctx_with_strategy(all[pick % all.len()]), &p)?;
    }

    #[test]
    fn gpu_matches_reference_with_tiny_bindings(p in problems(), pick in 0usize..64) {
        // Bindings of the weight's size (or one plane, if larger): tensors split across chunks, samples split
        // across input-channel chunks, outputs accumulated over several dispatches.
        let shape = p.shape();
        let plane = (shape.in_hw[0] * shape.in_hw[1]).max(shape.out_hw[0] * shape.out_hw[1]);
        let weight: usize = p.weight.iter().product();
        let limit = 4 * weight.max(plane).max(shape.out_channels);
        let all = GpuStrategy::candidates();
        check(&common::ctx_with_binding_limit(limit as u64, Some(all[pick % all.len()])), &p)?;
    }

    #[test]
    fn scatter_and_gather_references_agree(p in problems()) {
        // The two CPU formulations are written independently; they must agree to f64 rounding.
        let shape = p.shape();
        let (x, w, b) = p.tensors();
        let bias = b.as_ref().map(|b| b.data());
        let scatter = cpu::conv_transpose2d_f64(&shape, x.data(), w.data(), bias).unwrap();
        let dims = shape.output_dims();
        let mut i = 0;
        for n in 0..dims[0] { for c in 0..dims[1] { for oh in 0..dims[2] { for ow in 0..dims[3] {
            let g = cpu::output_at(&shape, x.data(), w.data(), bias, [n, c, oh, ow]);
            prop_assert!((g - scatter[i]).abs() <= 1e-12 * (1.0 + g.abs()), "at {:?}: {} vs {}", [n, c, oh, ow], g, scatter[i]);
            i += 1;
        }}}}
    }
}

/// The configurations the issue names explicitly, each on fresh random data.
#[test]
fn named_edge_configurations() {
    let p = |s: [i64; 2], pad: [i64; 2], op: [i64; 2], d: [i64; 2], g: i64| ConvTranspose2dOptions {
        stride: s,
        padding: pad,
        output_padding: op,
        dilation: d,
        groups: g,
        ..Default::default()
    };
    let cases: Vec<(&str, Vec<usize>, Vec<usize>, ConvTranspose2dOptions)> = vec![
        ("depthwise", vec![2, 6, 5, 4], vec![6, 1, 3, 3], p([2, 1], [1, 0], [1, 0], [1, 1], 6)),
        ("depthwise multiplier", vec![1, 3, 4, 4], vec![3, 5, 2, 3], p([1, 2], [0, 1], [0, 1], [1, 1], 3)),
        ("1x1 kernel", vec![2, 5, 4, 6], vec![5, 7, 1, 1], p([3, 2], [0, 0], [2, 1], [1, 1], 1)),
        ("1x1 input", vec![3, 4, 1, 1], vec![4, 3, 4, 3], p([2, 2], [0, 1], [0, 0], [1, 1], 1)),
        ("kernel larger than input", vec![1, 2, 2, 3], vec![2, 3, 7, 6], p([1, 1], [1, 2], [0, 0], [1, 2], 1)),
        ("crop to a single row", vec![2, 3, 3, 5], vec![3, 2, 3, 3], p([1, 1], [2, 1], [0, 0], [1, 1], 1)),
        ("crop to a single pixel", vec![1, 2, 2, 2], vec![2, 2, 2, 2], p([1, 1], [1, 1], [0, 0], [1, 1], 1)),
        (
            "output_padding with dilation > stride",
            vec![2, 3, 5, 4],
            vec![3, 4, 3, 3],
            p([1, 2], [0, 1], [1, 2], [2, 3], 1),
        ),
        ("large stride, gaps in output", vec![1, 2, 3, 3], vec![2, 2, 2, 2], p([5, 4], [0, 0], [4, 3], [1, 1], 1)),
        (
            "more stride phases (72) than one GEMM dispatch holds (64)",
            vec![1, 8, 3, 4],
            vec![8, 16, 3, 3],
            p([9, 8], [1, 0], [2, 5], [1, 1], 1),
        ),
        ("everything", vec![3, 6, 4, 5], vec![6, 3, 2, 3], p([3, 2], [2, 1], [1, 2], [2, 3], 2)),
        (
            "many channels (several blocks per group)",
            vec![1, 16, 4, 5],
            vec![16, 9, 3, 2],
            p([2, 1], [1, 0], [1, 0], [1, 1], 2),
        ),
    ];
    for (name, input, weight, params) in cases {
        for bias in [false, true] {
            let prob =
                Problem { input: input.clone(), weight: weight.clone(), bias, params, seed: common::fresh_seed() };
            check(common::ctx(), &prob).unwrap_or_else(|e| panic!("{name} (bias {bias}): {e}"));
        }
    }
}
