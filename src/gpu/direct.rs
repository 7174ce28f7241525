//! The direct (gather) kernel, `shaders/direct.wgsl`: correct for every option, one invocation per output
//! pixel and block of output channels. See the shader's opening comment for the tap enumeration.

use crate::error::Result;
use crate::gpu::buffers::GpuTensor;
use crate::gpu::context::GpuContext;
use crate::gpu::kernel::{
    channel_blocks, check_index_range, dispatch, gcd, grid, mod_inverse, shape_constants, Operands,
};
use crate::gpu::plan::{plan, Slice};
use crate::params::ConvShape;

pub const SHADER_NAME: &str = "direct.wgsl";
/// `shaders/gather.wgsl` (what the gather kernels share) in front of `shaders/direct.wgsl`.
pub const SHADER: &str = concat!(include_str!("../../shaders/gather.wgsl"), include_str!("../../shaders/direct.wgsl"));
pub const GATHER_SHADER_NAME: &str = "gather.wgsl";
/// What the gather kernels share: the shape constants, the Slice uniform, the bindings, the tap enumeration.
pub(crate) const GATHER_SHADER: &str = include_str!("../../shaders/gather.wgsl");
const WORKGROUP_SIZE: u32 = 256;
/// Output channels per invocation (`OC_BLOCK` in the shader).
const OC_BLOCK: usize = 4;

/// The uniform block `Slice` of the gather shaders (shaders/direct.wgsl, shaders/rows.wgsl), field for field.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct SliceUniform {
    n_count: u32,
    in_offset: u32,
    out_offset: u32,
    out_first_channel: u32,
    ic_begin: u32,
    ic_end: u32,
    block_begin: u32,
    block_count: u32,
    oc_begin: u32,
    oc_end: u32,
    accumulate: u32,
    dispatch_width: u32,
}

/// The override constants of the gather kernels (this one and [`crate::gpu::rows`]) for one shape: its sizes and
/// what `axis_taps` (shaders/gather.wgsl) needs.
pub(crate) fn gather_constants(shape: &ConvShape, has_bias: bool) -> Result<Vec<(&'static str, f64)>> {
    check_index_range(shape)?;
    let axis = |a: usize| {
        let g = gcd(shape.stride[a], shape.dilation[a]);
        (g, mod_inverse(shape.dilation[a] / g, shape.stride[a] / g))
    };
    let ((g_h, inv_h), (g_w, inv_w)) = (axis(0), axis(1));
    let mut c = shape_constants(shape, has_bias);
    c.extend(
        [
            ("P_H", shape.padding[0]),
            ("P_W", shape.padding[1]),
            ("D_H", shape.dilation[0]),
            ("D_W", shape.dilation[1]),
            ("G_H", g_h),
            ("G_W", g_w),
            ("INV_H", inv_h),
            ("INV_W", inv_w),
        ]
        .into_iter()
        .map(|(k, v)| (k, v as f64)),
    );
    Ok(c)
}

/// The direct shader's override constants for one shape (its specialisation).
pub(crate) fn constants(shape: &ConvShape, has_bias: bool) -> Result<Vec<(&'static str, f64)>> {
    let mut c = gather_constants(shape, has_bias)?;
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
    let module = ctx.module(SHADER_NAME, SHADER)?;
    let consts = constants(shape, bias.is_some())?;
    let key = format!("direct {:?} {:?}", ctx.options().shader_checks, consts);
    let pipeline = ctx.pipeline(key, &module, &consts)?;
    let pixels = shape.out_hw[0] * shape.out_hw[1];
    let workgroups = |samples: usize, blocks: usize| (samples * blocks * pixels).div_ceil(WORKGROUP_SIZE as usize);
    encode_slices(ctx, shape, &pipeline, OC_BLOCK, workgroups, [input, weight, output], bias, pass)
}

/// Dispatches a gather kernel's `pipeline` (the `Slice` uniform of shaders/direct.wgsl and shaders/rows.wgsl) over
/// every slice of the plan, with blocks of `block` output channels and `workgroups(samples, blocks)` workgroups
/// per slice.
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode_slices(
    ctx: &GpuContext,
    shape: &ConvShape,
    pipeline: &wgpu::ComputePipeline,
    block: usize,
    workgroups: impl Fn(usize, usize) -> usize,
    [input, weight, output]: [&GpuTensor; 3],
    bias: Option<&GpuTensor>,
    pass: &mut wgpu::ComputePass<'_>,
) -> Result<()> {
    let slices: Vec<Slice> = plan(shape, input, output);
    if slices.is_empty() {
        return Ok(());
    }
    let ops = Operands::new(ctx, weight.single_buffer("weight", ctx)?, bias)?;
    ctx.scoped(|| {
        for s in &slices {
            let (b0, b1) = channel_blocks(shape.out_per_group(), block, &s.oc);
            let grid = grid(ctx, workgroups(s.samples.len(), b1 - b0));
            let u = SliceUniform {
                n_count: s.samples.len() as u32,
                in_offset: s.in_offset as u32,
                out_offset: s.out_offset as u32,
                out_first_channel: s.out_first_channel as u32,
                ic_begin: s.ic.start as u32,
                ic_end: s.ic.end as u32,
                block_begin: b0 as u32,
                block_count: (b1 - b0) as u32,
                oc_begin: s.oc.start as u32,
                oc_end: s.oc.end as u32,
                accumulate: s.accumulate as u32,
                dispatch_width: grid.0,
            };
            let input = &input.chunks()[s.in_chunk].buffer;
            let out = &output.chunks()[s.out_chunk].buffer;
            dispatch(ctx, pass, pipeline, bytemuck::bytes_of(&u), input, &ops, out, grid, 1);
        }
        Ok(())
    })
}
