//! The autotuner's persistent cache: the fastest strategy measured for a (adapter, driver, shape), written by
//! `convt tune` and read by [`crate::gpu::select`] (and, for the backward's grad_input, by
//! [`crate::gpu::backward::grad_input::choose`]). A JSON file; its location is
//! `GpuOptions::tune_cache` (`CONVT_TUNE_CACHE`), by default `$XDG_CACHE_HOME/convt/tune.json` or
//! `~/.cache/convt/tune.json`. A missing or unreadable cache only means the heuristic decides.

use std::collections::BTreeMap;
use std::io::Read;
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
    /// The precision it was tuned for (`f32`, `fast`). An entry is used only for that precision; one without it
    /// (written before entries recorded it) or with a precision this build does not know is ignored.
    #[serde(default)]
    pub precision: Option<String>,
    /// The tensors' element type it was tuned for (`f32`); likewise checked.
    #[serde(default)]
    pub dtype: Option<String>,
}

/// The largest tuning cache read: far more than the entries of every shape a machine tunes.
pub const MAX_CACHE_BYTES: u64 = 64 << 20;

/// The element type of every tensor convt computes on today, as tuning entries record it.
pub const DTYPE: &str = "f32";

impl TuneEntry {
    /// An entry for `strategy`, tuned at `precision` on f32 tensors.
    pub fn new(strategy: String, ms: f64, precision: Precision) -> Self {
        Self { strategy, ms, precision: Some(precision.to_string()), dtype: Some(DTYPE.into()) }
    }
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

/// The cache key of grad_input's kernel in the backward of `shape` ([`crate::gpu::backward::grad_input::choose`]; written by
/// `convt tune --backward`, whose entry holds [`crate::gpu::backward::grad_input::GradInputKernel::cache_name`] and the
/// whole backward's time): the exact key of the forward shape, with ` | grad_input` appended.
pub fn grad_input_key(info: &wgpu::AdapterInfo, shape: &ConvShape) -> String {
    key(info, shape, false, Precision::F32) + " | grad_input"
}

impl TuneCache {
    /// Reads the cache; a missing file is an empty cache. It must be a regular file of at most
    /// [`MAX_CACHE_BYTES`] (a device or a pipe given as the cache would otherwise be read without end).
    pub fn load(path: &Path) -> Result<Self> {
        let not_a_cache = |message: String| ConvtError::TensorFile { path: path.into(), message };
        let meta = match std::fs::metadata(path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(source) => return Err(ConvtError::Io { path: path.into(), source }),
        };
        if !meta.is_file() {
            return Err(not_a_cache("a tuning cache must be a regular file".into()));
        }
        if meta.len() > MAX_CACHE_BYTES {
            return Err(not_a_cache(format!(
                "{} bytes is more than a tuning cache holds (at most {MAX_CACHE_BYTES})",
                meta.len()
            )));
        }
        let mut text = String::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_CACHE_BYTES + 1).read_to_string(&mut text))
            .map_err(|source| ConvtError::Io { path: path.into(), source })?;
        serde_json::from_str(&text).map_err(|e| not_a_cache(format!("not a convt tuning cache: {e}")))
    }

    /// Checks, before any tuning, that [`Self::save`] can write `path` (making its directory if needed).
    pub fn check_writable(path: &Path) -> Result<()> {
        make_parent(path)?;
        crate::io::OutputFile::create(path, &[]).map(drop)
    }

    /// Writes the cache (through [`crate::io::OutputFile`]: the path must be a regular file or new, and is
    /// replaced only once the new contents are complete), making its directory if needed.
    pub fn save(&self, path: &Path) -> Result<()> {
        make_parent(path)?;
        let text = serde_json::to_string_pretty(self).map_err(|e| ConvtError::InvalidArgument(e.to_string()))?;
        crate::io::OutputFile::create(path, &[])?.write_bytes(text.as_bytes())
    }

    /// The cached strategy for a key, if the entry was tuned for `precision` on f32 tensors and names a strategy
    /// of this build that computes at that precision (an exact call never runs an f16 kernel). Any other entry
    /// under the key is ignored, with a warning.
    pub fn lookup(&self, key: &str, precision: Precision) -> Option<Strategy> {
        let name = self.entry_name(key, precision)?;
        let strategy = Strategy::all().into_iter().find(|s| s.name() == name);
        match strategy {
            Some(s) if precision == Precision::Fast || s.precision() == Precision::F32 => Some(s),
            Some(s) => ignore(key, &format!("its strategy `{name}` computes at precision {}", s.precision())),
            None => ignore(key, &format!("this build has no strategy `{name}`")),
        }
    }

    /// The name held under `key` if the entry was tuned for `precision` on f32 tensors; otherwise `None`, with a
    /// warning where an entry exists.
    pub fn entry_name(&self, key: &str, precision: Precision) -> Option<&str> {
        let entry = self.entries.get(key)?;
        let wanted = precision.to_string();
        match (entry.precision.as_deref(), entry.dtype.as_deref()) {
            (Some(p), Some(DTYPE)) if p == wanted => Some(&entry.strategy),
            (Some(p), Some(DTYPE)) => ignore(key, &format!("it was tuned for precision {p}, not {precision}")),
            (None, _) | (_, None) => ignore(key, "it does not record the precision and dtype it was tuned for"),
            (_, Some(d)) => ignore(key, &format!("it was tuned for dtype {d}")),
        }
    }
}

/// Makes the directory of `path` where it does not exist.
fn make_parent(path: &Path) -> Result<()> {
    match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => std::fs::create_dir_all(dir).map_err(|source| ConvtError::Write { path: path.into(), source }),
        None => Ok(()),
    }
}

/// Warns (once per key and process) that a cache entry is not used, and why.
fn ignore<T>(key: &str, why: &str) -> Option<T> {
    static WARNED: std::sync::Mutex<std::collections::BTreeSet<String>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    if WARNED.lock().unwrap_or_else(|e| e.into_inner()).insert(key.to_string()) {
        log::warn!("tuning cache entry `{key}` ignored: {why}; `convt tune` measures it again");
    }
    None
}
