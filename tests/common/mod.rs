//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod cli;
pub mod problems;

use std::sync::OnceLock;

use convt::gpu::{GpuContext, GpuOptions};

/// Whether the full tier of the suite runs (`CONVT_TEST_TIER=full`: what `scripts/test.sh` and CI run). The
/// default, the fast tier of plain `cargo test`, runs every test with fewer of its cases: fewer random problems
/// per property, and a sample (drawn afresh each run) of the kernels or files a test loops over. Both tiers assert
/// the same things with the same tolerances.
pub fn full_tier() -> bool {
    tier_is("full")
}

/// Whether `CONVT_TEST_TIER` names `tier`.
fn tier_is(tier: &str) -> bool {
    std::env::var("CONVT_TEST_TIER").is_ok_and(|v| v.trim() == tier)
}

/// Random problems per property test: `full` in the full tier, a quarter of them (at least 4) in the fast tier,
/// an eighth (at least 4) in the second backend's tier (`CONVT_TEST_TIER=second`, the pass `scripts/test.sh` runs
/// again on wgpu's GL backend, where what is new is the kernels' translation to GLSL and their checked runs; the
/// samples the tests loop over are the fast tier's).
pub fn cases(full: u32) -> u32 {
    if full_tier() {
        full
    } else if tier_is("second") {
        (full / 8).max(4)
    } else {
        (full / 4).max(4)
    }
}

/// Every item in the full tier; in the fast tier `keep` of them, drawn afresh each run (the draw is printed, so
/// a failing run names what it checked).
pub fn sample<T: Clone + std::fmt::Debug>(items: &[T], keep: usize) -> Vec<T> {
    if full_tier() || items.len() <= keep {
        return items.to_vec();
    }
    let seed = fresh_seed();
    let mut index: Vec<usize> = (0..items.len()).collect();
    // A seeded Fisher-Yates shuffle (splitmix64 steps): no dependency, reproducible from the printed seed.
    let mut state = seed;
    for i in (1..index.len()).rev() {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        index.swap(i, ((z ^ (z >> 31)) % (i as u64 + 1)) as usize);
    }
    index.truncate(keep);
    index.sort_unstable();
    let chosen: Vec<T> = index.iter().map(|&i| items[i].clone()).collect();
    println!("fast tier (seed {seed}): {keep} of {} items: {chosen:?}", items.len());
    chosen
}

/// Relative L2 error every f32 path must reach against the f64 reference.
pub const F32_TOLERANCE: f64 = 1e-5;

/// One GPU context for the whole test binary, with outputs poisoned (NaN) before every kernel writes them.
/// Honours CONVT_BACKEND / CONVT_ADAPTER / CONVT_SHADER_CHECKS, so CI can run the suite on any backend.
pub fn ctx() -> &'static GpuContext {
    static CTX: OnceLock<GpuContext> = OnceLock::new();
    CTX.get_or_init(|| {
        let mut opts = GpuOptions::from_env().expect("valid CONVT_* environment");
        opts.poison_outputs = true;
        GpuContext::with_options(opts).unwrap_or_else(|e| panic!("the GPU tests need an adapter: {e}"))
    })
}

/// A context (one per strategy, kept for the whole test binary) that runs every convolution with `strategy`.
pub fn ctx_with_strategy(strategy: convt::gpu::Strategy) -> &'static GpuContext {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static CTXS: OnceLock<Mutex<HashMap<String, &'static GpuContext>>> = OnceLock::new();
    let mut map = CTXS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    map.entry(strategy.name()).or_insert_with(|| {
        let mut opts = GpuOptions::from_env().expect("valid CONVT_* environment");
        opts.poison_outputs = true;
        opts.strategy = Some(strategy);
        let ctx = GpuContext::with_options(opts).unwrap_or_else(|e| panic!("the GPU tests need an adapter: {e}"));
        Box::leak(Box::new(ctx))
    })
}

/// A context whose storage bindings are capped at `bytes`, to force large-tensor splitting on small problems.
pub fn ctx_with_binding_limit(bytes: u64, strategy: Option<convt::gpu::Strategy>) -> GpuContext {
    let mut opts = GpuOptions::from_env().expect("valid CONVT_* environment");
    opts.strategy = strategy;
    opts.poison_outputs = true;
    opts.max_binding_bytes = Some(bytes);
    GpuContext::with_options(opts).unwrap_or_else(|e| panic!("the GPU tests need an adapter: {e}"))
}

/// A context whose tensors may hold at most `budget` bytes.
pub fn ctx_with_budget(budget: u64) -> GpuContext {
    let mut opts = GpuOptions::from_env().unwrap();
    opts.poison_outputs = true;
    opts.memory_budget = Some(budget);
    GpuContext::with_options(opts).unwrap()
}

/// A fresh seed per call, so every run draws new inputs; printed by the tests on failure for reproduction.
pub fn fresh_seed() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let t = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    t ^ COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// A fresh, uniquely named directory under the system temp dir, removed when dropped.
pub struct TempDir(std::path::PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "convt-test-{tag}-{}-{nanos}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
    pub fn path(&self, name: &str) -> std::path::PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The forward on host tensors at the options' precision: upload, run, read back.
pub fn forward_host(
    ctx: &GpuContext,
    input: &convt::Tensor,
    weight: &convt::Tensor,
    bias: Option<&convt::Tensor>,
    options: &convt::ConvTranspose2dOptions,
) -> convt::Result<convt::Tensor> {
    forward_host_as(ctx, options.precision, input, weight, bias, options).map(|(y, _)| y)
}

/// [`forward_host`] at `precision`; also the kernel that ran.
pub fn forward_host_as(
    ctx: &GpuContext,
    precision: convt::Precision,
    input: &convt::Tensor,
    weight: &convt::Tensor,
    bias: Option<&convt::Tensor>,
    options: &convt::ConvTranspose2dOptions,
) -> convt::Result<(convt::Tensor, convt::gpu::Strategy)> {
    let options = options.precision(precision);
    let shape = options.resolve(input.shape(), weight.shape(), bias.map(|b| b.shape()))?;
    let (x, w) = (convt::GpuTensor::upload(ctx, input)?, convt::GpuTensor::upload(ctx, weight)?);
    let b = bias.map(|b| convt::GpuTensor::upload(ctx, b)).transpose()?;
    let y = convt::GpuTensor::empty_with(ctx, &shape.output_dims_as_given(), input.dtype())?;
    let ran = convt::gpu::conv_transpose2d_into(ctx, &x, &w, b.as_ref(), &options, &y, Default::default())?;
    Ok((y.download(ctx)?, ran))
}

/// The backward on host tensors: validate, upload, run, read back.
pub fn backward_host(
    ctx: &GpuContext,
    input: &convt::Tensor,
    weight: &convt::Tensor,
    bias: Option<&convt::Tensor>,
    grad_output: &convt::Tensor,
    options: &convt::ConvTranspose2dOptions,
) -> convt::Result<convt::Gradients> {
    options.resolve(input.shape(), weight.shape(), bias.map(|b| b.shape()))?.check_grad_output(grad_output.shape())?;
    let (x, w) = (convt::GpuTensor::upload(ctx, input)?, convt::GpuTensor::upload(ctx, weight)?);
    let b = bias.map(|b| convt::GpuTensor::upload(ctx, b)).transpose()?;
    let go = convt::GpuTensor::upload(ctx, grad_output)?;
    convt::gpu::conv_transpose2d_backward(ctx, &x, &w, b.as_ref(), &go, options)?.download(ctx)
}
