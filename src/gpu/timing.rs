//! GPU timestamps around compute passes, for the benchmark: each timed call gets a slot (a begin and an end
//! query), read back together at the end in milliseconds.

use crate::error::{ConvtError, Result};
use crate::gpu::context::GpuContext;
use crate::gpu::memory::{map_for_reading, plain_buffer};

/// GPU timestamp queries for `capacity` compute passes ([`Run::timer`](crate::Run::timer),
/// [`BackwardRun::timer`](crate::BackwardRun::timer)): each slot holds the begin and end of one pass, and
/// [`GpuTimer::read_ms`] turns them into milliseconds. Needs `wgpu::Features::TIMESTAMP_QUERY` on the context's device.
pub struct GpuTimer {
    queries: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    capacity: u32,
}

impl std::fmt::Debug for GpuTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuTimer").field("capacity", &self.capacity).finish_non_exhaustive()
    }
}

impl GpuTimer {
    /// A timer for `capacity` timed passes. Needs `Features::TIMESTAMP_QUERY` on the adapter.
    pub fn new(ctx: &GpuContext, capacity: u32) -> Result<Self> {
        if !ctx.device().features().contains(wgpu::Features::TIMESTAMP_QUERY) {
            return Err(ConvtError::Gpu(format!(
                "adapter {} has no timestamp queries (TIMESTAMP_QUERY), so GPU times cannot be measured",
                ctx.adapter_info().name
            )));
        }
        ctx.scoped(|| {
            let queries = ctx.device().create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("convt timer"),
                ty: wgpu::QueryType::Timestamp,
                count: 2 * capacity,
            });
            let usage = wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC;
            let resolve = plain_buffer(ctx.device(), "convt timer resolve", 16 * capacity as u64, usage);
            Ok(Self { queries, resolve, capacity })
        })
    }

    /// The timestamp writes that time one compute pass into `slot`.
    pub fn pass_writes(&self, slot: u32) -> wgpu::ComputePassTimestampWrites<'_> {
        wgpu::ComputePassTimestampWrites {
            query_set: &self.queries,
            beginning_of_pass_write_index: Some(2 * slot),
            end_of_pass_write_index: Some(2 * slot + 1),
        }
    }

    /// Submits a marker that writes the GPU's time into `slot`: its begin (`end` false) or its end (`end` true).
    /// A begin before a sequence of calls and an end after them time the whole sequence, several submissions and
    /// the gaps between them included (as CUDA events around them would): a marker is an empty compute pass
    /// that writes one timestamp, in a submission of its own.
    pub fn mark(&self, ctx: &GpuContext, slot: u32, end: bool) -> Result<()> {
        let index = Some(2 * slot + u32::from(end));
        let writes = wgpu::ComputePassTimestampWrites {
            query_set: &self.queries,
            beginning_of_pass_write_index: index.filter(|_| !end),
            end_of_pass_write_index: index.filter(|_| end),
        };
        ctx.scoped(|| {
            let mut encoder = ctx.device().create_command_encoder(&Default::default());
            drop(encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("convt timer mark"),
                timestamp_writes: Some(writes),
            }));
            ctx.queue().submit([encoder.finish()]);
            Ok(())
        })
    }

    /// The number of slots, numbered from 0.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Milliseconds between begin and end of the first `slots` slots (all submitted work must be finished).
    pub fn read_ms(&self, ctx: &GpuContext, slots: u32) -> Result<Vec<f64>> {
        read_intervals(ctx, &self.queries, &self.resolve, slots)
    }
}

/// Milliseconds between the two timestamps of each of the first `pairs` query pairs of `queries` (queries 2i and
/// 2i + 1), resolved through `resolve` (room for them all; all submitted work must be finished).
pub(crate) fn read_intervals(
    ctx: &GpuContext,
    queries: &wgpu::QuerySet,
    resolve: &wgpu::Buffer,
    pairs: u32,
) -> Result<Vec<f64>> {
    let bytes = 16 * pairs as u64;
    let staging = ctx.scoped(|| {
        let usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
        let staging = plain_buffer(ctx.device(), "convt timestamps read", bytes.max(16), usage);
        let mut encoder = ctx.device().create_command_encoder(&Default::default());
        encoder.resolve_query_set(queries, 0..2 * pairs, resolve, 0);
        encoder.copy_buffer_to_buffer(resolve, 0, &staging, 0, bytes);
        ctx.queue().submit([encoder.finish()]);
        Ok(staging)
    })?;
    map_for_reading(ctx, &staging)?;
    let period_ns = ctx.queue().get_timestamp_period() as f64;
    let view = staging.get_mapped_range(..).map_err(|e| ConvtError::Gpu(e.to_string()))?;
    let ticks: &[u64] = bytemuck::cast_slice(&view);
    Ok(ticks[..2 * pairs as usize].chunks(2).map(|t| t[1].wrapping_sub(t[0]) as f64 * period_ns / 1e6).collect())
}
