//! The adapter's ceilings, measured through wgpu with GPU timestamps: the fp32 FMA rate
//! (`src/bin/convt/shaders/ceiling_fma.wgsl`), the copy bandwidth (`src/bin/convt/shaders/ceiling_copy.wgsl`)
//! and, where the adapter has f16 cooperative matrices, the tensor cores' rate with and without loads from
//! workgroup memory (`src/bin/convt/shaders/ceiling_coop.wgsl`). The benchmark reports each kernel's time against
//! the first two; the last two say how far precision `fast` could go through wgpu on this adapter. Beside them, a
//! yardstick: a plain f16 GEMM (`GEMM_SIZE` cubed, f32 accumulation) through the library's own tensor-core kernel,
//! the padded-NHWC one, whose 1 x 1 convolution is exactly that GEMM; its main dispatch alone is timed, with
//! every operand loaded from storage as in a convolution. Against the products-only ceiling it says how much of a
//! convolution kernel's distance to the hardware is the GEMM core's, and how much the convolution's around it.
//!
//! Only `convt bench --ceilings` measures them, so they are part of the tool, not of the library: the modules,
//! pipelines and buffers are made here with plain wgpu calls on the context's device, as the library makes its
//! own (the context's shader checks, workgroup memory not zeroed, storage buffers).

use std::time::Duration;

use convt::gpu::{select, GpuTimer, ShaderChecks, Strategy};
use convt::{ConvTranspose2dOptions, ConvtError, GpuContext, Precision, Result};

use crate::bench::median;

const FMA_SHADER: (&str, &str) = ("ceiling_fma.wgsl", include_str!("shaders/ceiling_fma.wgsl"));
const COPY_SHADER: (&str, &str) = ("ceiling_copy.wgsl", include_str!("shaders/ceiling_copy.wgsl"));
const COOP_SHADER: (&str, &str) = ("ceiling_coop.wgsl", include_str!("shaders/ceiling_coop.wgsl"));
const GEMM_SHADER: (&str, &str) = ("ceiling_gemm.wgsl", include_str!("shaders/ceiling_gemm.wgsl"));

/// The usage of the library's storage buffers (`convt::gpu::memory`'s pool).
const STORAGE: wgpu::BufferUsages =
    wgpu::BufferUsages::STORAGE.union(wgpu::BufferUsages::COPY_DST).union(wgpu::BufferUsages::COPY_SRC);

#[derive(Debug, Clone, serde::Serialize)]
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
    /// The yardstick's rate: useful TFLOP/s of the f16 GEMM through the tensor-core kernel.
    pub gemm_tflops: Option<f64>,
    /// The kernel (tile) that ran it.
    pub gemm_kernel: Option<String>,
    /// The second yardstick's rates: the same GEMM with both operands staged in workgroup memory
    /// (`src/bin/convt/shaders/ceiling_gemm.wgsl`), its workgroups in plain row order, then grouped (those running
    /// at once share A and B in L2), then with K stages of 64 instead of 32, then (stages of 32) without its loads
    /// from storage, then without its copy into workgroup memory too (what bounds it).
    pub gemm_staged_tflops: Option<[f64; 5]>,
    /// The second yardstick (grouped) at each of [`GEMM_PIPELINES`]: how many K stages it keeps in flight.
    pub gemm_pipelined: Option<Vec<PipelinedGemm>>,
}

/// One pipeline of the second yardstick (`ceiling_gemm.wgsl`'s overrides) and its rate.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PipelinedGemm {
    #[serde(flatten)]
    pub pipeline: Pipeline,
    /// Useful TFLOP/s.
    pub tflops: f64,
}

/// The pipeline overrides of `ceiling_gemm.wgsl`.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Pipeline {
    /// K per stage.
    pub bk: u32,
    /// Stage buffers in workgroup memory (1: two barriers a stage; 2: the next stage copied during this one's
    /// products, one barrier).
    pub ring: u32,
    /// Stages of loads from storage in flight in registers.
    pub ahead: u32,
}

const fn pipe(bk: u32, ring: u32, ahead: u32) -> Pipeline {
    Pipeline { bk, ring, ahead }
}

/// The second yardstick's first form: K stages of 32, one stage buffer, one stage of loads in flight.
const FIRST_PIPELINE: Pipeline = pipe(32, 1, 1);

/// The second yardstick's pipelines: its first form and K stages of 64, then more of K in flight in each of the
/// two ways, within a workgroup's 48 KiB of workgroup memory.
pub const GEMM_PIPELINES: [Pipeline; 8] = [
    FIRST_PIPELINE,
    pipe(64, 1, 1),
    pipe(32, 1, 2),
    pipe(64, 1, 2),
    pipe(32, 2, 1),
    pipe(32, 2, 2),
    pipe(16, 2, 1),
    pipe(16, 2, 2),
];

/// M, N and K of the yardstick's GEMM.
pub const GEMM_SIZE: usize = 8192;
/// Block rows a group of the second yardstick's workgroups sweeps together (`ceiling_gemm.wgsl`).
const GEMM_GROUP_M: u32 = 8;

const WORKGROUP_SIZE: u32 = 256;
const FMA_ITERATIONS: u32 = 2048;
/// Rounds of 16 products per subgroup in `ceiling_coop.wgsl`, and its workgroups (of four subgroups).
const COOP_ITERATIONS: u32 = 1024;
const COOP_WORKGROUPS: u32 = 4096;

/// Runs `f`, turning the wgpu errors it raises (validation, out of memory, internal) into a [`ConvtError`].
fn scoped<T>(ctx: &GpuContext, f: impl FnOnce() -> T) -> Result<T> {
    let device = ctx.device();
    let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let internal = device.push_error_scope(wgpu::ErrorFilter::Internal);
    let value = f();
    let errors = [internal.pop(), validation.pop(), oom.pop()].map(pollster::block_on);
    // The innermost scope's error first: it is the most specific.
    match errors.into_iter().flatten().next() {
        Some(e @ wgpu::Error::OutOfMemory { .. }) => Err(ConvtError::OutOfMemory(e.to_string())),
        Some(e) => Err(ConvtError::Gpu(e.to_string())),
        None => Ok(value),
    }
}

/// A storage buffer of `size` bytes.
fn storage(ctx: &GpuContext, size: u64) -> Result<wgpu::Buffer> {
    scoped(ctx, || {
        ctx.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some("convt ceiling"),
            size,
            usage: STORAGE,
            mapped_at_creation: false,
        })
    })
}

/// The compute pipeline of WGSL `source` (entry point `main`) specialised by its override `constants`, its
/// module made as the context's options say (runtime checks on or off).
fn make_pipeline(
    ctx: &GpuContext,
    name: &str,
    source: &str,
    constants: &[(&str, f64)],
) -> Result<wgpu::ComputePipeline> {
    let device = ctx.device();
    let desc = wgpu::ShaderModuleDescriptor { label: Some(name), source: wgpu::ShaderSource::Wgsl(source.into()) };
    let module = scoped(ctx, || match ctx.options().shader_checks {
        ShaderChecks::Checked => device.create_shader_module(desc),
        // SAFETY: only the ceiling shaders, whose every index stays within its buffer or workgroup array for the
        // sizes dispatched here (the copy checks arrayLength; the sinks hold what each invocation stores).
        ShaderChecks::Trusted => unsafe {
            device.create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked())
        },
    })
    .map_err(|e| ConvtError::Shader { name: name.into(), message: e.to_string() })?;
    let label = format!("{name} {constants:?}");
    scoped(ctx, || {
        device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(&label),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants,
                zero_initialize_workgroup_memory: false,
            },
            cache: None,
        })
    })
}

/// Blocks until the queue is idle (bounded by the configured timeout).
fn wait(ctx: &GpuContext) -> Result<()> {
    let timeout = ctx.options().timeout.unwrap_or(Duration::from_secs(600));
    ctx.device()
        .poll(wgpu::PollType::Wait { submission_index: None, timeout: Some(timeout) })
        .map_err(|e| ConvtError::Gpu(format!("waiting for the GPU: {e}")))?;
    Ok(())
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
    let bind_group = scoped(ctx, || {
        let entries: Vec<wgpu::BindGroupEntry<'_>> = buffers
            .iter()
            .zip(0..)
            .map(|(b, i)| wgpu::BindGroupEntry { binding: i, resource: b.as_entire_binding() })
            .collect();
        ctx.device().create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        })
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
    wait(ctx)?;
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
    let sink = storage(ctx, invocations * 16)?;
    let consts = [("ITERATIONS", FMA_ITERATIONS as f64), ("WORKGROUP_SIZE", WORKGROUP_SIZE as f64)];
    let pipeline = make_pipeline(ctx, FMA_SHADER.0, FMA_SHADER.1, &consts)?;
    let ms = time_passes(ctx, &pipeline, &[&sink], fma_groups, warmup, runs)?;
    let flop = invocations as f64 * FMA_ITERATIONS as f64 * 64.0;
    let fma_tflops = flop / (ms * 1e-3) / 1e12;

    // Copy: two buffers of copy_bytes (capped by the binding limit).
    let bytes = copy_bytes.min(ctx.binding_limit()) / 16 * 16;
    let src = storage(ctx, bytes)?;
    let dst = storage(ctx, bytes)?;
    let consts = [("WORKGROUP_SIZE", WORKGROUP_SIZE as f64)];
    let pipeline = make_pipeline(ctx, COPY_SHADER.0, COPY_SHADER.1, &consts)?;
    let ms =
        time_passes(ctx, &pipeline, &[&src, &dst], grid((bytes / 16).div_ceil(WORKGROUP_SIZE as u64)), warmup, runs)?;
    let copy_gbs = 2.0 * bytes as f64 / (ms * 1e-3) / 1e9;

    let (coop_tflops, coop_with_loads_tflops) = if ctx.has_coop_f16() {
        (Some(coop_rate(ctx, false, warmup, runs)?), Some(coop_rate(ctx, true, warmup, runs)?))
    } else {
        (None, None)
    };
    let (gemm_tflops, gemm_kernel) = match gemm_rate(ctx, warmup, runs)? {
        Some((t, k)) => (Some(t), Some(k)),
        None => (None, None),
    };
    let staged = |group_m, pipeline, global_loads, stage_copy| {
        gemm_staged_rate(ctx, group_m, pipeline, global_loads, stage_copy, warmup, runs)
    };
    let (gemm_staged_tflops, gemm_pipelined) = if ctx.has_coop_f16() {
        let staged_tflops = [
            staged(1, FIRST_PIPELINE, true, true)?,
            staged(GEMM_GROUP_M, FIRST_PIPELINE, true, true)?,
            staged(GEMM_GROUP_M, pipe(64, 1, 1), true, true)?,
            staged(GEMM_GROUP_M, FIRST_PIPELINE, false, true)?,
            staged(GEMM_GROUP_M, FIRST_PIPELINE, false, false)?,
        ];
        let mut pipelined = Vec::new();
        for pipeline in GEMM_PIPELINES {
            let tflops = staged(GEMM_GROUP_M, pipeline, true, true)?;
            pipelined.push(PipelinedGemm { pipeline, tflops });
        }
        (Some(staged_tflops), Some(pipelined))
    } else {
        (None, None)
    };
    Ok(Ceilings {
        fma_tflops,
        copy_gbs,
        coop_tflops,
        coop_with_loads_tflops,
        gemm_tflops,
        gemm_kernel,
        gemm_staged_tflops,
        gemm_pipelined,
    })
}

/// The second yardstick: the same f16 GEMM with both operands staged in workgroup memory (`ceiling_gemm.wgsl`),
/// with or without its loads from storage and its copy into workgroup memory, in TFLOP/s.
fn gemm_staged_rate(
    ctx: &GpuContext,
    group_m: u32,
    pipeline: Pipeline,
    global_loads: bool,
    stage_copy: bool,
    warmup: u32,
    runs: u32,
) -> Result<f64> {
    let n = GEMM_SIZE as u64;
    let a = f16_buffer(ctx, n * n)?;
    let b = f16_buffer(ctx, n * n)?;
    let c = storage(ctx, n * n * 4)?;
    let consts = [
        ("SIZE", n as f64),
        ("GLOBAL_LOADS", f64::from(u8::from(global_loads))),
        ("STAGE_COPY", f64::from(u8::from(stage_copy))),
        ("GROUP_M", f64::from(group_m)),
        ("BK", f64::from(pipeline.bk)),
        ("RING", f64::from(pipeline.ring)),
        ("AHEAD", f64::from(pipeline.ahead)),
    ];
    let pipeline = make_pipeline(ctx, GEMM_SHADER.0, GEMM_SHADER.1, &consts)?;
    let groups = ((n / 128) * (n / 128)) as u32;
    let max_dim = ctx.device().limits().max_compute_workgroups_per_dimension;
    if groups > max_dim.min(65535) {
        return Err(ConvtError::InvalidArgument(format!("the GEMM yardstick needs {groups} workgroups in one row")));
    }
    let ms = time_passes(ctx, &pipeline, &[&a, &b, &c], (groups, 1), warmup, runs)?;
    if global_loads && stage_copy {
        check_gemm(ctx, &c)?;
    }
    Ok(2.0 * (n as f64).powi(3) / (ms * 1e-3) / 1e12)
}

/// The value `f16_buffer` puts at element `i`, as f64.
fn pattern_value(i: u64) -> f64 {
    let v = half::f16::from_f32(0.5 + ((i % (1 << 20)) % 61) as f32 / 128.0);
    f64::from(v.to_f32())
}

/// Checks that the second yardstick computed C = A B (A[k][m], B[k][n] both `f16_buffer`'s pattern): a few rows of
/// C, read back, against float64 sums. A rate counts only if the kernel it timed computes the product.
fn check_gemm(ctx: &GpuContext, c: &wgpu::Buffer) -> Result<()> {
    let n = GEMM_SIZE as u64;
    let (rows, cols) = ([0u64, 1, 777, n - 1], 256u64);
    let readback = scoped(ctx, || {
        ctx.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some("convt ceiling check"),
            size: rows.len() as u64 * cols * 4,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    })?;
    let mut encoder = ctx.device().create_command_encoder(&Default::default());
    for (r, &m) in rows.iter().enumerate() {
        // Columns n - cols .. n of row m: the last block column, whose tiles run last.
        encoder.copy_buffer_to_buffer(c, (m * n + n - cols) * 4, &readback, r as u64 * cols * 4, cols * 4);
    }
    ctx.queue().submit([encoder.finish()]);
    let (tx, rx) = std::sync::mpsc::channel();
    readback.map_async(wgpu::MapMode::Read, .., move |r| {
        let _ = tx.send(r);
    });
    wait(ctx)?;
    rx.recv()
        .map_err(|e| ConvtError::Gpu(format!("reading the GEMM yardstick back: {e}")))?
        .map_err(|e| ConvtError::Gpu(format!("reading the GEMM yardstick back: {e}")))?;
    let view = readback.get_mapped_range(..).map_err(|e| ConvtError::Gpu(e.to_string()))?;
    let got: Vec<f32> = bytemuck::cast_slice(&view).to_vec();
    drop(view);
    readback.unmap();
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    for (r, &m) in rows.iter().enumerate() {
        for j in 0..cols {
            let col = n - cols + j;
            let want: f64 = (0..n).map(|k| pattern_value(k * n + m) * pattern_value(k * n + col)).sum();
            err += (f64::from(got[r * cols as usize + j as usize]) - want).powi(2);
            norm += want * want;
        }
    }
    let rel = (err / norm).sqrt();
    if rel.is_nan() || rel > 1e-4 {
        return Err(ConvtError::Gpu(format!(
            "the GEMM yardstick computed a wrong product (relative L2 error {rel:.1e})"
        )));
    }
    Ok(())
}

/// A storage buffer of `count` f16 values in [0.5, 1) (whole 16-byte units).
fn f16_buffer(ctx: &GpuContext, count: u64) -> Result<wgpu::Buffer> {
    let buffer = storage(ctx, (count * 2).next_multiple_of(16))?;
    let pattern: Vec<u16> =
        (0..count.min(1 << 20)).map(|i| half::f16::from_f32(0.5 + (i % 61) as f32 / 128.0).to_bits()).collect();
    let bytes: &[u8] = bytemuck::cast_slice(&pattern);
    let mut offset = 0;
    while offset < count * 2 {
        let len = (bytes.len() as u64).min(count * 2 - offset) / 4 * 4;
        if len == 0 {
            break;
        }
        ctx.queue().write_buffer(&buffer, offset, &bytes[..len as usize]);
        offset += len;
    }
    Ok(buffer)
}

/// The yardstick: the f16 GEMM of `GEMM_SIZE` cubed through the padded-NHWC tensor-core kernel, as the 1 x 1
/// convolution of a `[1, GEMM_SIZE, 64, GEMM_SIZE / 64]` input to `GEMM_SIZE` channels, the tile the selector
/// picks for it (`None` where the adapter has no cooperative matrices or the selector picks another kernel). The
/// kernel's main dispatch alone is timed, on operands already in its f16 layout (values in [0.5, 1)).
fn gemm_rate(ctx: &GpuContext, warmup: u32, runs: u32) -> Result<Option<(f64, String)>> {
    if !ctx.has_coop_f16() {
        return Ok(None);
    }
    let n = GEMM_SIZE;
    let options = ConvTranspose2dOptions::default().precision(Precision::Fast);
    let shape = options.resolve(&[1, n, 64, n / 64], &[n, n, 1, 1], None)?;
    let strategy = select::forward(ctx, &shape, false, Precision::Fast, convt::DType::F32);
    let Strategy::CoopNhwc(tile) = strategy else { return Ok(None) };
    let (source, consts) = strategy.shader(&shape, false)?;
    let constant = |name: &str| consts.iter().find(|c| c.0 == name).map_or(0, |c| c.1 as u64);
    let pipeline = make_pipeline(ctx, &strategy.name(), &source, &consts)?;
    // The operands as the kernel reads them: pixels PIXEL_STRIDE halves apart (one tile of pixels more, where
    // its last rows would read), weight rows W_ROW halves apart.
    let halves = |count: u64| f16_buffer(ctx, count);
    let xp = halves((n as u64 + tile.bm() as u64) * constant("PIXEL_STRIDE"))?;
    let wp = halves(n as u64 * constant("W_ROW"))?;
    let bias = storage(ctx, 256)?;
    let out = storage(ctx, (n * n * 4) as u64)?;
    // Both operands' largest magnitude 1.0 (shaders/common/scale.wgsl): the sums are unscaled by 2^-28.
    let maxima = storage(ctx, 8)?;
    ctx.queue().write_buffer(&maxima, 0, bytemuck::cast_slice(&[1f32.to_bits(); 2]));
    let n_tiles = n as u32 / tile.bn();
    let groups = (n as u32 / tile.bm()) * n_tiles;
    let max_dim = ctx.device().limits().max_compute_workgroups_per_dimension;
    let width = groups.min(max_dim);
    // The kernel's `Dispatch` block: m_begin, m_end, first_sample, dispatch_width, n_tiles, padding.
    let uniform = wgpu::util::DeviceExt::create_buffer_init(
        ctx.device(),
        &wgpu::util::BufferInitDescriptor {
            label: Some("convt yardstick"),
            contents: bytemuck::cast_slice(&[0, n as u32, 0, width, n_tiles, 0, 0, 0]),
            usage: wgpu::BufferUsages::UNIFORM,
        },
    );
    let ms = time_passes(
        ctx,
        &pipeline,
        &[&uniform, &xp, &wp, &bias, &out, &maxima],
        (width, groups.div_ceil(width)),
        warmup,
        runs,
    )?;
    let flop = 2.0 * (n as f64).powi(3);
    Ok(Some((flop / (ms * 1e-3) / 1e12, strategy.name())))
}

/// The cooperative-matrix product rate in TFLOP/s (`loads_in_loop`: operands reloaded from workgroup memory
/// every step).
fn coop_rate(ctx: &GpuContext, loads_in_loop: bool, warmup: u32, runs: u32) -> Result<f64> {
    // Each subgroup stores its 16 accumulators (16 x 16 f32 each) into one of 64 slots.
    let sink = storage(ctx, 64 * 16 * 256 * 4)?;
    // Finite values to start from (the shader maps them into [0.5, 1]: zeros would flatter the tensor cores).
    let values: Vec<f32> = (0..64 * 16 * 256).map(|i| 1.0 + (i % 97) as f32 / 97.0).collect();
    ctx.queue().write_buffer(&sink, 0, bytemuck::cast_slice(&values));
    let consts = [("ITERATIONS", COOP_ITERATIONS as f64), ("LOADS_IN_LOOP", if loads_in_loop { 1.0 } else { 0.0 })];
    let pipeline = make_pipeline(ctx, COOP_SHADER.0, COOP_SHADER.1, &consts)?;
    let ms = time_passes(ctx, &pipeline, &[&sink], (COOP_WORKGROUPS, 1), warmup, runs)?;
    // Four subgroups per workgroup, 16 products of 16 x 16 x 16 multiply-adds per round.
    let flop = COOP_WORKGROUPS as f64 * 4.0 * COOP_ITERATIONS as f64 * 16.0 * 2.0 * 4096.0;
    Ok(flop / (ms * 1e-3) / 1e12)
}
