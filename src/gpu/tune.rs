//! The autotuner's persistent cache: the fastest kernel measured for a [`TuneKey`] (adapter, driver, pass,
//! precision, dtype, bucketed shape), written by `convt tune` and read by [`crate::gpu::select`]. A JSON file; its location is
//! `GpuOptions::tune_cache` (`CONVT_TUNE_CACHE`), by default `convt/tune.json` in the platform's cache directory
//! (the `dirs` crate: `$XDG_CACHE_HOME` or `~/.cache` on Linux, `~/Library/Caches` on macOS, the local app data
//! folder on Windows). A missing or unreadable cache only means the heuristic decides.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::dtype::DType;
use crate::error::{ConvtError, Result};
use crate::params::ConvShape;
use crate::precision::Precision;

/// The tuning cache's contents: the winner for each [`TuneKey`] (the JSON file's one object, `entries`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TuneCache {
    /// [`TuneKey`] text -> winner.
    pub entries: BTreeMap<String, TuneEntry>,
}

/// One tuned result: the fastest kernel `convt tune` measured for a key, and its time.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TuneEntry {
    /// The name of the fastest candidate: a `Strategy`'s, `GradInputKernel::cache_name`'s or a `GradWeightKernel`'s,
    /// by the key's pass.
    pub strategy: String,
    /// Its median time, ms.
    pub ms: f64,
    /// The precision it was tuned for (`f32`, `fast`). An entry is used only for that precision; one without it
    /// (written before entries recorded it) or with a precision this build does not know is ignored.
    #[serde(default)]
    pub precision: Option<String>,
    /// The tensors' element type it was tuned for (`f32`, `f16`, `bf16`); likewise checked.
    #[serde(default)]
    pub dtype: Option<String>,
}

/// The largest tuning cache read: far more than the entries of every shape a machine tunes.
pub const MAX_CACHE_BYTES: u64 = 64 << 20;

impl TuneEntry {
    /// An entry for `strategy`, tuned at `precision` on tensors of `dtype`.
    pub fn new(strategy: String, ms: f64, precision: Precision, dtype: DType) -> Self {
        Self { strategy, ms, precision: Some(precision.to_string()), dtype: Some(dtype.to_string()) }
    }
}

/// The default cache location: `convt/tune.json` in the platform's cache directory (`None` where it has none).
pub fn default_path() -> Option<PathBuf> {
    Some(dirs::cache_dir()?.join("convt").join("tune.json"))
}

/// The pass a tuning entry is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pass {
    /// The forward convolution ([`crate::Strategy`]); written `forward`.
    Forward,
    /// The gradient of the input ([`crate::GradInputKernel`]); written `grad_input`.
    GradInput,
    /// The gradient of the weight ([`crate::GradWeightKernel`]); written `grad_weight`.
    GradWeight,
}

impl std::fmt::Display for Pass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Pass::Forward => "forward",
            Pass::GradInput => "grad_input",
            Pass::GradWeight => "grad_weight",
        })
    }
}

/// What a tuned result is for: the adapter (name, backend, driver), the pass, the precision, the tensors' dtype
/// (a half tensor moves half the bytes, and its kernels read and store it natively: the fastest kernel differs)
/// and the problem, its
/// batch and input height and width rounded up to a power of two ([`bucket`]) so that nearby shapes share the
/// result (a batch of 7 uses a batch of 8's); channels, groups, kernel, stride, padding and dilation exact, as
/// the kernels' fit and speed depend on them. Written into the cache file as its `Display` text.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TuneKey {
    /// The adapter, as `name | backend | driver driver_info`.
    pub adapter: String,
    /// The pass the result is for.
    pub pass: Pass,
    /// The precision the result is for.
    pub precision: Precision,
    /// The tensors' dtype the result is for.
    pub dtype: DType,
    /// The batch size, `N`, rounded up to a power of two ([`bucket`]).
    pub batch: usize,
    /// Input channels, `Cin`.
    pub in_channels: usize,
    /// Output channels, `Cout`.
    pub out_channels: usize,
    /// Channel groups.
    pub groups: usize,
    /// The input's `[H, W]`, each rounded up to a power of two ([`bucket`]).
    pub in_hw: [usize; 2],
    /// The kernel's `[kH, kW]`.
    pub kernel: [usize; 2],
    /// The stride, `[height, width]`.
    pub stride: [usize; 2],
    /// The padding, `[height, width]`.
    pub padding: [usize; 2],
    /// The dilation, `[height, width]`.
    pub dilation: [usize; 2],
    /// Whether the forward has a bias; always false for the backward passes, which do not depend on it.
    pub bias: bool,
}

/// A size's bucket: the next power of two (1 for 0).
pub fn bucket(n: usize) -> usize {
    n.max(1).next_power_of_two()
}

impl TuneKey {
    /// The key of `shape` for `pass` at `precision` on tensors of `dtype` on the adapter `info` describes. The
    /// backward passes do not depend on the bias: their keys record none.
    pub fn new(
        info: &wgpu::AdapterInfo,
        pass: Pass,
        shape: &ConvShape,
        has_bias: bool,
        precision: Precision,
        dtype: DType,
    ) -> Self {
        let adapter = format!("{} | {:?} | {} {}", info.name, info.backend, info.driver, info.driver_info);
        Self::with_adapter(adapter, pass, shape, has_bias, precision, dtype)
    }

    /// [`TuneKey::new`] for an adapter described as the key's first part (`name | backend | driver driver_info`).
    pub fn with_adapter(
        adapter: String,
        pass: Pass,
        shape: &ConvShape,
        has_bias: bool,
        precision: Precision,
        dtype: DType,
    ) -> Self {
        Self {
            adapter,
            pass,
            precision,
            dtype,
            batch: bucket(shape.batch),
            in_channels: shape.in_channels,
            out_channels: shape.out_channels,
            groups: shape.groups,
            in_hw: shape.in_hw.map(bucket),
            kernel: shape.kernel,
            stride: shape.stride,
            padding: shape.padding,
            dilation: shape.dilation,
            bias: has_bias && pass == Pass::Forward,
        }
    }
}

impl std::fmt::Display for TuneKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hw = |v: [usize; 2]| format!("{}x{}", v[0], v[1]);
        write!(
            f,
            "{} | {} {} {} | N<={} Cin{} Cout{} G{} in<={} k{} s{} p{} d{} bias{}",
            self.adapter,
            self.pass,
            self.precision,
            self.dtype,
            self.batch,
            self.in_channels,
            self.out_channels,
            self.groups,
            hw(self.in_hw),
            hw(self.kernel),
            hw(self.stride),
            hw(self.padding),
            hw(self.dilation),
            self.bias
        )
    }
}

impl TuneCache {
    /// Reads the cache; a missing file is an empty cache. It must be a regular file of at most
    /// [`MAX_CACHE_BYTES`] (a device or a pipe given as the cache would otherwise be read without end).
    pub fn load(path: &Path) -> Result<Self> {
        let not_a_cache = |message: String| ConvtError::TuneCache { path: path.into(), message };
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
        serde_json::from_str(&text).map_err(|e| not_a_cache(e.to_string()))
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

    /// Records `entry` as the winner for `key`.
    pub fn insert(&mut self, key: &TuneKey, entry: TuneEntry) {
        self.entries.insert(key.to_string(), entry);
    }

    /// The kernel name held under `key` if its entry was tuned for the key's precision and dtype; otherwise
    /// `None`, with a warning where an entry exists. Which kernel the name stands for, and whether it computes the
    /// shape, is the selector's question.
    pub fn lookup(&self, key: &TuneKey) -> Option<&str> {
        let entry = self.entries.get(&key.to_string())?;
        let (precision, dtype) = (key.precision.to_string(), key.dtype.to_string());
        match (entry.precision.as_deref(), entry.dtype.as_deref()) {
            (Some(p), Some(d)) if p == precision && d == dtype => Some(&entry.strategy),
            (Some(p), Some(d)) if d == dtype => {
                self.ignore(key, &format!("it was tuned for precision {p}, not {precision}"))
            }
            (None, _) | (_, None) => self.ignore(key, "it does not record the precision and dtype it was tuned for"),
            (_, Some(d)) => self.ignore(key, &format!("it was tuned for dtype {d}, not {dtype}")),
        }
    }

    /// Warns (once per key and process) that the entry under `key` is not used, and why.
    pub fn ignore<T>(&self, key: &TuneKey, why: &str) -> Option<T> {
        static WARNED: std::sync::Mutex<std::collections::BTreeSet<String>> =
            std::sync::Mutex::new(std::collections::BTreeSet::new());
        let key = key.to_string();
        if WARNED.lock().unwrap_or_else(|e| e.into_inner()).insert(key.clone()) {
            log::warn!("tuning cache entry `{key}` ignored: {why}; `convt tune` measures it again");
        }
        None
    }
}

/// Makes the directory of `path` where it does not exist.
fn make_parent(path: &Path) -> Result<()> {
    match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => std::fs::create_dir_all(dir).map_err(|source| ConvtError::Write { path: path.into(), source }),
        None => Ok(()),
    }
}

/// Times every forward kernel that computes `shape` at `precision` on tensors of `dtype` on the context's adapter
/// (random inputs in [-1, 1), GPU timestamps around each call's compute pass, the median of `runs` calls after two untimed ones)
/// and records the fastest in `cache` under the shape's [`TuneKey`], which the shapes of its bucket share.
/// Returns every kernel that ran with its median time in ms, fastest first; a kernel the adapter cannot run
/// for this shape is left out. A context reads its cache when it is made: save `cache`
/// ([`TuneCache::save`]) where [`crate::GpuOptions::tune_cache`] points for later contexts to use it.
/// `convt tune` is the thorough version (warm-up against the clocks, the fastest timed again).
pub fn tune_forward(
    ctx: &crate::GpuContext,
    shape: &ConvShape,
    has_bias: bool,
    precision: Precision,
    dtype: DType,
    runs: u32,
    cache: &mut TuneCache,
) -> crate::Result<Vec<(crate::gpu::Strategy, f64)>> {
    use crate::gpu::{conv_transpose2d_into, GpuTimer, Run, Strategy};
    use crate::{GpuTensor, Tensor};
    const WARMUP: u32 = 2;
    let runs = runs.max(1);
    let random = |dims, seed| Tensor::uniform(dims, -1.0, 1.0, seed).map(|t| t.to_dtype(dtype));
    let input = GpuTensor::upload(ctx, &random(shape.input_dims_as_given(), 1)?)?;
    let weight = GpuTensor::upload(ctx, &random(shape.weight_dims(), 2)?)?;
    let bias = has_bias.then(|| GpuTensor::upload(ctx, &random(vec![shape.out_channels], 3)?)).transpose()?;
    let output = GpuTensor::empty_with(ctx, &shape.output_dims_as_given(), dtype)?;
    let options = shape.options(has_bias, precision);
    let mut timed = Vec::new();
    for kernel in Strategy::candidates_for(ctx, precision).into_iter().filter(|s| s.computes(ctx, shape)) {
        let timer = GpuTimer::new(ctx, runs)?;
        let run = |slot: Option<u32>| {
            let run = Run { kernel: Some(kernel), timer: slot.map(|s| (&timer, s)) };
            conv_transpose2d_into(ctx, &input, &weight, bias.as_ref(), &options, &output, run)
        };
        let ran = (0..WARMUP).try_for_each(|_| run(None).map(drop)).and_then(|()| {
            (0..runs).try_for_each(|i| run(Some(i)).map(drop))?;
            timer.read_ms(ctx, runs)
        });
        match ran {
            Ok(mut ms) => {
                ms.sort_by(f64::total_cmp);
                timed.push((kernel, ms[ms.len() / 2]));
            }
            Err(e) => log::info!("convt: tuning skips {} on this shape: {e}", kernel.name()),
        }
    }
    timed.sort_by(|a, b| a.1.total_cmp(&b.1));
    if let Some(&(best, ms)) = timed.first() {
        let key = TuneKey::new(ctx.adapter_info(), Pass::Forward, shape, has_bias, precision, dtype);
        cache.insert(&key, TuneEntry::new(best.name(), ms, precision, dtype));
    }
    Ok(timed)
}
