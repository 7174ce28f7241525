//! Host tensors: a shape, a dtype and contiguous row-major (NCHW) values held as f32, plus the error measures the
//! tests and the CLI use to compare results.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::dtype::DType;
use crate::error::{ConvtError, Result};
use crate::params::checked_numel;

/// A tensor on the host. Its values are f32 whatever its [`DType`]: an f16 or bf16 tensor holds values of that
/// dtype ([`Tensor::to_dtype`] rounds them), and is stored in files and on the GPU in its dtype (values written
/// through [`Tensor::data_mut`] are rounded to it then).
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    shape: Vec<usize>,
    data: Vec<f32>,
    dtype: DType,
}

impl Tensor {
    /// An f32 tensor of `shape` holding `data` in row-major order; the lengths must agree.
    pub fn new(shape: impl Into<Vec<usize>>, data: Vec<f32>) -> Result<Self> {
        let shape = shape.into();
        let expected = checked_numel(&shape)?;
        if data.len() != expected {
            return Err(ConvtError::DataLength { shape, expected, actual: data.len() });
        }
        Ok(Self { shape, data, dtype: DType::F32 })
    }

    /// The same values as `dtype` (`tensor.to(dtype)`), each rounded to it (nothing to round into f32 or into the
    /// tensor's own dtype).
    pub fn to_dtype(mut self, dtype: DType) -> Self {
        if dtype != DType::F32 && dtype != self.dtype {
            self.data.iter_mut().for_each(|v| *v = dtype.round(*v));
        }
        self.dtype = dtype;
        self
    }

    /// A tensor of `dtype` from `data` that already holds values of it (decoded from that dtype's bytes), so
    /// nothing is rounded again.
    pub(crate) fn of_dtype(shape: impl Into<Vec<usize>>, data: Vec<f32>, dtype: DType) -> Result<Self> {
        Ok(Self { dtype, ..Self::new(shape, data)? })
    }

    /// The dtype the values are stored in (f32 unless set with [`Tensor::to_dtype`] or read from a file).
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// An f32 tensor of `shape` filled with zeros (`torch.zeros`).
    pub fn zeros(shape: impl Into<Vec<usize>>) -> Result<Self> {
        let shape = shape.into();
        let n = checked_numel(&shape)?;
        Ok(Self { data: filled_vec(n, 0.0, || format!("a tensor of size {shape:?}"))?, shape, dtype: DType::F32 })
    }

    /// Independent draws from U(low, high), reproducible from `seed`.
    pub fn uniform(shape: impl Into<Vec<usize>>, low: f32, high: f32, seed: u64) -> Result<Self> {
        let shape = shape.into();
        let n = checked_numel(&shape)?;
        let mut rng = StdRng::seed_from_u64(seed);
        let mut data = filled_vec(n, 0.0, || format!("a tensor of size {shape:?}"))?;
        data.iter_mut().for_each(|v| *v = rng.random_range(low..high));
        Ok(Self { shape, data, dtype: DType::F32 })
    }

    /// The dimensions, outermost first (`tensor.shape`).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// The values in row-major order, as f32 whatever the dtype.
    pub fn data(&self) -> &[f32] {
        &self.data
    }
    /// The values to write in place. Values written here are not rounded to the dtype until the tensor is stored
    /// (in a file or on the GPU); [`Tensor::to_dtype`] rounds them at once.
    pub fn data_mut(&mut self) -> &mut [f32] {
        &mut self.data
    }
    /// The values in row-major order, taking them out of the tensor.
    pub fn into_data(self) -> Vec<f32> {
        self.data
    }
    /// The number of elements, the product of the dimensions (`tensor.numel()`).
    pub fn numel(&self) -> usize {
        self.data.len()
    }

    /// The same data under another shape of the same number of elements.
    pub fn reshape(self, shape: impl Into<Vec<usize>>) -> Result<Self> {
        Self::of_dtype(shape, self.data, self.dtype)
    }
}

/// A vector of `len` copies of `value`, or [`ConvtError::HostOutOfMemory`] naming `what` when the host cannot hold
/// it. Every host buffer whose size comes from the user's shapes or files is made here: an infallible allocation
/// of that size would abort the process instead of returning an error, and on Linux a size beyond the memory
/// available would be granted lazily and end in the out-of-memory killer.
pub(crate) fn filled_vec<T: Clone>(len: usize, value: T, what: impl Fn() -> String) -> Result<Vec<T>> {
    let mut v = Vec::new();
    reserve(&mut v, len, what)?;
    v.resize(len, value);
    Ok(v)
}

/// Room for `additional` more elements in `v`, or [`ConvtError::HostOutOfMemory`] naming `what` (see
/// [`filled_vec`]).
pub(crate) fn reserve<T>(v: &mut Vec<T>, additional: usize, what: impl Fn() -> String) -> Result<()> {
    // Below this size a lazily granted allocation cannot take the host down: the system is not asked (which
    // takes a few file reads) on the hot path of small calls.
    const ASK_ABOVE_BYTES: u128 = 64 << 20;
    let bytes = additional as u128 * std::mem::size_of::<T>() as u128;
    let available = if bytes > ASK_ABOVE_BYTES { available_host_memory() } else { None };
    let refuse = || ConvtError::HostOutOfMemory { what: what(), bytes, available };
    if available.is_some_and(|a| bytes > a as u128) {
        return Err(refuse());
    }
    v.try_reserve_exact(additional).map_err(|_| refuse())
}

/// f64 values rounded to f32, in a fallibly allocated vector.
pub(crate) fn to_f32_vec(values: &[f64], what: impl Fn() -> String) -> Result<Vec<f32>> {
    let mut out = filled_vec(values.len(), 0f32, what)?;
    out.iter_mut().zip(values).for_each(|(o, &v)| *o = v as f32);
    Ok(out)
}

/// The memory the host can still give, in bytes, where the system says. Linux: `MemAvailable` plus free swap,
/// and no more than the process's memory cgroup has left (a container's limit, which /proc/meminfo does not show).
pub(crate) fn available_host_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = info.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line[name.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kib.saturating_mul(1024))
    };
    let system = field("MemAvailable:")?.saturating_add(field("SwapFree:").unwrap_or(0));
    Some(cgroup_memory_left().map_or(system, |left| left.min(system)))
}

/// What the process's memory cgroup allows beyond its current use, not counting the inactive file cache the
/// kernel reclaims first: cgroup v2 (`memory.max` less `memory.current`) or v1 (`memory.limit_in_bytes` less
/// `memory.usage_in_bytes`); none where no limit is set or the files are not visible.
fn cgroup_memory_left() -> Option<u64> {
    let groups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let read = |path: String| -> Option<u64> { std::fs::read_to_string(path).ok()?.trim().parse().ok() };
    for line in groups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        // (limit, usage, the usage's file cache the kernel reclaims before it fails an allocation)
        let (dir, limit, usage, stat, inactive) = match controllers {
            "" => (format!("/sys/fs/cgroup{path}"), "memory.max", "memory.current", "memory.stat", "inactive_file"),
            c if c.split(',').any(|c| c == "memory") => (
                format!("/sys/fs/cgroup/memory{path}"),
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
                "memory.stat",
                "total_inactive_file",
            ),
            _ => continue,
        };
        // "max" (v2) or a near-u64::MAX value (v1) means no limit: `read` gives None or a number no host has.
        if let (Some(limit), Some(usage)) = (read(format!("{dir}/{limit}")), read(format!("{dir}/{usage}"))) {
            let reclaimable = std::fs::read_to_string(format!("{dir}/{stat}"))
                .ok()
                .and_then(|text| {
                    let line = text.lines().find(|l| l.split_whitespace().next() == Some(inactive))?;
                    line.split_whitespace().nth(1)?.parse::<u64>().ok()
                })
                .unwrap_or(0);
            return Some(limit.saturating_sub(usage.saturating_sub(reclaimable)));
        }
    }
    None
}

/// How far a result is from a reference: the measures `convt verify` prints and the tests assert.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ErrorStats {
    /// ||result - reference||_2 / ||reference||_2 (the absolute L2 error when the reference is all zeros).
    pub rel_l2: f64,
    /// The largest absolute difference between an element and its reference (infinity when `non_finite > 0`).
    pub max_abs: f64,
    /// Elements of the result that are NaN or infinite where the reference is finite (unwritten or broken).
    pub non_finite: usize,
    /// The number of elements compared (the length of both slices).
    pub compared: usize,
}

impl ErrorStats {
    /// Compares `result` with a float64 `reference` of the same length.
    pub fn compare(result: &[f32], reference: &[f64]) -> Self {
        assert_eq!(result.len(), reference.len(), "compare needs equal lengths");
        let (mut diff2, mut ref2, mut max_abs, mut non_finite) = (0f64, 0f64, 0f64, 0usize);
        for (&r, &e) in result.iter().zip(reference) {
            let r = r as f64;
            if !r.is_finite() && e.is_finite() {
                non_finite += 1;
                continue;
            }
            let d = r - e;
            diff2 += d * d;
            ref2 += e * e;
            max_abs = max_abs.max(d.abs());
        }
        let rel_l2 = if non_finite > 0 {
            f64::INFINITY
        } else if ref2 > 0.0 {
            (diff2 / ref2).sqrt()
        } else {
            diff2.sqrt()
        };
        Self {
            rel_l2,
            max_abs: if non_finite > 0 { f64::INFINITY } else { max_abs },
            non_finite,
            compared: result.len(),
        }
    }
}
