//! Conversions between tensor dtypes on the GPU (`shaders/common/convert.wgsl`), and the rule that lets every
//! kernel take half-precision tensors: a kernel that reads and writes f32 gets f32 copies of half-precision
//! operands and writes an f32 result that is then rounded to the output's dtype, all in the call's one compute
//! pass. Kernels that read a dtype themselves (the padded-NHWC kernel's input copy) skip the copy of that operand.

use crate::dtype::DType;
use crate::error::Result;
use crate::gpu::context::GpuContext;
use crate::gpu::kernel::{dispatch_buffers, grid};
use crate::gpu::memory::{GpuTensor, InFlight};

pub const SHADER_NAME: &str = "common/convert.wgsl";
const SHADER: &str = include_str!("../../shaders/common/convert.wgsl");
/// The dtype functions every shader that reads or writes half-precision tensors appends.
pub(crate) const DTYPE_FUNCTIONS: &str = include_str!("../../shaders/common/dtype.wgsl");
const WORKGROUP_SIZE: usize = 256;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    count: u32,
    dispatch_width: u32,
    _pad: [u32; 2],
}

fn source() -> String {
    format!("{SHADER}\n{DTYPE_FUNCTIONS}")
}

/// Encodes `dst = src` rounded to `dst`'s dtype into `pass`; the shapes must be equal (their chunks then hold
/// the same planes: `GpuTensor::empty_unpoisoned`).
pub(crate) fn encode(
    ctx: &GpuContext,
    src: &GpuTensor,
    dst: &GpuTensor,
    pass: &mut wgpu::ComputePass<'_>,
) -> Result<()> {
    debug_assert_eq!(src.shape(), dst.shape());
    let module = ctx.module_with(SHADER_NAME, source)?;
    let consts = [("SRC", src.dtype().shader_code()), ("DST", dst.dtype().shader_code())];
    let pipeline = ctx.pipeline(format!("convert {:?} {consts:?}", ctx.options().shader_checks), &module, &consts)?;
    ctx.scoped(|| {
        for (a, b) in src.chunks().iter().zip(dst.chunks()) {
            let count = a.planes * src.plane_elems();
            let words = if dst.dtype() == DType::F32 { count } else { count.div_ceil(2) };
            let g = grid(ctx, words.div_ceil(WORKGROUP_SIZE));
            let p = Params { count: count as u32, dispatch_width: g.0, _pad: [0; 2] };
            dispatch_buffers(ctx, pass, &pipeline, bytemuck::bytes_of(&p), &[&a, &b], g);
        }
        Ok(())
    })
}

/// An f32 copy of `t` encoded into `pass` where `t` is of another dtype (`None` where it is f32 already).
pub(crate) fn to_f32(ctx: &GpuContext, t: &GpuTensor, pass: &mut wgpu::ComputePass<'_>) -> Result<Option<GpuTensor>> {
    if t.dtype() == DType::F32 {
        return Ok(None);
    }
    let copy = GpuTensor::empty_unpoisoned(ctx, t.shape(), DType::F32)?;
    encode(ctx, t, &copy, pass)?;
    Ok(Some(copy))
}

/// An f32 tensor for a kernel to write where `out` is of another dtype (`None` where it is f32): poisoned like
/// an output where the context asks for it, so an element the kernel misses shows up after the conversion.
pub(crate) fn f32_result(ctx: &GpuContext, out: &GpuTensor) -> Result<Option<GpuTensor>> {
    (out.dtype() != DType::F32).then(|| GpuTensor::empty(ctx, out.shape())).transpose()
}

/// Encodes the rounding of `result` (from [`f32_result`]) into `out`, and keeps it until the call submits.
pub(crate) fn finish(
    ctx: &GpuContext,
    result: Option<GpuTensor>,
    out: &GpuTensor,
    pass: &mut wgpu::ComputePass<'_>,
    in_flight: &mut InFlight,
) -> Result<()> {
    if let Some(r) = result {
        encode(ctx, &r, out, pass)?;
        in_flight.keep_tensor(r);
    }
    Ok(())
}

/// This module's shader for validation (`gpu::shader_sources`), which also holds the dtype functions.
pub(crate) fn shader_variants() -> Vec<crate::gpu::ShaderVariant> {
    vec![(SHADER_NAME, SHADER_NAME.to_string(), source()), ("common/dtype.wgsl", SHADER_NAME.to_string(), source())]
}
