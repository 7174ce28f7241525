//! The grad_bias kernel, `shaders/backward/grad_bias.wgsl`: a deterministic sum of grad_output per output channel, one
//! workgroup per channel and chunk of grad_output.

use crate::error::Result;
use crate::gpu::context::GpuContext;
use crate::gpu::kernel::{dispatch_buffers, grid};
use crate::gpu::memory::GpuTensor;
use crate::gpu::wgsl::operands::{declare, Access, Io};
use crate::gpu::wgsl::{self, with_shape_prelude};
use crate::params::ConvShape;

pub const SHADER_NAME: &str = "backward/grad_bias.wgsl";
/// `shaders/backward/grad_bias.wgsl` behind the shape's constants (it reads C_OUT, OUT_H and OUT_W).
const SHADER: &str = with_shape_prelude!("backward/grad_bias.wgsl");

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

/// Encodes the gradient of the bias given `grad_output` into `grad_bias` (`[Cout]`).
pub(crate) fn encode(
    ctx: &GpuContext,
    shape: &ConvShape,
    grad_output: &GpuTensor,
    grad_bias: &GpuTensor,
    pass: &mut wgpu::ComputePass<'_>,
) -> Result<()> {
    let accumulate = accumulates(grad_output);
    let gb = grad_bias.single_buffer("grad_bias", ctx)?;
    let io = Io::new(ctx, grad_output.dtype(), grad_bias.dtype());
    let module = ctx.module_with(&format!("{SHADER_NAME} {}", io.key()), || source(io))?;
    let consts: Vec<(&str, f64)> =
        [("C_OUT", shape.out_channels), ("OUT_H", shape.out_hw[0]), ("OUT_W", shape.out_hw[1])]
            .map(|(k, v)| (k, v as f64))
            .to_vec();
    let key = format!("grad_bias {} {:?} {:?}", io.key(), ctx.options().shader_checks, consts);
    let pipeline = ctx.pipeline(key, &module, &consts)?;
    let grid = grid(ctx, shape.out_channels);
    ctx.scoped(|| {
        for c in grad_output.chunks() {
            let u = ChunkUniform {
                first_plane: c.first_plane as u32,
                planes: c.planes as u32,
                accumulate: accumulate as u32,
                dispatch_width: grid.0,
                one: 1.0,
                _pad: [0; 3],
            };
            dispatch_buffers(ctx, pass, &pipeline, bytemuck::bytes_of(&u), &[&c, gb], grid);
        }
        Ok(())
    })
}

/// This kernel's shader for validation (`gpu::shader_sources`).
pub(crate) fn shader_variants() -> Vec<crate::gpu::ShaderVariant> {
    Io::variants().into_iter().map(|io| (SHADER_NAME, format!("{SHADER_NAME} {}", io.key()), source(io))).collect()
}
