//! The autotuner's persistent cache: the fastest strategy measured for a (adapter, driver, shape), written by
//! `convt tune` and read by [`crate::gpu::select`] (and, for the backward's grad_input, by
//! [`crate::gpu::grad_input::choose`]). A JSON file; its location is
//! `GpuOptions::tune_cache` (`CONVT_TUNE_CACHE`), by default `$XDG_CACHE_HOME/convt/tune.json` or
//! `~/.cache/convt/tune.json`. A missing or unreadable cache only means the heuristic decides.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{ConvtError, Result};
use crate::gpu::Strategy;
use crate::params::ConvShape;
use crate::precision::Precision;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TuneCache {
    /// key (see [`key`]) -> winner.
    pub entries: BTreeMap<String, TuneEntry>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TuneEntry {
    /// [`Strategy::name`] of the fastest candidate.
    pub strategy: String,
    /// Its median time, ms.
    pub ms: f64,
}

/// The default cache location.
pub fn default_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("convt").join("tune.json"))
}

/// The cache key: adapter, backend, driver, every size of the problem, and the precision (`fast` keys end in
/// ` | fast`; exact ones carry no suffix).
pub fn key(info: &wgpu::AdapterInfo, shape: &ConvShape, has_bias: bool, precision: Precision) -> String {
    let suffix = match precision {
        Precision::F32 => "",
        Precision::Fast => " | fast",
    };
    format!(
        "{} | {:?} | {} {} | N{} Cin{} Cout{} G{} in{:?} out{:?} k{:?} s{:?} p{:?} d{:?} bias{}",
        info.name,
        info.backend,
        info.driver,
        info.driver_info,
        shape.batch,
        shape.in_channels,
        shape.out_channels,
        shape.groups,
        shape.in_hw,
        shape.out_hw,
        shape.kernel,
        shape.stride,
        shape.padding,
        shape.dilation,
        has_bias
    ) + suffix
}

/// The cache key of grad_input's kernel in the backward of `shape` ([`crate::gpu::grad_input::choose`]; written by
/// `convt tune --backward`, whose entry holds [`crate::gpu::grad_input::GradInputKernel::cache_name`] and the
/// whole backward's time): the exact key of the forward shape, with ` | grad_input` appended.
pub fn grad_input_key(info: &wgpu::AdapterInfo, shape: &ConvShape) -> String {
    key(info, shape, false, Precision::F32) + " | grad_input"
}

impl TuneCache {
    /// Reads the cache; a missing file is an empty cache.
    pub fn load(path: &Path) -> Result<Self> {
        match std::fs::read_to_string(path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| ConvtError::TensorFile {
                path: path.into(),
                message: format!("not a convt tuning cache: {e}"),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(source) => Err(ConvtError::Io { path: path.into(), source }),
        }
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| ConvtError::Io { path: dir.into(), source })?;
        }
        let text = serde_json::to_string_pretty(self).map_err(|e| ConvtError::InvalidArgument(e.to_string()))?;
        std::fs::write(path, text).map_err(|source| ConvtError::Io { path: path.into(), source })
    }

    /// The cached strategy for a key, if it names one this build knows.
    pub fn lookup(&self, key: &str) -> Option<Strategy> {
        let name = &self.entries.get(key)?.strategy;
        Strategy::all().into_iter().find(|s| &s.name() == name)
    }
}
