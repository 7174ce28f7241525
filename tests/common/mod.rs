//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod cli;
pub mod problems;

use std::sync::OnceLock;

use convt::gpu::{GpuContext, GpuOptions};

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
