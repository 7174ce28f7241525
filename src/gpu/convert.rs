//! Conversions between tensor dtypes on the GPU (`shaders/common/convert.wgsl`): [`GpuTensor::to_dtype`], and the
//! one case where a kernel writes an f32 result for a half-precision output: a sum that several dispatches add up
//! in place (a sample's input channels over several bindings, grad_weight and grad_bias over several slices), which
//! would round at every step in the output's dtype. The result is then rounded once, at the end, in the call's
//! compute pass ([`f32_result`], [`finish`]). Every kernel reads half-precision tensors as stored.

use crate::dtype::DType;
use crate::error::Result;
use crate::gpu::context::GpuContext;
use crate::gpu::kernel::{dispatch_buffers, grid};
use crate::gpu::memory::{GpuTensor, InFlight};
use crate::gpu::wgsl;
use crate::gpu::wgsl::operands::{declare, Access, Io};

pub const SHADER_NAME: &str = "common/convert.wgsl";
const SHADER: &str = include_str!("../../shaders/common/convert.wgsl");
const WORKGROUP_SIZE: usize = 256;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    count: u32,
    dispatch_width: u32,
    _pad: [u32; 2],
}

fn source(io: Io) -> String {
    let operands = declare(io.storage, &[io.operand("src", 1, Access::Read), io.operand("dst", 2, Access::ReadWrite)]);
    wgsl::module(&[&operands, SHADER])
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
    let io = Io::new(ctx, src.dtype(), dst.dtype());
    let module = ctx.module_with(&format!("{SHADER_NAME} {}", io.key()), || source(io))?;
    let pipeline = ctx.pipeline(format!("convert {} {:?}", io.key(), ctx.options().shader_checks), &module, &[])?;
    ctx.scoped(|| {
        for (a, b) in src.chunks().iter().zip(dst.chunks()) {
            let count = a.planes * src.plane_elems();
            let g = grid(ctx, count.div_ceil(WORKGROUP_SIZE));
            let p = Params { count: count as u32, dispatch_width: g.0, _pad: [0; 2] };
            dispatch_buffers(ctx, pass, &pipeline, bytemuck::bytes_of(&p), &[&a, &b], g);
        }
        Ok(())
    })
}

/// An f32 tensor for a kernel to write where `out` is of another dtype and the kernel `accumulates` in it (`None`
/// otherwise): poisoned like
/// an output where the context asks for it, so an element the kernel misses shows up after the conversion.
pub(crate) fn f32_result(ctx: &GpuContext, out: &GpuTensor, accumulates: bool) -> Result<Option<GpuTensor>> {
    (accumulates && out.dtype() != DType::F32).then(|| GpuTensor::empty(ctx, out.shape())).transpose()
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

/// This module's shader for validation (`gpu::shader_sources`): every pair of dtypes, with and without 16-bit storage,
/// and in it the dtype functions.
pub(crate) fn shader_variants() -> Vec<crate::gpu::ShaderVariant> {
    use crate::gpu::wgsl::operands::{Storage16, DTYPE_SHADER_NAME};
    let mut v = Vec::new();
    for input in [DType::F32, DType::F16, DType::BF16] {
        for output in [DType::F32, DType::F16, DType::BF16] {
            for storage in [Storage16::ALL, Storage16::NONE] {
                let io = Io { input, output, storage };
                v.push((SHADER_NAME, format!("{SHADER_NAME} {}", io.key()), source(io)));
            }
        }
    }
    let half = Io { input: DType::F16, output: DType::BF16, storage: Storage16::NONE };
    v.push((DTYPE_SHADER_NAME, format!("{DTYPE_SHADER_NAME} in {SHADER_NAME}"), source(half)));
    v
}
