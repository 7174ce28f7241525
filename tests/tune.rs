//! The autotuner's cache drives the selector: a cached winner for (adapter, driver, shape) is chosen; an
//! unreadable cache, or an entry naming a kernel this version lacks, is ignored (the heuristic decides), never an
//! error.

use convt::gpu::tune::{key, TuneCache, TuneEntry};
use convt::gpu::{select, GpuContext, GpuOptions, Strategy};
use convt::{ConvTranspose2dParams, Precision};

fn temp_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("convt-tune-{}-{name}", std::process::id()))
}

/// A context reading its tuning cache from `path`.
fn ctx_with_cache(path: &std::path::Path) -> GpuContext {
    GpuContext::with_options(GpuOptions { tune_cache: Some(path.to_path_buf()), ..GpuOptions::from_env().unwrap() })
        .unwrap()
}

#[test]
fn the_selector_follows_the_tuning_cache() {
    let params = ConvTranspose2dParams::default().stride(2).padding(1);
    let shape = params.resolve(&[2, 32, 9, 9], &[32, 64, 3, 3], None).unwrap();
    let path = temp_path("cache.json");

    let plain = ctx_with_cache(&path);
    let heuristic = select(&plain, &shape, false, Precision::F32);
    // Cache a winner that the heuristic would not pick.
    let winner = Strategy::candidates().into_iter().find(|s| *s != heuristic).unwrap();
    let mut cache = TuneCache::default();
    cache.entries.insert(
        key(plain.adapter_info(), &shape, false, Precision::F32),
        TuneEntry { strategy: winner.name(), ms: 1.0 },
    );
    // And a winner for precision `fast` (an f16 kernel where this adapter runs one, else an exact one).
    let fast_heuristic = select(&plain, &shape, false, Precision::Fast);
    let fast_winner =
        Strategy::candidates_for(&plain, Precision::Fast).into_iter().find(|s| *s != fast_heuristic).unwrap();
    cache.entries.insert(
        key(plain.adapter_info(), &shape, false, Precision::Fast),
        TuneEntry { strategy: fast_winner.name(), ms: 1.0 },
    );
    cache.save(&path).unwrap();
    assert_eq!(TuneCache::load(&path).unwrap().entries.len(), 2);

    let tuned = ctx_with_cache(&path);
    assert_eq!(select(&tuned, &shape, false, Precision::F32), winner);
    assert_eq!(select(&tuned, &shape, false, Precision::Fast), fast_winner);
    // Another shape (or the same with a bias) is not in the cache: the heuristic decides.
    assert_eq!(select(&tuned, &shape, true, Precision::F32), select(&plain, &shape, true, Precision::F32));

    std::fs::write(&path, "not json").unwrap();
    let broken = ctx_with_cache(&path);
    assert_eq!(select(&broken, &shape, false, Precision::F32), heuristic);
    std::fs::remove_file(&path).ok();
}

#[test]
fn fast_takes_the_tuned_exact_winner_where_it_keeps_to_exact_kernels() {
    // A strided decoder: `fast` takes no tensor cores there, so a shape tuned only for f32 runs the f32 winner
    // at precision `fast` too.
    let params = ConvTranspose2dParams::default().stride(2).padding(1);
    let shape = params.resolve(&[2, 32, 9, 9], &[32, 64, 3, 3], None).unwrap();
    let path = temp_path("exact-only.json");
    let plain = ctx_with_cache(&path);
    let heuristic = select(&plain, &shape, false, Precision::Fast);
    assert_eq!(heuristic.precision(), Precision::F32, "{}", heuristic.name());
    let winner = Strategy::candidates().into_iter().find(|s| *s != heuristic).unwrap();
    let mut cache = TuneCache::default();
    cache.entries.insert(
        key(plain.adapter_info(), &shape, false, Precision::F32),
        TuneEntry { strategy: winner.name(), ms: 1.0 },
    );
    cache.save(&path).unwrap();
    let tuned = ctx_with_cache(&path);
    assert_eq!(select(&tuned, &shape, false, Precision::Fast), winner);
    std::fs::remove_file(&path).ok();
}

#[test]
fn a_cached_kernel_this_version_lacks_gives_way_to_the_heuristic() {
    // A cache written by an older convt may name a tile since removed (wino_w2_64x64x8_8x8 went in n1-n4): the
    // entry is skipped, the heuristic decides, and the call still runs.
    let shape = ConvTranspose2dParams::default().resolve(&[1, 64, 9, 11], &[64, 64, 3, 7], None).unwrap();
    let path = temp_path("stale.json");
    let plain = ctx_with_cache(&path);
    let heuristic = select(&plain, &shape, false, Precision::F32);
    let mut cache = TuneCache::default();
    for precision in [Precision::F32, Precision::Fast] {
        cache.entries.insert(
            key(plain.adapter_info(), &shape, false, precision),
            TuneEntry { strategy: "wino_w2_64x64x8_8x8".into(), ms: 1.0 },
        );
    }
    cache.save(&path).unwrap();
    let tuned = ctx_with_cache(&path);
    assert_eq!(select(&tuned, &shape, false, Precision::F32), heuristic);
    assert_eq!(select(&tuned, &shape, false, Precision::Fast), select(&plain, &shape, false, Precision::Fast));
    std::fs::remove_file(&path).ok();
}
