//! The grad_bias kernel, `shaders/backward/grad_bias.wgsl`: a deterministic sum of grad_output per output channel,
//! [`splits`] workgroups per channel and chunk of grad_output (with more than one, a second dispatch adds each
//! channel's splits in order).

use crate::error::Result;
use crate::gpu::context::GpuContext;
use crate::gpu::kernel::{dispatch_buffers, grid};
use crate::gpu::memory::{GpuTensor, InFlight, STORAGE};
use crate::gpu::wgsl::operands::{declare, Access, Io};
use crate::gpu::wgsl::{self, with_shape_prelude};
use crate::params::ConvShape;

pub const SHADER_NAME: &str = "backward/grad_bias.wgsl";
/// `shaders/backward/grad_bias.wgsl` behind the shape's constants (it reads C_OUT, OUT_H and OUT_W; SPLITS and
/// COMBINE are its own).
const SHADER: &str = with_shape_prelude!("backward/grad_bias.wgsl");
/// Invocations in a workgroup (the shader's `WG`): the second dispatch runs one per channel.
const WORKGROUP_SIZE: usize = 256;

/// The shader for grad_output of `io`'s input dtype and grad_bias of its output dtype.
fn source(io: Io) -> String {
    let operands =
        declare(io.storage, &[io.operand("grad_out", 1, Access::Read), io.operand("grad_b", 2, Access::ReadWrite)]);
    wgsl::module(&[&operands, SHADER])
}

/// The uniform block `Chunk` of the shader, field for field.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ChunkUniform {
    first_plane: u32,
    planes: u32,
    accumulate: u32,
    dispatch_width: u32,
    /// 1.0: the shader multiplies by it so that the compiler cannot simplify its compensated sums away.
    one: f32,
    _pad: [u32; 3],
}

/// Whether `encode` adds to `grad_bias` (which must then start at zero): when grad_output has several chunks.
pub(crate) fn accumulates(grad_output: &GpuTensor) -> bool {
    grad_output.chunks().len() > 1
}

/// Workgroups a dispatch should have to keep a large GPU busy: 8 of 256 invocations per multiprocessor (the most
/// one holds at once) of a GPU of 128.
const TARGET_WORKGROUPS: usize = 1024;
/// The fewest values a split should sum: below that, splitting a channel saves less than the second dispatch
/// costs.
const MIN_SPLIT_VALUES: usize = 1 << 16;

/// Workgroups per channel for `shape` with grad_output in `chunks` (each split sums whole planes of one chunk):
/// one where the channels alone fill the GPU or the sums are short; else enough to reach `TARGET_WORKGROUPS`, at
/// most one per plane of a channel in the smallest chunk and one per `MIN_SPLIT_VALUES` values there.
fn splits(shape: &ConvShape, chunks: &[crate::gpu::memory::Chunk]) -> usize {
    let channels = shape.out_channels.max(1);
    let planes = chunks.iter().map(|c| c.planes / channels).min().unwrap_or(0);
    let values = planes.saturating_mul(shape.out_hw[0] * shape.out_hw[1]);
    TARGET_WORKGROUPS.div_ceil(channels).min(planes).min(values / MIN_SPLIT_VALUES).max(1)
}

/// Encodes the gradient of the bias given `grad_output` into `grad_bias` (`[Cout]`).
pub(crate) fn encode(
    ctx: &GpuContext,
    shape: &ConvShape,
    grad_output: &GpuTensor,
    grad_bias: &GpuTensor,
    pass: &mut wgpu::ComputePass<'_>,
    in_flight: &mut InFlight,
) -> Result<()> {
    let accumulate = accumulates(grad_output);
    let gb = grad_bias.single_buffer("grad_bias", ctx)?;
    let io = Io::new(ctx, grad_output.dtype(), grad_bias.dtype());
    let module = ctx.module_with(&format!("{SHADER_NAME} {}", io.key()), || source(io))?;
    let splits = splits(shape, grad_output.chunks());
    let pipeline = |combine: bool| {
        let consts: Vec<(&str, f64)> = [
            ("C_OUT", shape.out_channels as f64),
            ("OUT_H", shape.out_hw[0] as f64),
            ("OUT_W", shape.out_hw[1] as f64),
            ("SPLITS", splits as f64),
            ("COMBINE", combine as u8 as f64),
        ]
        .to_vec();
        let key = format!("grad_bias {} {:?} {:?}", io.key(), ctx.options().shader_checks, consts);
        ctx.pipeline(key, &module, &consts)
    };
    let sums = pipeline(false)?;
    let combine = if splits > 1 { Some(pipeline(true)?) } else { None };
    // Each split's (sum, error): two f32s per split of a channel (bound with one split too, as the shader declares
    // it, though then never written).
    let partial = in_flight.keep(ctx.pool.get(&ctx.device, (shape.out_channels.max(1) * splits * 8) as u64, STORAGE));
    let sums_grid = grid(ctx, shape.out_channels * splits);
    let combine_grid = grid(ctx, shape.out_channels.div_ceil(WORKGROUP_SIZE));
    ctx.scoped(|| {
        for c in grad_output.chunks() {
            let uniform = |g: (u32, u32)| ChunkUniform {
                first_plane: c.first_plane as u32,
                planes: c.planes as u32,
                accumulate: accumulate as u32,
                dispatch_width: g.0,
                one: 1.0,
                _pad: [0; 3],
            };
            let u = uniform(sums_grid);
            dispatch_buffers(ctx, pass, &sums, bytemuck::bytes_of(&u), &[&c, gb, &partial], sums_grid);
            if let Some(combine) = &combine {
                let u = uniform(combine_grid);
                dispatch_buffers(ctx, pass, combine, bytemuck::bytes_of(&u), &[&c, gb, &partial], combine_grid);
            }
        }
        Ok(())
    })
}

/// This kernel's shader for validation (`gpu::shader_sources`).
pub(crate) fn shader_variants() -> Vec<crate::gpu::ShaderVariant> {
    Io::variants().into_iter().map(|io| (SHADER_NAME, format!("{SHADER_NAME} {}", io.key()), source(io))).collect()
}
