//! The direct (gather) kernel, `shaders/forward/direct.wgsl`: correct for every option, one invocation per output
//! pixel and block of output channels. See the shader's opening comment for the mapping, and
//! `shaders/forward/gather.wgsl` for the tap enumeration.

use crate::error::Result;
use crate::gpu::context::GpuContext;
use crate::gpu::forward::gather;
use crate::gpu::memory::GpuTensor;
use crate::gpu::wgsl::operands::Io;
use crate::params::ConvShape;

pub const SHADER_NAME: &str = "forward/direct.wgsl";
const TEMPLATE: &str = include_str!("../../../shaders/forward/direct.wgsl");

/// `shaders/forward/gather.wgsl` (what the gather kernels share) in front of `shaders/forward/direct.wgsl`, behind the
/// shape's constants, for tensors of `io`.
pub(crate) fn source(io: Io) -> String {
    gather::source(io, &[TEMPLATE])
}
const WORKGROUP_SIZE: u32 = 256;
/// Output channels per invocation (`OC_BLOCK` in the shader).
const OC_BLOCK: usize = 4;

/// The direct shader's override constants for one shape (its specialisation).
pub(crate) fn constants(shape: &ConvShape, has_bias: bool) -> Result<Vec<(&'static str, f64)>> {
    let mut c = gather::constants(shape, has_bias)?;
    c.push(("WORKGROUP_SIZE", WORKGROUP_SIZE as f64));
    Ok(c)
}

/// Encodes the direct kernel over every slice of the plan into `pass`; `output` has `shape`'s output size.
pub(crate) fn encode(
    ctx: &GpuContext,
    shape: &ConvShape,
    input: &GpuTensor,
    weight: &GpuTensor,
    bias: Option<&GpuTensor>,
    output: &GpuTensor,
    pass: &mut wgpu::ComputePass<'_>,
) -> Result<()> {
    let pixels = shape.out_hw[0] * shape.out_hw[1];
    let kernel = gather::Kernel {
        name: SHADER_NAME,
        source,
        constants: constants(shape, bias.is_some())?,
        block: OC_BLOCK,
        workgroups: |samples: usize, blocks: usize| (samples * blocks * pixels).div_ceil(WORKGROUP_SIZE as usize),
    };
    gather::encode(ctx, shape, kernel, [input, weight, output], bias, pass)
}

/// This kernel's shaders for validation (`gpu::shader_sources`): its one variant, and in it what the gather
/// kernels share and the shape's constants, which have no entry point of their own.
pub(crate) fn shader_variants() -> Vec<crate::gpu::ShaderVariant> {
    let files = [SHADER_NAME, gather::SHADER_NAME, crate::gpu::wgsl::SHAPE_SHADER_NAME];
    let mut v: Vec<crate::gpu::ShaderVariant> =
        files.into_iter().map(|file| (file, format!("{file} in {SHADER_NAME}"), source(Io::F32))).collect();
    v.extend(
        Io::variants().into_iter().skip(1).map(|io| (SHADER_NAME, format!("{SHADER_NAME} {}", io.key()), source(io))),
    );
    v
}
