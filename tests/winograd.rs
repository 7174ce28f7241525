//! The Winograd kernel (stride 1, no dilation) on every tile against the float64 CPU reference, relative L2
//! <= 1e-5, outputs poisoned with NaN before each dispatch, inputs drawn fresh every run: random shapes, shapes
//! that cross its K steps, channel blocks and tile blocks, tensors split over many bindings; and its refusal
//! of the shapes it does not compute.

mod common;

use common::problems::Problem;
use convt::gpu::Strategy as GpuStrategy;
use convt::{cpu, ConvTranspose2dOptions, ConvtError, ErrorStats, GpuContext};
use proptest::prelude::*;

fn check(ctx: &GpuContext, strategy: GpuStrategy, p: &Problem) -> Result<(), TestCaseError> {
    let shape = p.shape();
    let (x, w, b) = p.tensors();
    let ran = common::forward_host_as(ctx, convt::Precision::F32, &x, &w, b.as_ref(), &p.params);
    let (out, used) = ran.map_err(|e| TestCaseError::fail(format!("{e} for {p:?}")))?;
    prop_assert_eq!(used, strategy, "the forced tile did not run for {:?}", p);
    let reference = cpu::conv_transpose2d_f64(&shape, x.data(), w.data(), b.as_ref().map(|b| b.data())).unwrap();
    let s = ErrorStats::compare(out.data(), &reference);
    prop_assert!(
        s.non_finite == 0,
        "{}: {} unwritten or non-finite outputs for {:?}",
        strategy.name(),
        s.non_finite,
        p
    );
    prop_assert!(s.rel_l2 <= common::F32_TOLERANCE, "{}: rel L2 {:e} for {:?}", strategy.name(), s.rel_l2, p);
    Ok(())
}

/// Stride-1 undilated problems, kernels 1x1 to 7x7, channels across several K steps and channel blocks.
/// Every Winograd tile of this build.
fn wino_tiles() -> Vec<GpuStrategy> {
    GpuStrategy::candidates().into_iter().filter(|s| matches!(s, GpuStrategy::Winograd(_))).collect()
}

fn problems() -> impl Strategy<Value = Problem> {
    (
        (1usize..=2, 1usize..=3, 1usize..=13, 1usize..=40), // batch, groups, in per group, out per group
        (1usize..=19, 1usize..=19, 1usize..=7, 1usize..=7), // H, W, kH, kW
        ([0i64..=6, 0i64..=6], any::<bool>(), any::<u64>(), 0usize..wino_tiles().len()),
    )
        .prop_filter_map("output must be non-empty", |((n, g, cig, cog), (h, w, kh, kw), (p, bias, seed, tile))| {
            let params = ConvTranspose2dOptions::default().groups(g as i64).padding((p[0], p[1]));
            let pr = Problem { input: vec![n, g * cig, h, w], weight: vec![g * cig, cog, kh, kw], bias, params, seed };
            let cout = cog * g;
            params.resolve(&pr.input, &pr.weight, bias.then_some(&[cout][..])).ok().map(|_| (pr, tile))
        })
        .prop_filter_map("the tile must take the kernel", |(pr, tile)| {
            let t = wino_tiles()[tile];
            takes(&t, &pr).then_some(Problem { seed: pr.seed ^ (tile as u64) << 60, ..pr })
        })
}

/// Whether the tile computes the problem on the test adapter (its kernel size, and the workgroup that
/// transform size needs within the adapter's limits).
fn takes(tile: &GpuStrategy, p: &Problem) -> bool {
    tile.takes_shape(common::ctx(), &p.shape())
}

/// The tile the problem's seed picked among those that take its kernel.
fn tile_for(p: &Problem) -> GpuStrategy {
    let fits: Vec<_> = wino_tiles().into_iter().filter(|t| takes(t, p)).collect();
    fits[(p.seed >> 60) as usize % fits.len()]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(32), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_tile_matches_the_reference_on_random_stride_1_problems(p in problems()) {
        let strategy = tile_for(&p);
        check(common::ctx_with_strategy(strategy), strategy, &p)?;
    }

    #[test]
    fn every_tile_matches_the_reference_with_tiny_bindings(p in problems()) {
        // Tensors split over chunks, samples split across input-channel chunks: the slices accumulate.
        let shape = p.shape();
        let plane = (shape.in_hw[0] * shape.in_hw[1]).max(shape.out_hw[0] * shape.out_hw[1]);
        let weight: usize = p.weight.iter().product();
        let strategy = tile_for(&p);
        // The transformed weight (AH x AW / (kH*kW) times the weight) must stay in one binding.
        let transformed = strategy.prepared_weight_bytes(&shape).unwrap() as usize;
        let limit = (4 * weight.max(plane).max(shape.out_channels)).max(transformed);
        check(&common::ctx_with_binding_limit(limit as u64, Some(strategy)), strategy, &p)?;
    }
}

#[test]
fn every_tile_matches_the_reference_on_suite_like_shapes() {
    // The suite's stride-1 kernels (3x3, 3x5, 3x7, with and without padding) at 45-64 -> 72 channels: several K
    // steps (one partial), channel blocks (one short) and tile blocks, H != W, a partial last tile on both axes;
    // a 10x3 and a 3x6 kernel.
    let cases = [
        (vec![2, 64, 13, 22], vec![64, 72, 3, 5], ConvTranspose2dOptions::default()),
        (vec![1, 64, 17, 9], vec![64, 72, 3, 7], ConvTranspose2dOptions::default().padding((1, 3))),
        // 45 channels x 3 kernel rows: K = 135, a partial last K step for the tiles with the rows in K.
        (vec![2, 45, 11, 14], vec![45, 72, 3, 3], ConvTranspose2dOptions::default()),
        // 10 kernel rows: the most the tiles with the rows in K take (the 2-D tile's F(2, 10) would need 11 points).
        (vec![1, 16, 12, 9], vec![16, 40, 10, 3], ConvTranspose2dOptions::default().padding((2, 1))),
        // A 3x6 kernel: F(4, 6), 9 points, on every tile with MW = 4 that fits (the 48 x 64 one: 31.5 KiB, within
        // the software driver's 32).
        (vec![1, 64, 11, 13], vec![64, 72, 3, 6], ConvTranspose2dOptions::default()),
        // A 2x3 kernel: small enough transforms for every tile to fit the software driver's workgroup memory.
        (vec![2, 40, 9, 13], vec![40, 36, 2, 3], ConvTranspose2dOptions::default().padding((1, 0))),
    ];
    let problems: Vec<Problem> = cases
        .into_iter()
        .map(|(input, weight, params)| Problem { input, weight, bias: true, params, seed: common::fresh_seed() })
        .collect();
    let mut ran = std::collections::HashSet::new();
    let tiles = wino_tiles();
    for &strategy in &tiles {
        // Every case the tile takes in the full tier; one of them, drawn afresh, in the fast tier.
        let taken: Vec<&Problem> = problems.iter().filter(|p| takes(&strategy, p)).collect();
        for p in common::sample(&taken, 1) {
            check(common::ctx_with_strategy(strategy), strategy, p).unwrap_or_else(|e| panic!("{e}"));
            ran.insert(strategy);
        }
    }
    assert_eq!(ran.len(), tiles.len(), "every tile must run on this adapter on some case");
}

#[test]
fn strided_dilated_and_oversized_kernels_are_refused_with_the_reason() {
    let ctx = common::ctx();
    let x = convt::Tensor::uniform(vec![1, 4, 6, 6], -1.0, 1.0, common::fresh_seed()).unwrap();
    let cases = [
        (vec![4, 4, 3, 3], ConvTranspose2dOptions::default().stride(2), "stride 1 without dilation only"),
        (vec![4, 4, 3, 3], ConvTranspose2dOptions::default().dilation((1, 2)), "stride 1 without dilation only"),
        (vec![4, 4, 3, 8], ConvTranspose2dOptions::default(), "needs more than 10 points"),
    ];
    for (weight, params, message) in cases {
        let w = convt::Tensor::uniform(weight, -1.0, 1.0, common::fresh_seed()).unwrap();
        let shape = params.resolve(x.shape(), w.shape(), None).unwrap();
        let xg = convt::gpu::GpuTensor::upload(ctx, &x).unwrap();
        let wg = convt::gpu::GpuTensor::upload(ctx, &w).unwrap();
        let out = convt::gpu::GpuTensor::empty(ctx, &shape.output_dims_as_given()).unwrap();
        // An F(4, K_W) tile.
        let tile = wino_tiles().into_iter().find(|s| s.name().starts_with("wino_w4")).unwrap();
        let e = convt::gpu::conv_transpose2d_into(
            ctx,
            &xg,
            &wg,
            None,
            &params,
            &out,
            convt::gpu::Run { kernel: Some(tile), ..Default::default() },
        )
        .unwrap_err();
        assert!(matches!(&e, ConvtError::InvalidArgument(m) if m.contains(message)), "{e:?}");
        // Forced through the options, the tile gives way to the selector's choice on such shapes.
        let forced = common::ctx_with_strategy(tile);
        let (y, used) = common::forward_host_as(forced, convt::Precision::F32, &x, &w, None, &params).unwrap();
        assert!(!matches!(used, GpuStrategy::Winograd(_)), "{}", used.name());
        let reference = cpu::conv_transpose2d_f64(&shape, x.data(), w.data(), None).unwrap();
        assert!(ErrorStats::compare(y.data(), &reference).rel_l2 <= common::F32_TOLERANCE);
    }
}

#[test]
fn the_selector_takes_winograd_for_the_stride_1_cases_where_a_tile_fits() {
    // No tuning cache: the heuristic decides. kb57, kb65 and kb69 (stride 1, 64+ channels per group; 3x3, 3x7
    // and 3x5 kernels), kb71 and kb78 (32 channels, 3x3 and 3x7) take the Winograd kernel along W: the first
    // of the heuristic's tiles for their kernel width that fits the adapter (the tiles in bands need up to
    // 40 KiB of workgroup memory at these kernels and kb65's 48 x 64 tile 35 KiB, which the H100 has and the
    // software driver has not: there the tile after it), the GEMM where none fits; up2x (stride 2) takes the
    // GEMM.
    let mut opts = convt::GpuOptions::from_env().unwrap();
    opts.tune_cache = Some(std::env::temp_dir().join("convt-no-such-dir").join("tune.json"));
    opts.strategy = None;
    let ctx = GpuContext::with_options(opts).unwrap();
    let shape_of = |name: &str| {
        let case = convt::suite::find(name).unwrap();
        (case.params.resolve(&case.input_dims(), &case.weight_dims(), None).unwrap(), case.bias)
    };
    let cases: [(&str, &[&str]); 5] = [
        ("kb57", &["wino_w4b4_128x32x4c_8x8"]),
        ("kb65", &["wino_w4_48x64x8_8x8", "wino_w4_32x64x8_8x8"]),
        ("kb69", &["wino_w4b2_64x64x4c_8x8", "wino_w4_64x64x8_8x8"]),
        ("kb71", &["wino_w4b4_128x32x4c_8x8", "wino_w4_128x32x8_8x8"]),
        ("kb78", &["wino_w4b8_64x32x4c_8x8", "wino_w4_64x32x8_8x8"]),
    ];
    for (name, tiles) in cases {
        let (shape, bias) = shape_of(name);
        let chosen = convt::gpu::select::forward(&ctx, &shape, bias, convt::Precision::F32, convt::DType::F32);
        let picked = convt::gpu::select::winograd_tiles(&shape);
        assert_eq!(picked.iter().map(|t| t.name()).collect::<Vec<_>>(), tiles, "{name}");
        match picked.iter().map(|t| GpuStrategy::Winograd(*t)).find(|s| s.computes(&ctx, &shape)) {
            Some(first_that_fits) => assert_eq!(chosen, first_that_fits, "{name}: {}", chosen.name()),
            None => assert!(matches!(chosen, GpuStrategy::Gemm(_)), "{name}: {}", chosen.name()),
        }
    }
    let (shape, bias) = shape_of("up2x");
    let chosen = convt::gpu::select::forward(&ctx, &shape, bias, convt::Precision::F32, convt::DType::F32);
    assert!(matches!(chosen, GpuStrategy::Gemm(_)), "up2x: {}", chosen.name());
}
