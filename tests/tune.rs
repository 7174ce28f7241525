//! The autotuner's cache drives the selector: a cached winner for (adapter, driver, pass, precision, dtype,
//! bucketed shape) is chosen; an unreadable cache, or an entry naming a kernel this version lacks, is ignored (the heuristic
//! decides), never an error. The backward's grad_input and grad_weight take their kernels from the cache too
//! (`convt tune --backward`), and compute the right gradients with each.

mod common;

use convt::gpu::tune::{Pass, TuneCache, TuneEntry, TuneKey};
use convt::gpu::GradInputKernel;
use convt::gpu::GradWeightKernel;
use convt::gpu::{select, GpuContext, GpuGradients, GpuOptions, GpuTensor, Strategy};
use convt::{ConvTranspose2dOptions, DType, ErrorStats, Precision, Tensor};

/// An exact GEMM tile for tests that need one whatever the tile list holds.
fn gemm_tile() -> Strategy {
    Strategy::candidates().into_iter().find(|s| matches!(s, Strategy::Gemm(_))).unwrap()
}

fn temp_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("convt-tune-{}-{name}", std::process::id()))
}

/// A context reading its tuning cache from `path`: the environment's options, but no forced strategy
/// (`CONVT_STRATEGY` would decide before the cache), with outputs poisoned (NaN) before the kernels write them.
fn ctx_with_cache(path: &std::path::Path) -> GpuContext {
    let opts = GpuOptions {
        tune_cache: Some(path.to_path_buf()),
        poison_outputs: true,
        strategy: None,
        ..GpuOptions::from_env().unwrap()
    };
    GpuContext::with_options(opts).unwrap()
}

#[test]
fn the_selector_follows_the_tuning_cache() {
    let params = ConvTranspose2dOptions::default().stride(2).padding(1);
    let shape = params.resolve(&[2, 32, 9, 9], &[32, 64, 3, 3], None).unwrap();
    let path = temp_path("cache.json");

    let plain = ctx_with_cache(&path);
    let heuristic = select::forward(&plain, &shape, false, Precision::F32, DType::F32);
    // Cache a winner that the heuristic would not pick.
    let winner = Strategy::candidates().into_iter().find(|s| *s != heuristic).unwrap();
    let mut cache = TuneCache::default();
    cache.insert(
        &TuneKey::new(plain.adapter_info(), Pass::Forward, &shape, false, Precision::F32, DType::F32),
        TuneEntry::new(winner.name(), 1.0, Precision::F32, DType::F32),
    );
    // And a winner for precision `fast` (an f16 kernel where this adapter runs one, else an exact one).
    let fast_heuristic = select::forward(&plain, &shape, false, Precision::Fast, DType::F32);
    let fast_winner =
        Strategy::candidates_for(&plain, Precision::Fast).into_iter().find(|s| *s != fast_heuristic).unwrap();
    cache.insert(
        &TuneKey::new(plain.adapter_info(), Pass::Forward, &shape, false, Precision::Fast, DType::F32),
        TuneEntry::new(fast_winner.name(), 1.0, Precision::Fast, DType::F32),
    );
    cache.save(&path).unwrap();
    assert_eq!(TuneCache::load(&path).unwrap().entries.len(), 2);

    let tuned = ctx_with_cache(&path);
    assert_eq!(select::forward(&tuned, &shape, false, Precision::F32, DType::F32), winner);
    assert_eq!(select::forward(&tuned, &shape, false, Precision::Fast, DType::F32), fast_winner);
    // Another shape (or the same with a bias) is not in the cache: the heuristic decides.
    assert_eq!(
        select::forward(&tuned, &shape, true, Precision::F32, DType::F32),
        select::forward(&plain, &shape, true, Precision::F32, DType::F32)
    );

    std::fs::write(&path, "not json").unwrap();
    let broken = ctx_with_cache(&path);
    assert_eq!(select::forward(&broken, &shape, false, Precision::F32, DType::F32), heuristic);
    std::fs::remove_file(&path).ok();
}

#[test]
fn each_dtype_reads_its_own_tuning_entries() {
    // A half call runs the kernel tuned on half tensors of its dtype: the cache holds an f16 winner the heuristic
    // would not pick, the f16 call (the selector and the functional call itself) takes it, and neither the f32
    // call nor the bf16 call of the same shape does. An entry recording another dtype than its key's is ignored.
    let params = ConvTranspose2dOptions::default().stride(2).padding(1);
    let shape = params.resolve(&[2, 32, 9, 9], &[32, 64, 3, 3], None).unwrap();
    let path = temp_path("dtype.json");
    let plain = ctx_with_cache(&path);
    let heuristic = |dtype| select::forward(&plain, &shape, false, Precision::F32, dtype);
    let winner = Strategy::candidates().into_iter().find(|s| *s != heuristic(DType::F16)).unwrap();
    let key = |dtype| TuneKey::new(plain.adapter_info(), Pass::Forward, &shape, false, Precision::F32, dtype);
    assert_ne!(key(DType::F16).to_string(), key(DType::F32).to_string());
    let mut cache = TuneCache::default();
    cache.insert(&key(DType::F16), TuneEntry::new(winner.name(), 1.0, Precision::F32, DType::F16));
    // Filed under bf16's key but measured on f16 tensors: not bf16's winner.
    cache.insert(&key(DType::BF16), TuneEntry::new(winner.name(), 1.0, Precision::F32, DType::F16));
    cache.save(&path).unwrap();

    let tuned = ctx_with_cache(&path);
    assert_eq!(select::forward(&tuned, &shape, false, Precision::F32, DType::F16), winner);
    for dtype in [DType::F32, DType::BF16] {
        assert_eq!(select::forward(&tuned, &shape, false, Precision::F32, dtype), heuristic(dtype), "{dtype}");
    }
    for dtype in DType::ALL {
        let upload = |dims: Vec<usize>, seed| {
            GpuTensor::upload(&tuned, &Tensor::uniform(dims, -1.0, 1.0, seed).unwrap().to_dtype(dtype)).unwrap()
        };
        let (x, w) = (upload(shape.input_dims(), 1), upload(shape.weight_dims(), 2));
        let out = GpuTensor::empty_with(&tuned, &shape.output_dims(), dtype).unwrap();
        let ran = convt::gpu::conv_transpose2d_into(&tuned, &x, &w, None, &params, &out, Default::default()).unwrap();
        let expected = if dtype == DType::F16 { winner } else { heuristic(dtype) };
        assert_eq!(ran, expected, "{dtype}");
    }
    std::fs::remove_file(&path).ok();
}

#[test]
fn fast_takes_the_tuned_exact_winner_where_it_keeps_to_exact_kernels() {
    // A strided decoder: `fast` takes no tensor cores there, so a shape tuned only for f32 runs the f32 winner
    // at precision `fast` too.
    let params = ConvTranspose2dOptions::default().stride(2).padding(1);
    let shape = params.resolve(&[2, 32, 9, 9], &[32, 64, 3, 3], None).unwrap();
    let path = temp_path("exact-only.json");
    let plain = ctx_with_cache(&path);
    let heuristic = select::forward(&plain, &shape, false, Precision::Fast, DType::F32);
    assert_eq!(heuristic.precision(), Precision::F32, "{}", heuristic.name());
    let winner = Strategy::candidates().into_iter().find(|s| *s != heuristic).unwrap();
    let mut cache = TuneCache::default();
    cache.insert(
        &TuneKey::new(plain.adapter_info(), Pass::Forward, &shape, false, Precision::F32, DType::F32),
        TuneEntry::new(winner.name(), 1.0, Precision::F32, DType::F32),
    );
    cache.save(&path).unwrap();
    let tuned = ctx_with_cache(&path);
    assert_eq!(select::forward(&tuned, &shape, false, Precision::Fast, DType::F32), winner);
    std::fs::remove_file(&path).ok();
}

#[test]
fn a_cached_kernel_this_version_lacks_gives_way_to_the_heuristic() {
    // A cache written by an older convt may name a tile since removed (wino_w2_64x64x8_8x8 went in n1-n4): the
    // entry is skipped, the heuristic decides, and the call still runs.
    let shape = ConvTranspose2dOptions::default().resolve(&[1, 64, 9, 11], &[64, 64, 3, 7], None).unwrap();
    let path = temp_path("stale.json");
    let plain = ctx_with_cache(&path);
    let heuristic = select::forward(&plain, &shape, false, Precision::F32, DType::F32);
    let mut cache = TuneCache::default();
    for precision in [Precision::F32, Precision::Fast] {
        cache.insert(
            &TuneKey::new(plain.adapter_info(), Pass::Forward, &shape, false, precision, DType::F32),
            TuneEntry::new("wino_w2_64x64x8_8x8".into(), 1.0, precision, DType::F32),
        );
    }
    cache.save(&path).unwrap();
    let tuned = ctx_with_cache(&path);
    assert_eq!(select::forward(&tuned, &shape, false, Precision::F32, DType::F32), heuristic);
    assert_eq!(
        select::forward(&tuned, &shape, false, Precision::Fast, DType::F32),
        select::forward(&plain, &shape, false, Precision::Fast, DType::F32)
    );
    std::fs::remove_file(&path).ok();
}

/// The backward of `shape` on `ctx` (fresh random operands) against the float64 reference: grad_input and
/// grad_weight within the f32 tolerance, every element written (the context poisons outputs).
fn backward_matches_reference(ctx: &GpuContext, shape: &convt::ConvShape, params: &ConvTranspose2dOptions, what: &str) {
    let seed = common::fresh_seed();
    let x = Tensor::uniform(shape.input_dims(), -1.0, 1.0, seed).unwrap();
    let w = Tensor::uniform(shape.weight_dims(), -1.0, 1.0, seed ^ 1).unwrap();
    let go = Tensor::uniform(shape.output_dims(), -1.0, 1.0, seed ^ 2).unwrap();
    let g = common::backward_host(ctx, &x, &w, None, &go, params).unwrap();
    for (name, got, want) in [
        ("grad_input", &g.grad_input, convt::cpu::grad_input_f64(shape, go.data(), w.data()).unwrap()),
        ("grad_weight", &g.grad_weight, convt::cpu::grad_weight_f64(shape, x.data(), go.data()).unwrap()),
    ] {
        let s = ErrorStats::compare(got.data(), &want);
        assert!(s.non_finite == 0 && s.rel_l2 <= common::F32_TOLERANCE, "{what}, {name}: {s:?} (seed {seed})");
    }
}

#[test]
fn the_backward_takes_grad_inputs_kernel_from_the_tuning_cache() {
    // `convt tune --backward` keeps grad_input's kernel under the case's grad_input key: at stride 2 a GEMM tile on
    // the sampled correlation or the gather kernel, at stride 1 a GEMM or Winograd kernel on the transposed
    // convolution or the gather kernel. Each cached winner runs and gives the right gradients; the forward's
    // selector, for the shape and for its transposed convolution, is untouched.
    let strided = ConvTranspose2dOptions::default().stride(2).padding(1);
    let plain = ConvTranspose2dOptions::default();
    for (params, input, weight) in [(strided, [2, 32, 9, 7], [32, 64, 3, 3]), (plain, [1, 16, 9, 11], [16, 8, 3, 3])] {
        let shape = params.resolve(&input, &weight, None).unwrap();
        let dir = common::TempDir::new("tune-grad-input");
        let path = dir.path("cache.json");
        let untuned = ctx_with_cache(&path);
        let heuristic = select::grad_input(&untuned, &shape, Precision::F32, DType::F32);
        let candidates = GradInputKernel::candidates(&untuned, &shape, Precision::F32);
        assert!(candidates.contains(&heuristic) && candidates.contains(&GradInputKernel::Gather), "{candidates:?}");
        let other = *candidates.iter().find(|k| **k != heuristic && **k != GradInputKernel::Gather).unwrap();
        match GradInputKernel::transposed_problem(&shape) {
            Some(_) => assert!(matches!(other, GradInputKernel::Transposed(_)), "{other:?}"),
            None => assert!(matches!(other, GradInputKernel::Sampled(_)), "{other:?}"),
        }
        for winner in [other, GradInputKernel::Gather] {
            let mut cache = TuneCache::default();
            let entry = TuneEntry::new(winner.cache_name(), 1.0, Precision::F32, DType::F32);
            cache.insert(
                &TuneKey::new(untuned.adapter_info(), Pass::GradInput, &shape, false, Precision::F32, DType::F32),
                entry,
            );
            cache.save(&path).unwrap();
            let tuned = ctx_with_cache(&path);
            assert_eq!(select::grad_input(&tuned, &shape, Precision::F32, DType::F32), winner);
            backward_matches_reference(&tuned, &shape, &params, &winner.name());
            assert_eq!(
                select::forward(&tuned, &shape, false, Precision::F32, DType::F32),
                select::forward(&untuned, &shape, false, Precision::F32, DType::F32)
            );
            if let Some(t) = GradInputKernel::transposed_problem(&shape) {
                assert_eq!(
                    select::forward(&tuned, &t, false, Precision::F32, DType::F32),
                    select::forward(&untuned, &t, false, Precision::F32, DType::F32)
                );
            }
        }
        // A kernel passed explicitly runs and is reported; one that does not compute the shape (a GEMM tile on a
        // transposed convolution the strided shape lacks, a Winograd tile on the sampled correlation) is an error.
        let ctx = ctx_with_cache(&path);
        let ran = run_backward_with(&ctx, &shape, &params, Some(other)).unwrap();
        assert_eq!(ran, other);
        // Only GEMM and cooperative-matrix tiles compute the sampled correlation (f16 GEMM tiles too, at any stride:
        // tests/backward_fast.rs); an exact GEMM tile on a transposed convolution the shape lacks.
        let winograd = Strategy::candidates().into_iter().find(|s| matches!(s, Strategy::Winograd(_))).unwrap();
        let misplaced = match GradInputKernel::transposed_problem(&shape) {
            Some(_) => GradInputKernel::Sampled(winograd),
            None => GradInputKernel::Transposed(gemm_tile()),
        };
        assert!(!misplaced.computes(&ctx, &shape), "{misplaced:?}");
        let e = run_backward_with(&ctx, &shape, &params, Some(misplaced)).unwrap_err();
        assert!(e.to_string().contains("grad_input kernel"), "{e}");
    }
}

#[test]
fn a_grad_input_cache_entry_that_does_not_apply_gives_way() {
    // An entry naming a kernel this version lacks, or one that cannot compute the shape (a Winograd tile at stride
    // 2, a fast tile), is ignored: grad_input's usual choice runs.
    let params = ConvTranspose2dOptions::default().stride(2).padding(1);
    let shape = params.resolve(&[1, 16, 5, 6], &[16, 32, 3, 3], None).unwrap();
    let dir = common::TempDir::new("tune-grad-input-stale");
    let path = dir.path("cache.json");
    let untuned = ctx_with_cache(&path);
    let usual = select::grad_input(&untuned, &shape, Precision::F32, DType::F32);
    let fast = Strategy::fast_candidates()[0].name();
    let winograd = Strategy::candidates().into_iter().find(|s| matches!(s, Strategy::Winograd(_))).unwrap().name();
    for name in ["gemm_1x1x1_1x1", fast.as_str(), winograd.as_str()] {
        let mut cache = TuneCache::default();
        cache.insert(
            &TuneKey::new(untuned.adapter_info(), Pass::GradInput, &shape, false, Precision::F32, DType::F32),
            TuneEntry::new(name.into(), 1.0, Precision::F32, DType::F32),
        );
        cache.save(&path).unwrap();
        assert_eq!(select::grad_input(&ctx_with_cache(&path), &shape, Precision::F32, DType::F32), usual, "{name}");
    }
}

/// The backward of `shape` with grad_input's kernel given, on random operands: what it reports having run.
fn run_backward_with(
    ctx: &GpuContext,
    shape: &convt::ConvShape,
    params: &ConvTranspose2dOptions,
    kernel: Option<GradInputKernel>,
) -> convt::Result<GradInputKernel> {
    let x = GpuTensor::upload(ctx, &Tensor::uniform(shape.input_dims(), -1.0, 1.0, 1)?)?;
    let w = GpuTensor::upload(ctx, &Tensor::uniform(shape.weight_dims(), -1.0, 1.0, 2)?)?;
    let go = GpuTensor::upload(ctx, &Tensor::uniform(shape.output_dims(), -1.0, 1.0, 3)?)?;
    let grads = GpuGradients::empty(ctx, &x, &w, None, params)?;
    let run = convt::gpu::BackwardRun { grad_input: kernel, ..Default::default() };
    convt::gpu::conv_transpose2d_backward_into(ctx, &x, &w, None, &go, params, &grads, run).map(|(k, _)| k)
}

#[test]
fn the_published_tuning_cache_covers_every_suite_case() {
    // docs/results/h100-tune.json backs the published H100 tables: every suite case has an exact forward entry under
    // the key this build computes, every entry is one of the suite's keys (forward at either precision, a gradient's,
    // or the forward of a stride-1 case's grad_input as a transposed convolution), and each names a kernel of this build that computes at the entry's precision.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/results/h100-tune.json");
    let cache = TuneCache::load(&path).unwrap();
    let adapter = "NVIDIA H100 80GB HBM3 | Vulkan | NVIDIA 580.159.04".to_string();
    let mut keys = std::collections::BTreeSet::new();
    for case in convt::suite::CASES {
        let shape = case.params.resolve(&case.input_dims(), &case.weight_dims(), None).unwrap();
        let key =
            |pass, precision| TuneKey::with_adapter(adapter.clone(), pass, &shape, case.bias, precision, DType::F32);
        let exact = key(Pass::Forward, Precision::F32);
        let name = cache.lookup(&exact).unwrap_or_else(|| panic!("{}: no entry `{exact}`", case.name));
        assert_eq!(Strategy::from_name(name).map(|s| s.precision()), Some(Precision::F32), "{}: {name}", case.name);
        if let Some(name) = cache.lookup(&key(Pass::Forward, Precision::Fast)) {
            assert!(Strategy::from_name(name).is_some(), "{}: `{name}`", case.name);
        }
        if let Some(name) = cache.lookup(&key(Pass::GradInput, Precision::F32)) {
            assert!(GradInputKernel::from_cache_name(name, &shape).is_some(), "{}: `{name}`", case.name);
        }
        if let Some(name) = cache.lookup(&key(Pass::GradWeight, Precision::F32)) {
            assert!(GradWeightKernel::from_name(name).is_some(), "{}: `{name}`", case.name);
        }
        for pass in [Pass::Forward, Pass::GradInput, Pass::GradWeight] {
            for precision in [Precision::F32, Precision::Fast] {
                keys.insert(key(pass, precision).to_string());
            }
        }
        // grad_input at stride 1 asks the forward's selector about its transposed convolution.
        if let Some(t) = GradInputKernel::transposed_problem(&shape) {
            keys.insert(
                TuneKey::with_adapter(adapter.clone(), Pass::Forward, &t, false, Precision::F32, DType::F32)
                    .to_string(),
            );
        }
    }
    for entry in cache.entries.keys() {
        assert!(keys.contains(entry), "`{entry}` is no suite case's key");
    }
}

#[test]
fn nearby_shapes_share_a_tuned_result() {
    // The key rounds the batch and the input's height and width up to a power of two: a batch of 7 and a 13 x 14
    // input use what was tuned for a batch of 8 and 16 x 16; a batch of 9 or another channel count does not.
    let params = ConvTranspose2dOptions::default().stride(2).padding(1);
    let tuned_for = params.resolve(&[8, 32, 16, 16], &[32, 64, 3, 3], None).unwrap();
    let path = temp_path("buckets.json");
    let plain = ctx_with_cache(&path);
    let heuristic = select::forward(&plain, &tuned_for, false, Precision::F32, DType::F32);
    let winner = Strategy::candidates().into_iter().find(|s| *s != heuristic).unwrap();
    let mut cache = TuneCache::default();
    let key = TuneKey::new(plain.adapter_info(), Pass::Forward, &tuned_for, false, Precision::F32, DType::F32);
    cache.insert(&key, TuneEntry::new(winner.name(), 1.0, Precision::F32, DType::F32));
    cache.save(&path).unwrap();
    let tuned = ctx_with_cache(&path);
    let near = params.resolve(&[7, 32, 13, 14], &[32, 64, 3, 3], None).unwrap();
    assert_eq!(TuneKey::new(plain.adapter_info(), Pass::Forward, &near, false, Precision::F32, DType::F32), key);
    assert_eq!(select::forward(&tuned, &near, false, Precision::F32, DType::F32), winner);
    for far in [
        params.resolve(&[9, 32, 16, 16], &[32, 64, 3, 3], None).unwrap(),
        params.resolve(&[8, 32, 17, 16], &[32, 64, 3, 3], None).unwrap(),
        params.resolve(&[8, 32, 16, 16], &[32, 48, 3, 3], None).unwrap(),
    ] {
        assert_eq!(
            select::forward(&tuned, &far, false, Precision::F32, DType::F32),
            select::forward(&plain, &far, false, Precision::F32, DType::F32),
            "{far:?}"
        );
    }
    std::fs::remove_file(&path).ok();
}

#[test]
fn the_backward_takes_grad_weights_kernel_from_the_tuning_cache() {
    // `convt tune --backward` keeps grad_weight's kernel under the case's grad_weight key: a per-tap GEMM tile, or
    // the rows kernel where it takes the shape. Each cached winner runs and gives the right gradients; one that
    // does not compute the shape (the rows kernel at stride 1) gives way to the usual choice.
    let strided = ConvTranspose2dOptions::default().stride(2).padding(1);
    let shape = strided.resolve(&[2, 8, 9, 7], &[8, 16, 3, 3], None).unwrap();
    let dir = common::TempDir::new("tune-grad-weight");
    let path = dir.path("cache.json");
    let untuned = ctx_with_cache(&path);
    let usual = select::grad_weight(&untuned, &shape, [1, 1], Precision::F32, DType::F32);
    assert_eq!(usual, GradWeightKernel::Rows, "the rows kernel takes strided small groups");
    let candidates = GradWeightKernel::candidates(&untuned, &shape, [1, 1], Precision::F32);
    assert_eq!(candidates.len(), 4, "{candidates:?}");
    let key = TuneKey::new(untuned.adapter_info(), Pass::GradWeight, &shape, false, Precision::F32, DType::F32);
    for winner in candidates {
        let mut cache = TuneCache::default();
        cache.insert(&key, TuneEntry::new(winner.name(), 1.0, Precision::F32, DType::F32));
        cache.save(&path).unwrap();
        let tuned = ctx_with_cache(&path);
        assert_eq!(select::grad_weight(&tuned, &shape, [1, 1], Precision::F32, DType::F32), winner);
        backward_matches_reference(&tuned, &shape, &strided, &winner.name());
    }
    let plain = ConvTranspose2dOptions::default();
    let stride_1 = plain.resolve(&[2, 8, 9, 7], &[8, 16, 3, 3], None).unwrap();
    let mut cache = TuneCache::default();
    let key = TuneKey::new(untuned.adapter_info(), Pass::GradWeight, &stride_1, false, Precision::F32, DType::F32);
    cache.insert(&key, TuneEntry::new(GradWeightKernel::Rows.name(), 1.0, Precision::F32, DType::F32));
    cache.save(&path).unwrap();
    let tuned = ctx_with_cache(&path);
    assert_eq!(
        select::grad_weight(&tuned, &stride_1, [1, 1], Precision::F32, DType::F32),
        select::grad_weight(&untuned, &stride_1, [1, 1], Precision::F32, DType::F32)
    );
    assert!(matches!(
        select::grad_weight(&tuned, &stride_1, [1, 1], Precision::F32, DType::F32),
        GradWeightKernel::Taps(_)
    ));
}

#[test]
fn an_entry_is_used_only_for_the_precision_and_dtype_it_was_tuned_for() {
    // An exact call must never run an f16 kernel, whatever the cache says under its key: an entry recording
    // another precision, an entry that records none (an older cache), one for another dtype, and one that claims
    // f32 but names an f16 kernel are all ignored, and the call stays exact.
    let shape = ConvTranspose2dOptions::default().resolve(&[1, 16, 7, 6], &[16, 16, 3, 3], None).unwrap();
    let path = temp_path("precision.json");
    let plain = ctx_with_cache(&path);
    let heuristic = select::forward(&plain, &shape, false, Precision::F32, DType::F32);
    let f16 = Strategy::fast_candidates()[0];
    let exact = Strategy::candidates().into_iter().find(|s| *s != heuristic).unwrap();
    let k = TuneKey::new(plain.adapter_info(), Pass::Forward, &shape, false, Precision::F32, DType::F32);
    let entries = [
        TuneEntry::new(exact.name(), 1.0, Precision::Fast, DType::F32),
        TuneEntry { precision: None, dtype: None, ..TuneEntry::new(exact.name(), 1.0, Precision::F32, DType::F32) },
        TuneEntry { dtype: Some("bf16".into()), ..TuneEntry::new(exact.name(), 1.0, Precision::F32, DType::F32) },
        // A precision this build does not know: the entry is ignored, and the cache still reads.
        TuneEntry { precision: Some("tf32".into()), ..TuneEntry::new(exact.name(), 1.0, Precision::F32, DType::F32) },
        TuneEntry::new(f16.name(), 1.0, Precision::F32, DType::F32),
    ];
    for (i, entry) in entries.into_iter().enumerate() {
        let mut cache = TuneCache::default();
        cache.insert(&k, entry.clone());
        cache.save(&path).unwrap();
        let tuned = ctx_with_cache(&path);
        assert_eq!(
            select::forward(&tuned, &shape, false, Precision::F32, DType::F32),
            heuristic,
            "entry {i}: {entry:?}"
        );
        let seed = common::fresh_seed();
        let x = Tensor::uniform(shape.input_dims(), -1.0, 1.0, seed).unwrap();
        let w = Tensor::uniform(shape.weight_dims(), -1.0, 1.0, seed ^ 1).unwrap();
        let params = ConvTranspose2dOptions::default();
        let (y, ran) = common::forward_host_as(&tuned, Precision::F32, &x, &w, None, &params).unwrap();
        assert_eq!(ran.precision(), Precision::F32, "entry {i} ran {}", ran.name());
        let reference = convt::cpu::conv_transpose2d_f64(&shape, x.data(), w.data(), None).unwrap();
        let e = ErrorStats::compare(y.data(), &reference);
        assert!(e.rel_l2 <= common::F32_TOLERANCE, "entry {i} (seed {seed}): rel L2 {:e}", e.rel_l2);
    }
    // The same entry, recorded for f32, is used.
    let mut cache = TuneCache::default();
    cache.insert(&k, TuneEntry::new(exact.name(), 1.0, Precision::F32, DType::F32));
    cache.save(&path).unwrap();
    assert_eq!(select::forward(&ctx_with_cache(&path), &shape, false, Precision::F32, DType::F32), exact);
    std::fs::remove_file(&path).ok();
}

#[cfg(unix)]
#[test]
fn a_cache_path_that_is_not_a_regular_file_is_refused_without_reading_it() {
    // A device or a pipe given as the cache would be read without end: refused by its kind (the context then
    // ignores the cache, with a warning), as is a directory.
    for path in ["/dev/zero", "/"] {
        match TuneCache::load(std::path::Path::new(path)) {
            Err(e @ convt::ConvtError::TuneCache { .. }) => {
                assert_eq!(
                    e.to_string(),
                    format!("{path}: not a convt tuning cache: a tuning cache must be a regular file")
                )
            }
            other => panic!("{path}: expected a refusal, got {other:?}"),
        }
    }
}

/// The library tunes a shape of the caller's (`gpu::tune::tune_forward`): every kernel that ran is timed, the
/// fastest is recorded under the shape's key, and a context reading the saved cache picks it for the shapes of
/// the bucket. An adapter without GPU timestamps cannot be tuned, and says so.
#[test]
fn the_library_tunes_a_shape() {
    let ctx = common::ctx();
    let options = ConvTranspose2dOptions::default().stride(2).padding(1);
    let shape = options.resolve(&[2, 8, 7, 6], &[8, 4, 3, 3], None).unwrap();
    let mut cache = TuneCache::default();
    let timed = convt::gpu::tune::tune_forward(ctx, &shape, false, Precision::F32, DType::F32, 3, &mut cache);
    if !ctx.device().features().contains(wgpu::Features::TIMESTAMP_QUERY) {
        let e = timed.unwrap_err();
        assert!(e.to_string().contains("TIMESTAMP_QUERY"), "{e}");
        return;
    }
    let timed = timed.unwrap();
    assert!(!timed.is_empty());
    assert!(timed.windows(2).all(|w| w[0].1 <= w[1].1) && timed.iter().all(|t| t.1 > 0.0), "{timed:?}");
    let winner = timed[0].0;
    let path = temp_path("library-tune.json");
    cache.save(&path).unwrap();
    let tuned = ctx_with_cache(&path);
    // A 5 x 8 input falls in the tuned 7 x 6 one's bucket (8 x 8; batch 2 both).
    let near = options.resolve(&[2, 8, 5, 8], &[8, 4, 3, 3], None).unwrap();
    assert_eq!(select::forward(&tuned, &near, false, Precision::F32, DType::F32), winner);
    let _ = std::fs::remove_file(&path);
}
