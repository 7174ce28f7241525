//! The grad_weight kernel, `shaders/grad_weight.wgsl`: a deterministic reduction over batch and space, one
//! workgroup per (4 input channels, 4 output channels, tap). See the shader's opening comment.

use crate::error::Result;
use crate::gpu::buffers::GpuTensor;
use crate::gpu::context::GpuContext;
use crate::gpu::kernel::{dispatch_buffers, grid};
use crate::gpu::plan::plan;
use crate::params::ConvShape;

pub const SHADER_NAME: &str = "grad_weight.wgsl";
pub const SHADER: &str = include_str!("../../shaders/grad_weight.wgsl");
/// Channels per block on each side (`BLOCK` in the shader).
const BLOCK: usize = 4;

/// The uniform block `Slice` of the shader, field for field.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct SliceUniform {
    n_count: u32,
    x_offset: u32,
    go_offset: u32,
    go_first_channel: u32,
    ic_begin: u32,
    ic_end: u32,
    oc_begin: u32,
    oc_end: u32,
    accumulate: u32,
    dispatch_width: u32,
}

/// Whether `encode` adds to `grad_weight` (which must then start at zero) rather than writing it: when the
/// tensors are split into several slices.
pub(crate) fn accumulates(shape: &ConvShape, input: &GpuTensor, grad_output: &GpuTensor) -> bool {
    plan(shape, input, grad_output).len() > 1
}

/// Encodes the gradient of the weight given `input` and `grad_output` into `grad_weight` (the weight's size).
pub(crate) fn encode(
    ctx: &GpuContext,
    shape: &ConvShape,
    input: &GpuTensor,
    grad_output: &GpuTensor,
    grad_weight: &GpuTensor,
    pass: &mut wgpu::ComputePass<'_>,
) -> Result<()> {
    let slices = plan(shape, input, grad_output);
    let accumulate = slices.len() > 1;
    let gw = grad_weight.single_buffer("grad_weight", ctx)?;
    let module = ctx.module(SHADER_NAME, SHADER)?;
    let consts = crate::gpu::grad_input::constants(shape)?;
    let key = format!("grad_weight {:?} {:?}", ctx.options().shader_checks, consts);
    let pipeline = ctx.pipeline(key, &module, &consts)?;
    let workgroups = shape.groups
        * shape.in_per_group().div_ceil(BLOCK)
        * shape.out_per_group().div_ceil(BLOCK)
        * shape.kernel[0]
        * shape.kernel[1];
    let grid = grid(ctx, workgroups);
    ctx.scoped(|| {
        for s in &slices {
            let u = SliceUniform {
                n_count: s.samples.len() as u32,
                x_offset: s.in_offset as u32,
                go_offset: s.out_offset as u32,
                go_first_channel: s.out_first_channel as u32,
                ic_begin: s.ic.start as u32,
                ic_end: s.ic.end as u32,
                oc_begin: s.oc.start as u32,
                oc_end: s.oc.end as u32,
                accumulate: accumulate as u32,
                dispatch_width: grid.0,
            };
            let x = &input.chunks()[s.in_chunk].buffer;
            let go = &grad_output.chunks()[s.out_chunk].buffer;
            dispatch_buffers(ctx, pass, &pipeline, bytemuck::bytes_of(&u), &[x, go, gw], grid, 1);
        }
        Ok(())
    })
}
