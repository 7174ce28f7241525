//! The adapter's ceilings, measured through wgpu with GPU timestamps: the fp32 FMA rate
//! (`shaders/ceiling_fma.wgsl`), the copy bandwidth (`shaders/ceiling_copy.wgsl`) and, where the adapter has
//! f16 cooperative matrices, the tensor cores' rate with and without loads from workgroup memory
//! (`shaders/ceiling_coop.wgsl`). The benchmark reports each kernel's time against the first two; the last two
//! say how far precision `fast` could go through wgpu on this adapter.

use crate::error::Result;
use crate::gpu::context::GpuContext;
use crate::gpu::memory::STORAGE;
use crate::gpu::timing::GpuTimer;

pub const FMA_SHADER: (&str, &str) = ("ceiling_fma.wgsl", include_str!("../../shaders/ceiling_fma.wgsl"));
pub const COPY_SHADER: (&str, &str) = ("ceiling_copy.wgsl", include_str!("../../shaders/ceiling_copy.wgsl"));
pub const COOP_SHADER: (&str, &str) = ("ceiling_coop.wgsl", include_str!("../../shaders/ceiling_coop.wgsl"));

#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Ceilings {
    /// Useful fp32 FLOP per second (2 per FMA), in TFLOP/s.
    pub fma_tflops: f64,
    /// Bytes read plus bytes written per second, in GB/s.
    pub copy_gbs: f64,
    /// Useful f16 FLOP per second of 16x16x16 cooperative-matrix products with f32 accumulators, operands
    /// held in registers, in TFLOP/s (None: the adapter has no f16 cooperative matrices).
    pub coop_tflops: Option<f64>,
    /// The same products with every step's operands loaded from workgroup memory first, as a GEMM's K step
    /// does: what a kernel staging its tiles there can reach at best.
    pub coop_with_loads_tflops: Option<f64>,
}

const WORKGROUP_SIZE: u32 = 256;
const FMA_ITERATIONS: u32 = 2048;
/// Rounds of 16 products per subgroup in `ceiling_coop.wgsl`, and its workgroups (of four subgroups).
const COOP_ITERATIONS: u32 = 1024;
const COOP_WORKGROUPS: u32 = 4096;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Times the dispatch of `pipeline` over `groups` workgroups, with `buffers` bound at bindings 0, 1, ...,
/// `runs` times after `warmup` untimed runs; returns the median in ms.
fn time_passes(
    ctx: &GpuContext,
    pipeline: &wgpu::ComputePipeline,
    buffers: &[&wgpu::Buffer],
    groups: (u32, u32),
    warmup: u32,
    runs: u32,
) -> Result<f64> {
    let bind_group = ctx.scoped(|| {
        let entries: Vec<wgpu::BindGroupEntry<'_>> = buffers
            .iter()
            .zip(0..)
            .map(|(b, i)| wgpu::BindGroupEntry { binding: i, resource: b.as_entire_binding() })
            .collect();
        Ok(ctx.device().create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        }))
    })?;
    let timer = GpuTimer::new(ctx, runs)?;
    for i in 0..warmup + runs {
        let mut encoder = ctx.device().create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: None,
                timestamp_writes: (i >= warmup).then(|| timer.pass_writes(i - warmup)),
            });
            pass.set_pipeline(pipeline);
            pass.set_bind_group(0, &bind_group, &[]);
            pass.dispatch_workgroups(groups.0, groups.1, 1);
        }
        ctx.queue().submit([encoder.finish()]);
    }
    ctx.wait()?;
    Ok(median(timer.read_ms(ctx, runs)?))
}

/// Measures both ceilings (`copy_bytes`: size of the copied buffer; 1 GiB fills a datacenter GPU).
pub fn measure(ctx: &GpuContext, copy_bytes: u64, warmup: u32, runs: u32) -> Result<Ceilings> {
    let max_dim = ctx.device().limits().max_compute_workgroups_per_dimension;
    let grid = |groups: u64| -> (u32, u32) {
        let w = groups.min(max_dim as u64) as u32;
        (w, groups.div_ceil(w as u64) as u32)
    };

    // FMA: enough invocations to fill any GPU several times over.
    let fma_groups = grid(16 * 1024);
    let invocations = fma_groups.0 as u64 * fma_groups.1 as u64 * WORKGROUP_SIZE as u64;
    let sink = ctx.pool.get(ctx.device(), invocations * 16, STORAGE);
    let module = ctx.module(FMA_SHADER.0, FMA_SHADER.1)?;
    let consts = [("ITERATIONS", FMA_ITERATIONS as f64), ("WORKGROUP_SIZE", WORKGROUP_SIZE as f64)];
    let pipeline = ctx.pipeline(format!("fma {consts:?}"), &module, &consts)?;
    let ms = time_passes(ctx, &pipeline, &[&sink], fma_groups, warmup, runs)?;
    let flop = invocations as f64 * FMA_ITERATIONS as f64 * 64.0;
    let fma_tflops = flop / (ms * 1e-3) / 1e12;

    // Copy: two buffers of copy_bytes (capped by the binding limit).
    let bytes = copy_bytes.min(ctx.binding_limit()) / 16 * 16;
    let src = ctx.pool.get(ctx.device(), bytes, STORAGE);
    let dst = ctx.pool.get(ctx.device(), bytes, STORAGE);
    let module = ctx.module(COPY_SHADER.0, COPY_SHADER.1)?;
    let consts = [("WORKGROUP_SIZE", WORKGROUP_SIZE as f64)];
    let pipeline = ctx.pipeline(format!("copy {consts:?}"), &module, &consts)?;
    let ms =
        time_passes(ctx, &pipeline, &[&src, &dst], grid((bytes / 16).div_ceil(WORKGROUP_SIZE as u64)), warmup, runs)?;
    let copy_gbs = 2.0 * bytes as f64 / (ms * 1e-3) / 1e9;

    let (coop_tflops, coop_with_loads_tflops) = if ctx.has_coop_f16() {
        (Some(coop_rate(ctx, false, warmup, runs)?), Some(coop_rate(ctx, true, warmup, runs)?))
    } else {
        (None, None)
    };
    Ok(Ceilings { fma_tflops, copy_gbs, coop_tflops, coop_with_loads_tflops })
}

/// The cooperative-matrix product rate in TFLOP/s (`loads_in_loop`: operands reloaded from workgroup memory
/// every step).
fn coop_rate(ctx: &GpuContext, loads_in_loop: bool, warmup: u32, runs: u32) -> Result<f64> {
    // Each subgroup stores its 16 accumulators (16 x 16 f32 each) into one of 64 slots.
    let sink = ctx.pool.get(ctx.device(), 64 * 16 * 256 * 4, STORAGE);
    // Finite values to start from (the shader maps them into [0.5, 1]: zeros would flatter the tensor cores).
    let values: Vec<f32> = (0..64 * 16 * 256).map(|i| 1.0 + (i % 97) as f32 / 97.0).collect();
    ctx.queue().write_buffer(&sink, 0, bytemuck::cast_slice(&values));
    let module = ctx.module(COOP_SHADER.0, COOP_SHADER.1)?;
    let consts = [("ITERATIONS", COOP_ITERATIONS as f64), ("LOADS_IN_LOOP", if loads_in_loop { 1.0 } else { 0.0 })];
    let pipeline = ctx.pipeline(format!("coop {consts:?}"), &module, &consts)?;
    let ms = time_passes(ctx, &pipeline, &[&sink], (COOP_WORKGROUPS, 1), warmup, runs)?;
    // Four subgroups per workgroup, 16 products of 16 x 16 x 16 multiply-adds per round.
    let flop = COOP_WORKGROUPS as f64 * 4.0 * COOP_ITERATIONS as f64 * 16.0 * 2.0 * 4096.0;
    Ok(flop / (ms * 1e-3) / 1e12)
}
