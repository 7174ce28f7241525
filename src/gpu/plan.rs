//! Prepared weights: what a kernel makes of a weight before it computes (the GEMM's packed layout, the Winograd
//! kernel's transformed weight, the padded-NHWC kernel's packed f16 weight and scale), made once and reused by
//! every call of a layer while its weight does not change, as a prepared plan per (weight, shape, precision)
//! does. [`GpuConvTranspose2d`](crate::GpuConvTranspose2d) keeps them in a [`PreparedWeights`], and its backward's
//! flipped weight in a [`PreparedBackward`]; the functional calls prepare the weight on every call, in the same pass
//! as the kernel.

use std::sync::{Arc, Mutex};

use crate::error::{ConvtError, Result};
use crate::gpu::context::{lock, GpuContext};
use crate::gpu::memory::{GpuTensor, PooledBuffer, Reserved};
use crate::gpu::Strategy;
use crate::params::ConvShape;

/// A weight as one kernel reads it, its bytes counted against the context's memory budget while it lives.
pub(crate) struct PreparedWeight {
    pub buffer: PooledBuffer,
    /// For the f16 kernels, the operand maxima its preparation found (`gpu::absmax::encode_slots`'s buffer, the
    /// weight's largest finite magnitude in slot 1 and zeros elsewhere), which each call carries into slot 1 of
    /// its own maxima on the GPU.
    pub maxima: Option<wgpu::Buffer>,
    pub _reserved: Reserved,
}

impl PreparedWeight {
    /// The weight's operand maxima for an f16 kernel (`kernel` names it in the error): an error where the weight
    /// was prepared for an exact kernel.
    pub fn maxima(&self, kernel: &str) -> Result<&wgpu::Buffer> {
        self.maxima
            .as_ref()
            .ok_or_else(|| ConvtError::InvalidArgument(format!("{kernel}: a weight prepared without its scale")))
    }
}

/// Most prepared weights a layer keeps: one per kernel and input size it met, the least recently used dropped
/// first (a layer called with ever new input sizes keeps a bounded amount of memory).
const MAX_PREPARED: usize = 4;

/// A layer's prepared weights, each for the kernel and problem (batch aside) it was made for, from the weight's
/// values at [`GpuTensor::version`].
#[derive(Default)]
pub(crate) struct PreparedWeights {
    entries: Mutex<Vec<Entry>>,
}

struct Entry {
    strategy: Strategy,
    shape: ConvShape,
    version: u64,
    weight: Arc<PreparedWeight>,
}

impl PreparedWeights {
    /// `strategy`'s prepared weight for `shape` from `weight`'s current values: the kept one, or a new one (kept
    /// for the next call); `None` for a kernel that reads the weight as it is.
    pub fn get(
        &self,
        ctx: &GpuContext,
        strategy: Strategy,
        shape: &ConvShape,
        weight: &GpuTensor,
    ) -> Result<Option<Arc<PreparedWeight>>> {
        let problem = ConvShape { batch: 0, ..*shape };
        let version = weight.version();
        let mut entries = lock(&self.entries);
        entries.retain(|e| e.version == version);
        if let Some(i) = entries.iter().position(|e| e.strategy == strategy && e.shape == problem) {
            let e = entries.remove(i);
            let weight = e.weight.clone();
            entries.push(e);
            return Ok(Some(weight));
        }
        let Some(prepared) = strategy.prepare_weight(ctx, shape, weight)? else { return Ok(None) };
        let prepared = Arc::new(prepared);
        if entries.len() >= MAX_PREPARED {
            entries.remove(0);
        }
        entries.push(Entry { strategy, shape: problem, version, weight: prepared.clone() });
        Ok(Some(prepared))
    }
}

/// What a layer's backward keeps while its weight does not change: the flipped, channel-swapped weight that
/// grad_input's transposed-convolution and sampled-correlation forms read
/// (`shaders/backward/grad_input_weights.wgsl`), and that weight as their kernel prepares it (in a
/// [`PreparedWeights`] of its own, invalidated by the flipped weight's version). A training loop then flips and
/// packs the weight once per weight version, however many backward calls it makes with it (gradient accumulation
/// over several batches, say), in submissions of their own ahead of the backward's; the functional backward flips
/// and packs in its own pass on every call.
#[derive(Default)]
pub(crate) struct PreparedBackward {
    flipped: Mutex<Option<Flipped>>,
    prepared: PreparedWeights,
}

/// A flipped weight, from the weight's values at `version`, for `problem` (the convolution's shape, batch aside).
struct Flipped {
    version: u64,
    problem: ConvShape,
    tensor: Arc<GpuTensor>,
}

impl PreparedBackward {
    /// grad_input's flipped weight for `shape` from `weight`'s current values (made by `flip` where the kept one is
    /// stale), and that weight as `strategy` prepares it for `problem` (grad_input's convolution), where it does.
    pub fn get(
        &self,
        ctx: &GpuContext,
        shape: &ConvShape,
        weight: &GpuTensor,
        strategy: Strategy,
        problem: &ConvShape,
        flip: impl FnOnce() -> Result<GpuTensor>,
    ) -> Result<(Arc<GpuTensor>, Option<Arc<PreparedWeight>>)> {
        let key = ConvShape { batch: 0, ..*shape };
        let version = weight.version();
        let flipped = {
            let mut kept = lock(&self.flipped);
            match kept.as_ref() {
                Some(f) if f.version == version && f.problem == key => f.tensor.clone(),
                _ => {
                    let tensor = Arc::new(flip()?);
                    *kept = Some(Flipped { version, problem: key, tensor: tensor.clone() });
                    tensor
                }
            }
        };
        let prepared = self.prepared.get(ctx, strategy, problem, &flipped)?;
        Ok((flipped, prepared))
    }
}
