//! The one place that creates, reuses, fills and reads GPU buffers.
//!
//! A [`GpuTensor`] is a tensor resident on the GPU. A storage binding holds at most
//! [`GpuContext::binding_limit`] bytes (2 GiB on NVIDIA, 128 MiB on Mesa's software driver), so a tensor is
//! stored as one or more *chunks*, each its own buffer. Chunk boundaries fall between *planes*: for
//! `[N, C, H, W]` a plane is one `H x W` channel image. When a whole sample (`C` planes) fits, chunks hold
//! whole samples; otherwise they hold runs of one sample's channels. Kernels get slices of work that never
//! straddle a chunk (src/gpu/slices.rs).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::dtype::DType;
use crate::error::{ConvtError, Result};
use crate::gpu::context::{lock, GpuContext};
use crate::gpu::kernel::Bindable;
use crate::params::checked_numel;
use crate::tensor::Tensor;

/// Idle buffers kept for reuse, by (size, usage). Bounded: at most the idle limit waits in the pool (the
/// larger of `MAX_IDLE_BYTES` and the most scratch two consecutive calls so far held, so that the scratch of the
/// largest call, and of a forward and backward that alternate, is found idle when they run again instead of
/// allocated anew), and a buffer coming back displaces the least recently returned idle ones to fit (the call
/// that just ran is the likeliest to run again). The order is the calls' own, the same in every process: which
/// buffers a call finds idle never depends on a hash seed.
#[derive(Default)]
pub(crate) struct BufferPool {
    inner: Arc<Mutex<PoolInner>>,
}

#[derive(Default)]
struct PoolInner {
    /// Oldest first.
    idle: Vec<((u64, wgpu::BufferUsages), wgpu::Buffer)>,
    idle_bytes: u64,
    created: u64,
    /// Bytes of tensor storage reserved by live [`GpuTensor`]s (checked against the memory budget).
    tensor_bytes: u64,
    /// Bytes of the pool's buffers in use now (handed out and not yet back: tensors, scratch, prepared weights,
    /// staging), and the most there were since the last [`BufferPool::reset_peak`].
    live_bytes: u64,
    peak_bytes: u64,
    /// The most scratch two consecutive calls have held together, counting once the buffers of a size and usage
    /// both held ([`InFlight`]: each call's working tensors and buffers, the f32 results and padded layouts among
    /// them): the idle limit follows it.
    peak_scratch_bytes: u64,
    /// The (size, usage) of each scratch buffer the last call held, sorted.
    last_call: Vec<(u64, wgpu::BufferUsages)>,
}

impl PoolInner {
    /// The most idle bytes kept: room for the scratch of the two consecutive calls that held the most, at least
    /// [`MAX_IDLE_BYTES`].
    fn idle_limit(&self) -> u64 {
        self.peak_scratch_bytes.max(MAX_IDLE_BYTES)
    }

    /// Counts a buffer of `size` bytes handed out.
    fn took(&mut self, size: u64) {
        self.live_bytes += size;
        self.peak_bytes = self.peak_bytes.max(self.live_bytes);
    }

    /// Records that a call held scratch buffers of these (size, usage) until it submitted. The limit keeps room
    /// for this call's and the previous call's together, a buffer of a size and usage both held counted once (a
    /// call repeating itself needs its own scratch alone): a training step alternates a forward and a backward
    /// whose scratch buffers differ in size, and with room for the larger alone each call's buffers displaced the
    /// other's, so both were allocated anew in every step (docs/PERFORMANCE.md).
    fn call_held(&mut self, mut held: Vec<(u64, wgpu::BufferUsages)>) {
        let key = |k: &(u64, wgpu::BufferUsages)| (k.0, k.1.bits());
        held.sort_unstable_by_key(key);
        let bytes = |b: &[(u64, wgpu::BufferUsages)]| b.iter().fold(0u64, |sum, k| sum.saturating_add(k.0));
        // The bytes of the buffers both calls held (a multiset intersection of the sorted lists).
        let (mut shared, mut i, mut j) = (0u64, 0, 0);
        let prev = &self.last_call;
        while i < held.len() && j < prev.len() {
            match key(&held[i]).cmp(&key(&prev[j])) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    shared = shared.saturating_add(held[i].0);
                    i += 1;
                    j += 1;
                }
            }
        }
        let both = bytes(&held).saturating_add(bytes(prev)) - shared;
        self.peak_scratch_bytes = self.peak_scratch_bytes.max(both);
        self.last_call = held;
    }

    /// Counts a buffer of `size` bytes given back, and makes room for it among the idle buffers by dropping the
    /// least recently returned ones where it is `reusable` and fits the idle limit: whether it waits for reuse.
    fn returned(&mut self, size: u64, reusable: bool) -> bool {
        self.live_bytes = self.live_bytes.saturating_sub(size);
        let limit = self.idle_limit();
        if !reusable || size > limit {
            return false;
        }
        while self.idle_bytes + size > limit && !self.idle.is_empty() {
            let (k, _) = self.idle.remove(0);
            self.idle_bytes -= k.0;
        }
        true
    }
}

/// The pool's least idle limit: idle buffers up to this many bytes, or the most scratch two consecutive calls have
/// held, wait for reuse. A scratch buffer that cannot wait in the pool is freed after each call and allocated again
/// by the next, and that mapping churn made the kernels running meanwhile much slower and their times differ
/// between processes (docs/PERFORMANCE.md). The memory budget still drops idle buffers whenever a tensor needs their room, and
/// [`crate::GpuContext::release_idle_memory`] frees them.
pub const MAX_IDLE_BYTES: u64 = 4 << 30;

/// A buffer that goes back to its pool when dropped.
pub struct PooledBuffer {
    buffer: Option<wgpu::Buffer>,
    pool: Weak<Mutex<PoolInner>>,
    /// False while a staging buffer may be mapped: such a buffer is dropped instead of reused.
    reusable: bool,
}

impl std::ops::Deref for PooledBuffer {
    type Target = wgpu::Buffer;
    fn deref(&self) -> &wgpu::Buffer {
        self.buffer.as_ref().expect("a pooled buffer is present until dropped")
    }
}

impl Drop for PooledBuffer {
    fn drop(&mut self) {
        let (Some(buffer), Some(pool)) = (self.buffer.take(), self.pool.upgrade()) else {
            return;
        };
        let mut p = lock(&pool);
        let key = (buffer.size(), buffer.usage());
        if !p.returned(key.0, self.reusable) {
            return;
        }
        p.idle_bytes += key.0;
        p.idle.push((key, buffer));
    }
}

impl BufferPool {
    fn handle(&self) -> Weak<Mutex<PoolInner>> {
        Arc::downgrade(&self.inner)
    }

    /// A buffer of exactly `size` bytes and `usage`, reused when one is idle. Errors (out of memory) surface
    /// through the caller's error scope.
    pub(crate) fn get(&self, device: &wgpu::Device, size: u64, usage: wgpu::BufferUsages) -> PooledBuffer {
        let reused = {
            let mut p = lock(&self.inner);
            // The most recently returned buffer of this size and usage.
            let b = p.idle.iter().rposition(|(k, _)| *k == (size, usage)).map(|i| p.idle.remove(i).1);
            if let Some(b) = &b {
                p.idle_bytes -= b.size();
            } else {
                p.created += 1;
            }
            p.took(size);
            b
        };
        let buffer = reused.unwrap_or_else(|| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("convt"),
                size,
                usage,
                mapped_at_creation: false,
            })
        });
        PooledBuffer { buffer: Some(buffer), pool: Arc::downgrade(&self.inner), reusable: true }
    }

    /// [`BufferPool::reserve`] held by the returned guard, which releases it when dropped: for storage that
    /// is not a tensor's but lives as long (a layer's prepared weights).
    pub(crate) fn reserve_held(&self, bytes: u64, budget: Option<u64>, what: &dyn Fn() -> String) -> Result<Reserved> {
        self.reserve(bytes, budget, what)?;
        Ok(Reserved { pool: self.handle(), bytes })
    }

    /// Reserves `bytes` of tensor storage against `budget`, dropping idle buffers to make room; refuses (before
    /// anything is allocated) what would exceed it.
    fn reserve(&self, bytes: u64, budget: Option<u64>, what: &dyn Fn() -> String) -> Result<()> {
        let mut p = lock(&self.inner);
        if let Some(budget) = budget {
            if p.tensor_bytes.saturating_add(bytes) > budget {
                return Err(ConvtError::OutOfMemory(format!(
                    "{} needs {bytes} bytes, {} are in use and the memory budget is {budget} bytes",
                    what(),
                    p.tensor_bytes
                )));
            }
            if p.tensor_bytes + p.idle_bytes + bytes > budget {
                p.idle.clear();
                p.idle_bytes = 0;
            }
        }
        p.tensor_bytes += bytes;
        Ok(())
    }

    fn release(&self, bytes: u64) {
        let mut p = lock(&self.inner);
        p.tensor_bytes = p.tensor_bytes.saturating_sub(bytes);
    }

    /// Bytes of tensor storage held by live tensors.
    pub fn tensor_bytes(&self) -> u64 {
        lock(&self.inner).tensor_bytes
    }

    /// The most bytes of the pool's buffers in use at once since the last [`BufferPool::reset_peak`] (device memory
    /// convt holds for tensors, scratch and prepared weights; views of an application's buffers aside).
    pub fn peak_bytes(&self) -> u64 {
        lock(&self.inner).peak_bytes
    }

    /// Bytes of the pool's buffers in use now.
    pub fn live_bytes(&self) -> u64 {
        lock(&self.inner).live_bytes
    }

    /// Starts a new peak at the bytes in use now.
    pub fn reset_peak(&self) {
        let mut p = lock(&self.inner);
        p.peak_bytes = p.live_bytes;
    }

    /// (buffers created so far, idle buffers, idle bytes): for soak tests and diagnostics.
    pub fn stats(&self) -> (u64, usize, u64) {
        let p = lock(&self.inner);
        (p.created, p.idle.len(), p.idle_bytes)
    }

    /// The most idle bytes the pool keeps now ([`MAX_IDLE_BYTES`], or the most scratch two consecutive calls held).
    pub fn idle_limit(&self) -> u64 {
        lock(&self.inner).idle_limit()
    }

    /// Frees every idle buffer and starts the idle limit again from [`MAX_IDLE_BYTES`].
    pub fn release_idle(&self) {
        let mut p = lock(&self.inner);
        p.idle.clear();
        p.idle_bytes = 0;
        p.peak_scratch_bytes = 0;
        p.last_call.clear();
    }
}

/// The pooled buffers a call encodes its commands with, kept until the call has submitted them. A pooled buffer
/// dropped earlier goes back to the pool while its commands are still being recorded: another thread can take
/// it and queue a write (an upload, say) that the queue then runs *before* this call's commands, which read the
/// other thread's data instead of their own (seen on NVIDIA's driver with threads sharing a context). Once the call has
/// submitted, anything later on the queue runs after it.
#[derive(Default)]
pub(crate) struct InFlight(Vec<PooledBuffer>);

impl InFlight {
    /// Keeps `buffer` until this list is dropped; returns a handle to it.
    pub fn keep(&mut self, buffer: PooledBuffer) -> wgpu::Buffer {
        let handle = (*buffer).clone();
        self.0.push(buffer);
        handle
    }

    /// Keeps the buffers of a scratch tensor until this list is dropped.
    pub fn keep_tensor(&mut self, mut tensor: GpuTensor) {
        self.0.extend(std::mem::take(&mut tensor.chunks).into_iter().map(|c| c.buffer));
    }

    /// Submits the commands of `encoder`, then lets the kept buffers go back to the pool: anything queued
    /// after the submission runs after these commands. The pool learns how much scratch the call held, so that
    /// its idle limit keeps room for all of it (a call whose scratch is freed and allocated anew every time runs
    /// far slower: docs/PERFORMANCE.md).
    pub fn submit(self, ctx: &GpuContext, encoder: wgpu::CommandEncoder) -> Result<()> {
        let held = self.0.iter().map(|b| (b.size(), b.usage())).collect();
        lock(&ctx.pool.inner).call_held(held);
        ctx.scoped(|| {
            ctx.queue.submit([encoder.finish()]);
            Ok(())
        })
    }
}

/// A small buffer holding `contents` (operand maxima, indirect dispatch counts, values kept between calls).
pub(crate) fn buffer_with(
    device: &wgpu::Device,
    label: &str,
    contents: &[u8],
    usage: wgpu::BufferUsages,
) -> wgpu::Buffer {
    wgpu::util::DeviceExt::create_buffer_init(
        device,
        &wgpu::util::BufferInitDescriptor { label: Some(label), contents, usage },
    )
}

/// A buffer of `size` bytes that the GPU fills (query results, read-back staging, placeholders).
pub(crate) fn plain_buffer(device: &wgpu::Device, label: &str, size: u64, usage: wgpu::BufferUsages) -> wgpu::Buffer {
    device.create_buffer(&wgpu::BufferDescriptor { label: Some(label), size, usage, mapped_at_creation: false })
}

/// Most uniform blocks kept: far more than the distinct dispatches of the shapes a process runs (a block is at most
/// about 3 KiB, the GEMM's with its phase table: some 13 MiB at the bound).
const MAX_UNIFORMS: usize = 4096;

/// The uniform blocks of dispatches, by their bytes: made once and bound by every later dispatch with the same
/// values (a layer's repeated calls), instead of a new buffer per dispatch. A uniform buffer is never written
/// after it is made, so calls and threads can share it.
#[derive(Default)]
pub(crate) struct Uniforms(Mutex<HashMap<Vec<u8>, wgpu::Buffer>>);

impl Uniforms {
    /// Forgets every block (after a failed scope, where one may have been made invalid).
    pub fn clear(&self) {
        lock(&self.0).clear();
    }

    /// The uniform buffer holding `bytes`.
    pub fn get(&self, device: &wgpu::Device, bytes: &[u8]) -> wgpu::Buffer {
        let mut map = lock(&self.0);
        if let Some(b) = map.get(bytes) {
            return b.clone();
        }
        if map.len() >= MAX_UNIFORMS {
            map.clear();
        }
        let buffer = buffer_with(device, "convt dispatch", bytes, wgpu::BufferUsages::UNIFORM);
        map.insert(bytes.to_vec(), buffer.clone());
        buffer
    }
}

/// The alignment of a tensor view's offset ([`GpuTensor::from_buffer`]): 256 bytes, wgpu's default
/// `min_storage_buffer_offset_alignment` and the largest any adapter asks for.
pub const VIEW_ALIGNMENT: u64 = 256;

pub(crate) const STORAGE: wgpu::BufferUsages =
    wgpu::BufferUsages::STORAGE.union(wgpu::BufferUsages::COPY_DST).union(wgpu::BufferUsages::COPY_SRC);

/// A run of consecutive planes stored in one buffer.
pub struct Chunk {
    // Private: kernels bind a chunk through `Bindable`, which keeps its offset (a view's chunk does not start at 0).
    buffer: PooledBuffer,
    /// Where the chunk's bytes start in `buffer`: 0 but in a view of an application's buffer
    /// ([`GpuTensor::from_buffer`]).
    pub(crate) offset: u64,
    /// The chunk's bytes: its planes' values, rounded up to whole 4-byte words.
    pub(crate) bytes: u64,
    /// Index of the first plane (in `[N*C]` order) held by this chunk.
    pub first_plane: usize,
    pub planes: usize,
}

impl Chunk {
    /// Encodes zeroing the chunk's bytes.
    pub(crate) fn clear(&self, encoder: &mut wgpu::CommandEncoder) {
        encoder.clear_buffer(&self.buffer, self.offset, Some(self.bytes));
    }
}

impl Bindable for Chunk {
    fn range(&self) -> (&wgpu::Buffer, u64, u64) {
        (&self.buffer, self.offset, self.bytes)
    }
}

/// A tensor resident on the GPU, split into chunks that each fit one storage binding.
pub struct GpuTensor {
    shape: Vec<usize>,
    dtype: DType,
    plane_elems: usize,
    chunks: Vec<Chunk>,
    /// The pool its bytes are reserved in (released on drop).
    pool: Weak<Mutex<PoolInner>>,
    reserved: u64,
    /// Changes on every write through convt (see [`GpuTensor::version`]).
    version: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for GpuTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuTensor")
            .field("shape", &self.shape)
            .field("dtype", &self.dtype)
            .field("chunks", &self.chunks.len())
            .finish()
    }
}

/// The source of tensor versions: each write takes a number no tensor had before.
static VERSIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Drop for GpuTensor {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.upgrade() {
            BufferPool { inner: pool }.release(self.reserved);
        }
    }
}

/// Bytes reserved against the memory budget for as long as this lives.
pub(crate) struct Reserved {
    pool: Weak<Mutex<PoolInner>>,
    bytes: u64,
}

impl Drop for Reserved {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.upgrade() {
            BufferPool { inner: pool }.release(self.bytes);
        }
    }
}

/// A reservation not yet owned by a tensor: released if the allocation fails.
struct Reservation<'a> {
    pool: &'a BufferPool,
    bytes: u64,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.pool.release(self.bytes);
    }
}

impl GpuTensor {
    /// An uninitialised f32 tensor of this shape on the GPU. With `poison_outputs` set in the context, it is
    /// filled with NaN, so that elements a kernel fails to write show up.
    pub fn empty(ctx: &GpuContext, shape: &[usize]) -> Result<Self> {
        Self::empty_with(ctx, shape, DType::F32)
    }

    /// [`GpuTensor::empty`] of another dtype.
    pub fn empty_with(ctx: &GpuContext, shape: &[usize], dtype: DType) -> Result<Self> {
        let t = Self::empty_unpoisoned(ctx, shape, dtype)?;
        if ctx.options().poison_outputs {
            t.fill(ctx, f32::NAN)?;
        }
        Ok(t)
    }

    /// Copies a host tensor to the GPU, in its dtype.
    pub fn upload(ctx: &GpuContext, tensor: &Tensor) -> Result<Self> {
        let t = Self::empty_unpoisoned(ctx, tensor.shape(), tensor.dtype())?;
        let mut bytes = Vec::new();
        ctx.scoped(|| {
            for c in &t.chunks {
                let values = &tensor.data()[c.first_plane * t.plane_elems..][..c.planes * t.plane_elems];
                if t.dtype == DType::F32 && cfg!(target_endian = "little") {
                    ctx.queue.write_buffer(&c.buffer, c.offset, bytemuck::cast_slice(values));
                    continue;
                }
                // In pieces of at most 4 MiB of encoded values (an even count, so each ends on a word).
                for (i, piece) in values.chunks(1 << 21).enumerate() {
                    bytes.clear();
                    t.dtype.encode(piece, &mut bytes);
                    bytes.resize(bytes.len().next_multiple_of(4), 0);
                    ctx.queue.write_buffer(&c.buffer, c.offset + (i << 21) as u64 * t.dtype.size() as u64, &bytes);
                }
            }
            Ok(())
        })?;
        Ok(t)
    }

    /// A tensor of `shape` and `dtype` from its elements' little-endian bytes in row-major order (`bytes.len()`
    /// must be the elements times [`DType::size`]): half-precision values go to the GPU as they are, with no f32
    /// values made on the host (what the Python package does with numpy's float16 and bfloat16 bits).
    pub fn from_bytes(ctx: &GpuContext, shape: &[usize], dtype: DType, bytes: &[u8]) -> Result<Self> {
        let numel = checked_numel(shape)?;
        if numel.checked_mul(dtype.size()) != Some(bytes.len()) {
            return Err(ConvtError::DataLength {
                shape: shape.to_vec(),
                expected: numel,
                actual: bytes.len() / dtype.size(),
            });
        }
        let t = Self::empty_unpoisoned(ctx, shape, dtype)?;
        let mut tail = Vec::new();
        ctx.scoped(|| {
            for c in &t.chunks {
                let ours =
                    &bytes[c.first_plane * t.plane_elems * dtype.size()..][..c.planes * t.plane_elems * dtype.size()];
                // Whole 4-byte words: queue writes are, and a chunk's end pads an odd count of halves.
                let whole = ours.len() / 4 * 4;
                if whole > 0 {
                    ctx.queue.write_buffer(&c.buffer, c.offset, &ours[..whole]);
                }
                if whole < ours.len() {
                    tail.clear();
                    tail.extend_from_slice(&ours[whole..]);
                    tail.resize(4, 0);
                    ctx.queue.write_buffer(&c.buffer, c.offset + whole as u64, &tail);
                }
            }
            Ok(())
        })?;
        Ok(t)
    }

    /// A tensor over an application's buffer, in place: the `shape` values of `dtype` (row-major, NCHW) from byte
    /// `offset` of `buffer`, which convt then reads and writes without copying (a result written into such a view
    /// lands in the application's buffer). `buffer` must belong to the context's device (a context made with
    /// [`GpuContext::from_wgpu`]), have the usages `STORAGE`, `COPY_SRC` and `COPY_DST`, and hold the tensor's
    /// bytes, rounded up to whole 4-byte words, from `offset`; `offset` must be a multiple of 256 (the largest
    /// storage-binding alignment adapters ask for), and the tensor must fit one storage binding at 4 bytes per
    /// value, as convt lays out tensors of every dtype ([`GpuContext::binding_limit`]). The view holds a reference
    /// to the buffer, not a copy.
    ///
    /// A layer's prepared weight is reused while convt has not written the weight ([`crate::GpuConvTranspose2d`]);
    /// writes the application makes to a view are not seen, so a view given to a layer as its weight must not be
    /// written from outside while the layer uses it.
    pub fn from_buffer(
        ctx: &GpuContext,
        buffer: &wgpu::Buffer,
        offset: u64,
        shape: &[usize],
        dtype: DType,
    ) -> Result<Self> {
        let numel = checked_numel(shape)?;
        let plane_elems = plane_layout(shape).1;
        let bytes = (numel as u64)
            .checked_mul(dtype.size() as u64)
            .ok_or(ConvtError::SizeOverflow { shape: shape.to_vec() })?
            .next_multiple_of(4);
        let need = STORAGE;
        if !buffer.usage().contains(need) {
            return Err(ConvtError::InvalidArgument(format!(
                "a tensor view needs a buffer with the usages {need:?}; this one has {:?}",
                buffer.usage()
            )));
        }
        if !offset.is_multiple_of(VIEW_ALIGNMENT) {
            return Err(ConvtError::InvalidArgument(format!(
                "a tensor view's offset must be a multiple of {VIEW_ALIGNMENT} bytes, got {offset}"
            )));
        }
        if offset.checked_add(bytes).is_none_or(|end| end > buffer.size()) {
            return Err(ConvtError::InvalidArgument(format!(
                "a tensor of size {shape:?} ({dtype}) needs {bytes} bytes from offset {offset}, but the buffer holds {}",
                buffer.size()
            )));
        }
        // One chunk, laid out as convt lays out a tensor of this shape (whose chunks hold the planes an f32 tensor
        // would, so that every dtype's chunks match), so the view meets tensors of its shape chunk for chunk.
        let (planes_per_row, _) = plane_layout(shape);
        let planes = numel.checked_div(plane_elems).unwrap_or(0);
        if planes > chunk_planes(ctx.binding_limit(), planes_per_row, plane_elems, shape)? {
            return Err(ConvtError::TooLargeForBinding {
                what: format!("a tensor view of size {shape:?} (at 4 bytes per value, as convt lays tensors out)"),
                bytes: numel as u64 * 4,
                limit: ctx.binding_limit(),
            });
        }
        let chunks = if planes == 0 {
            Vec::new()
        } else {
            let buffer = PooledBuffer { buffer: Some(buffer.clone()), pool: Weak::new(), reusable: false };
            vec![Chunk { buffer, offset, bytes, first_plane: 0, planes }]
        };
        Ok(Self {
            shape: shape.to_vec(),
            dtype,
            plane_elems,
            chunks,
            pool: Weak::new(),
            reserved: 0,
            version: VERSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed).into(),
        })
    }

    /// The buffer holding this tensor and the byte offset its values start at, for a tensor held in one storage
    /// binding (every tensor up to [`GpuContext::binding_limit`] bytes; `None` for a larger one, split over several
    /// buffers, and for an empty one): its values packed in its dtype, row-major (NCHW), rounded up to whole 4-byte
    /// words. An application's own passes can read (or write) it in place. The buffer returns to convt's pool when
    /// the tensor is dropped, so keep the tensor while the application uses it. A layer's weight changed this way
    /// is not seen by the weight the layer prepared from it: change a layer's weight through convt
    /// ([`GpuTensor::copy_to`], [`crate::GpuConvTranspose2d::sgd_step`]).
    pub fn buffer(&self) -> Option<(&wgpu::Buffer, u64)> {
        match self.chunks.as_slice() {
            [c] => Some((&c.buffer, c.offset)),
            _ => None,
        }
    }

    /// An uninitialised tensor. A half-precision tensor's chunks hold the same planes as an f32 tensor of its
    /// shape would (so that conversions go chunk to chunk), each rounded up to whole 4-byte words.
    pub(crate) fn empty_unpoisoned(ctx: &GpuContext, shape: &[usize], dtype: DType) -> Result<Self> {
        let (planes_per_row, plane_elems) = plane_layout(shape);
        let numel = checked_numel(shape)?;
        let planes = numel.checked_div(plane_elems).unwrap_or(0);
        let per_chunk = chunk_planes(ctx.binding_limit(), planes_per_row, plane_elems, shape)?;
        (numel as u64).checked_mul(4).ok_or(ConvtError::SizeOverflow { shape: shape.to_vec() })?;
        // The bytes of the chunks made below: `full` whole ones and the rest.
        let chunk_bytes = |n: usize| ((n * plane_elems * dtype.size()) as u64).next_multiple_of(4);
        let full = planes / per_chunk.max(1);
        let bytes = chunk_bytes(per_chunk) * full as u64 + chunk_bytes(planes - full * per_chunk.max(1));
        ctx.pool.reserve(bytes, ctx.memory_budget(), &|| format!("a tensor of size {shape:?}"))?;
        let reservation = Reservation { pool: &ctx.pool, bytes };
        let t = ctx.scoped(|| {
            let mut chunks = Vec::new();
            let mut first = 0;
            while first < planes {
                let n = per_chunk.min(planes - first);
                let buffer = ctx.pool.get(&ctx.device, chunk_bytes(n), STORAGE);
                chunks.push(Chunk { buffer, offset: 0, bytes: chunk_bytes(n), first_plane: first, planes: n });
                first += n;
            }
            Ok(Self {
                shape: shape.to_vec(),
                dtype,
                plane_elems,
                chunks,
                pool: ctx.pool.handle(),
                reserved: bytes,
                version: VERSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed).into(),
            })
        })?;
        // From here the tensor releases its reservation when dropped.
        std::mem::forget(reservation);
        Ok(t)
    }

    /// A number that changes whenever convt writes this tensor (every function that takes it as an output does),
    /// and that no other tensor ever had: what a prepared weight ([`crate::gpu::plan`]) was made from. Writes made
    /// outside convt (through [`GpuTensor::buffer`], or to the buffer under a view) do not change it: the documents
    /// of both say so.
    pub(crate) fn version(&self) -> u64 {
        self.version.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Records a write. Writers call it before encoding the write and again after submitting it: a weight prepared
    /// while the write was in between (on another thread) carries the version of the first call, which the second
    /// retires, so it is never reused.
    pub(crate) fn mark_written(&self) {
        let v = VERSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.version.store(v, std::sync::atomic::Ordering::Release);
    }

    /// Writes `value` (rounded to the tensor's dtype) into every element.
    pub fn fill(&self, ctx: &GpuContext, value: f32) -> Result<()> {
        self.mark_written();
        const PIECE: u64 = 1 << 24; // bytes per write: 16 MiB of host memory at most
        let largest = self.chunks.iter().map(|c| c.bytes).max().unwrap_or(0);
        let mut piece = Vec::new();
        self.dtype.encode(&vec![value; (PIECE.min(largest) as usize).div_ceil(self.dtype.size())], &mut piece);
        ctx.scoped(|| {
            for c in &self.chunks {
                let bytes = c.bytes;
                let mut done = 0;
                while done < bytes {
                    let n = PIECE.min(bytes - done);
                    ctx.queue.write_buffer(&c.buffer, c.offset + done, &piece[..n as usize]);
                    done += n;
                }
            }
            Ok(())
        })?;
        self.mark_written();
        Ok(())
    }

    /// Copies this tensor's values into `dst`, a tensor of the same shape and dtype, on the GPU.
    pub fn copy_to(&self, ctx: &GpuContext, dst: &GpuTensor) -> Result<()> {
        if self.shape != dst.shape {
            return Err(ConvtError::ShapeMismatch { expected: dst.shape.clone(), actual: self.shape.clone() });
        }
        dst.expect_dtype("the source of a copy", self.dtype)?;
        dst.mark_written();
        ctx.scoped(|| {
            let mut encoder = ctx.device.create_command_encoder(&Default::default());
            // Equal shapes have equal chunks on one context (views included: `from_buffer`).
            let planes = |t: &GpuTensor| t.chunks.iter().map(|c| c.planes).collect::<Vec<_>>();
            if planes(self) != planes(dst) {
                return Err(ConvtError::InvalidArgument(
                    "a copy between tensors laid out in different bindings (made on different contexts)".into(),
                ));
            }
            for (a, b) in self.chunks.iter().zip(&dst.chunks) {
                encoder.copy_buffer_to_buffer(&a.buffer, a.offset, &b.buffer, b.offset, a.bytes);
            }
            ctx.queue.submit([encoder.finish()]);
            Ok(())
        })?;
        dst.mark_written();
        Ok(())
    }

    /// This tensor's values in `dtype` (rounded to nearest even where it is narrower), in a new tensor, on the GPU:
    /// PyTorch's `.to(dtype)`, except that the result is always a new tensor (a copy where `dtype` is this tensor's
    /// own). An f32 master weight's f16 or bf16 copy for a mixed-precision step, say.
    pub fn to_dtype(&self, ctx: &GpuContext, dtype: DType) -> Result<GpuTensor> {
        let out = GpuTensor::empty_with(ctx, &self.shape, dtype)?;
        out.mark_written();
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("convt dtype conversion"),
                timestamp_writes: None,
            });
            crate::gpu::convert::encode(ctx, self, &out, &mut pass)?;
        }
        ctx.scoped(|| {
            ctx.queue.submit([encoder.finish()]);
            Ok(())
        })?;
        out.mark_written();
        Ok(out)
    }

    /// Copies the tensor back to the host (in its dtype) through a MAP_READ staging buffer per chunk.
    pub fn download(&self, ctx: &GpuContext) -> Result<Tensor> {
        let mut data = crate::tensor::filled_vec(self.numel(), 0f32, || format!("a tensor of size {:?}", self.shape))?;
        for c in &self.chunks {
            let dst = &mut data[c.first_plane * self.plane_elems..][..c.planes * self.plane_elems];
            read_back(ctx, c.range(), |view| self.dtype.decode(&view[..dst.len() * self.dtype.size()], dst))?;
        }
        Tensor::of_dtype(self.shape.clone(), data, self.dtype)
    }

    /// Copies the tensor back to the host as its elements' little-endian bytes in row-major order (the bytes
    /// [`GpuTensor::from_bytes`] takes), with no f32 values made for a half-precision tensor.
    pub fn download_bytes(&self, ctx: &GpuContext) -> Result<Vec<u8>> {
        let size = self.dtype.size();
        let what = || format!("a tensor of size {:?}", self.shape);
        let mut data = crate::tensor::filled_vec(self.numel() * size, 0u8, what)?;
        for c in &self.chunks {
            let dst = &mut data[c.first_plane * self.plane_elems * size..][..c.planes * self.plane_elems * size];
            read_back(ctx, c.range(), |view| dst.copy_from_slice(&view[..dst.len()]))?;
        }
        Ok(data)
    }

    /// The dimensions, outermost first.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// The dtype the values are stored in on the GPU.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// An error unless this tensor is of dtype `expected` (`what` names it).
    pub(crate) fn expect_dtype(&self, what: &str, expected: DType) -> Result<()> {
        if self.dtype == expected {
            Ok(())
        } else {
            Err(ConvtError::DTypeMismatch { what: what.into(), expected, actual: self.dtype })
        }
    }
    /// The number of elements, the product of the dimensions.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    /// The runs of whole planes the tensor is stored in, one storage binding each: more than one only when the
    /// tensor is larger than one binding may hold.
    pub fn chunks(&self) -> &[Chunk] {
        &self.chunks
    }
    pub(crate) fn plane_elems(&self) -> usize {
        self.plane_elems
    }

    /// The single chunk of a tensor that must sit in one binding (weights, bias), or an error naming it.
    pub(crate) fn single_buffer(&self, what: &str, ctx: &GpuContext) -> Result<&Chunk> {
        match self.chunks.as_slice() {
            [c] => Ok(c),
            _ => Err(ConvtError::TooLargeForBinding {
                what: format!("{what} of size {:?}", self.shape),
                bytes: self.numel() as u64 * self.dtype.size() as u64,
                limit: ctx.binding_limit(),
            }),
        }
    }
}

/// Copies the first `bytes` of `buffer` into a pooled MAP_READ staging buffer, waits for the GPU, and hands the
/// mapped bytes to `read`.
pub(crate) fn read_back<T>(
    ctx: &GpuContext,
    (buffer, offset, bytes): (&wgpu::Buffer, u64, u64),
    read: impl FnOnce(&[u8]) -> T,
) -> Result<T> {
    let mut staging = ctx.scoped(|| {
        let staging = ctx.pool.get(&ctx.device, bytes, wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(buffer, offset, &staging, 0, bytes);
        ctx.queue.submit([encoder.finish()]);
        Ok(staging)
    })?;
    staging.reusable = false; // until it is unmapped again
    map_for_reading(ctx, &staging)?;
    let value = {
        let view = staging.get_mapped_range(..).map_err(|e| ConvtError::Gpu(format!("reading back a result: {e}")))?;
        read(&view)
    };
    staging.unmap();
    staging.reusable = true;
    Ok(value)
}

/// Maps a MAP_READ buffer whose copy has been submitted, waiting for the GPU (bounded by the context's timeout).
pub(crate) fn map_for_reading(ctx: &GpuContext, staging: &wgpu::Buffer) -> Result<()> {
    let (tx, rx) = futures_intrusive::channel::shared::oneshot_channel();
    staging.map_async(wgpu::MapMode::Read, .., move |r| {
        let _ = tx.send(r);
    });
    ctx.wait()?;
    match pollster::block_on(rx.receive()) {
        Some(Ok(())) => Ok(()),
        Some(Err(e)) => Err(ConvtError::Gpu(format!("reading back from the GPU: {e}"))),
        None => Err(ConvtError::Gpu("reading back from the GPU: the map request was dropped".into())),
    }
}

/// (planes per row, elements per plane) for a shape. For rank 3 and more a plane is the last two dimensions
/// and a row the third-last: `[N, C, H, W]` and `[C, H, W]` give `(C, H*W)`, a weight `[Cin, Cog, kH, kW]`
/// gives `(Cog, kH*kW)`. A tensor of rank 0 to 2 is one plane.
fn plane_layout(shape: &[usize]) -> (usize, usize) {
    match shape {
        [.., c, h, w] => (*c, h * w),
        _ => (1, shape.iter().product()),
    }
}

/// How many planes one chunk holds: whole rows (samples) when one fits, else as many planes as fit.
fn chunk_planes(limit: u64, planes_per_row: usize, plane_elems: usize, shape: &[usize]) -> Result<usize> {
    let plane_bytes = plane_elems as u64 * 4;
    if plane_bytes == 0 {
        return Ok(1);
    }
    if plane_bytes > limit {
        return Err(ConvtError::TooLargeForBinding {
            what: format!("one {plane_elems}-element plane of the tensor of size {shape:?}"),
            bytes: plane_bytes,
            limit,
        });
    }
    let row_bytes = plane_bytes * planes_per_row as u64;
    Ok(if row_bytes > 0 && row_bytes <= limit {
        (limit / row_bytes) as usize * planes_per_row
    } else {
        (limit / plane_bytes) as usize
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn the_idle_limit_grows_to_the_largest_calls_scratch() {
        // A call that held 6 GiB of scratch in two buffers: both wait for its next run, where a fixed 4 GiB limit
        // would free one every call; a call of 1 GiB after it (a backward after a forward, alternating) keeps room
        // for both. A staging buffer being mapped is never kept.
        let mut p = PoolInner::default();
        p.took(4 * GIB);
        p.took(2 * GIB);
        assert_eq!(p.idle_limit(), MAX_IDLE_BYTES);
        let st = STORAGE;
        p.call_held(vec![(4 * GIB, st), (2 * GIB, st)]);
        assert_eq!(p.idle_limit(), 6 * GIB, "the largest call's");
        p.call_held(vec![(2 * GIB, st), (4 * GIB, st)]);
        assert_eq!(p.idle_limit(), 6 * GIB, "the same call again: its buffers counted once");
        p.call_held(vec![(GIB, st), (2 * GIB, st)]);
        assert_eq!(p.idle_limit(), 7 * GIB, "two consecutive calls', the 2 GiB buffer both held counted once");
        p.call_held(vec![]);
        p.call_held(vec![(GIB, st)]);
        assert_eq!(p.idle_limit(), 7 * GIB, "the most two consecutive calls held");
        assert!(p.returned(4 * GIB, true));
        p.idle_bytes += 4 * GIB;
        assert!(p.returned(2 * GIB, true));
        p.idle_bytes += 2 * GIB;
        assert!(!p.returned(GIB, false));
        assert_eq!(p.live_bytes, 0);
        // A buffer beyond the limit is never kept.
        assert!(!p.returned(8 * GIB, true));
    }
}
