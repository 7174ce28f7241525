//! The operand maxima for the f16 kernels, `shaders/common/absmax.wgsl`: a tensor's largest finite magnitude, from which
//! the kernels derive its power-of-two scale (the GEMM kernel's input here, its weight's while packing it:
//! shaders/forward/gemm_weights.wgsl; the padded-NHWC kernel's weight here, its input's in its copy). An f16 tensor
//! needs no scale: its slot stays zero, which scales by 1 (`scale_exponent(0)` is 0), and no pass reads it.

use crate::dtype::DType;
use crate::error::{ConvtError, Result};
use crate::gpu::context::GpuContext;
use crate::gpu::kernel::dispatch_buffers;
use crate::gpu::memory::{self, GpuTensor};
use crate::gpu::wgsl::operands::{declare, Access, Io};
use crate::gpu::wgsl::{self, scale::SCALE_FUNCTIONS};

pub const SHADER_NAME: &str = "common/absmax.wgsl";
const SHADER: &str = include_str!("../../shaders/common/absmax.wgsl");

/// `shaders/common/absmax.wgsl` for a tensor of `io`'s dtype, with the scale functions it uses
/// (`finite_magnitude_bits`).
fn source(io: Io) -> String {
    wgsl::module(&[&declare(io.storage, &[io.operand("data", 1, Access::Read)]), SHADER, SCALE_FUNCTIONS])
}
const WORKGROUP_SIZE: u32 = 256;
/// Enough workgroups to fill a large GPU; each invocation walks the rest with a grid stride.
const MAX_WORKGROUPS: usize = 4096;
/// Loads per invocation and pass of the grid stride (`LOADS` in the shader).
const LOADS: usize = 4;

/// The shader's `Params`, field for field.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    count: u32,
    slot: u32,
    stride: u32,
    _pad: u32,
}

/// Encodes the maximum of each (slot, tensor) into that slot of a new buffer of u32 f32-bits (at least 4 slots,
/// zeros elsewhere), and carries each (slot, buffer) of `known` into that slot: maxima found earlier (a prepared
/// weight's), a buffer of this function's whose only nonzero slot is that one. The carrying is a dispatch over
/// the known buffer's slots as f32 values (their largest is that slot's), so the value stays on the GPU: reading
/// it back would make each call that uses a prepared weight wait for the GPU to finish all earlier work.
/// The slot of an f16 tensor stays zero: it is multiplied as it is.
pub(crate) fn encode_slots(
    ctx: &GpuContext,
    tensors: &[(usize, &GpuTensor)],
    known: &[(usize, &wgpu::Buffer)],
    pass: &mut wgpu::ComputePass<'_>,
) -> Result<wgpu::Buffer> {
    let slots = tensors.iter().map(|&(slot, _)| slot).chain(known.iter().map(|&(slot, _)| slot)).max();
    let initial = vec![0u32; slots.map_or(0, |s| s + 1).max(4)];
    let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC;
    let maxima = ctx.scoped(|| {
        Ok(memory::buffer_with(&ctx.device, "convt operand maxima", bytemuck::cast_slice(&initial), usage))
    })?;
    ctx.scoped(|| {
        if known.is_empty() {
            return Ok(());
        }
        let pipeline = pipeline(ctx, DType::F32)?;
        for &(slot, from) in known {
            let count = (from.size() / 4) as u32;
            let p = Params { count, slot: slot as u32, stride: WORKGROUP_SIZE, _pad: 0 };
            dispatch_buffers(ctx, pass, &pipeline, bytemuck::bytes_of(&p), &[from, &maxima], (1, 1));
        }
        Ok(())
    })?;
    encode_into(ctx, tensors, &maxima, pass)?;
    Ok(maxima)
}

/// The absmax pipeline for tensors of `dtype`.
fn pipeline(ctx: &GpuContext, dtype: DType) -> Result<std::sync::Arc<wgpu::ComputePipeline>> {
    let consts = [("WORKGROUP_SIZE", WORKGROUP_SIZE as f64), ("LOADS", LOADS as f64)];
    let io = Io::of(ctx, dtype);
    let module = ctx.module_with(&format!("{SHADER_NAME} {}", io.key()), || source(io))?;
    ctx.pipeline(format!("absmax {} {:?}", io.key(), ctx.options().shader_checks), &module, &consts)
}

/// Encodes the maximum of each (slot, tensor) into that slot of `maxima` (a buffer of [`encode_slots`], whose
/// other slots another kernel set; the slots given here must be zero before). The slot of an f16 tensor stays
/// as it is.
pub(crate) fn encode_into(
    ctx: &GpuContext,
    tensors: &[(usize, &GpuTensor)],
    maxima: &wgpu::Buffer,
    pass: &mut wgpu::ComputePass<'_>,
) -> Result<()> {
    if let Some(&(slot, _)) = tensors.iter().find(|&&(slot, _)| (slot as u64 + 1) * 4 > maxima.size()) {
        return Err(ConvtError::InvalidArgument(format!(
            "operand maxima: slot {slot} past a buffer of {} bytes",
            maxima.size()
        )));
    }
    ctx.scoped(|| {
        for &(slot, t) in tensors.iter().filter(|(_, t)| t.dtype() != DType::F16) {
            let pipeline = pipeline(ctx, t.dtype())?;
            for c in t.chunks() {
                let count = c.planes * t.plane_elems();
                if count == 0 {
                    continue;
                }
                let workgroups = count.div_ceil(WORKGROUP_SIZE as usize * LOADS).min(MAX_WORKGROUPS);
                let p = Params {
                    count: count as u32,
                    slot: slot as u32,
                    stride: workgroups as u32 * WORKGROUP_SIZE,
                    _pad: 0,
                };
                dispatch_buffers(ctx, pass, &pipeline, bytemuck::bytes_of(&p), &[&c, maxima], (workgroups as u32, 1));
            }
        }
        Ok(())
    })
}

/// This kernel's shader for validation (`gpu::shader_sources`).
pub(crate) fn shader_variants() -> Vec<crate::gpu::ShaderVariant> {
    let variants = Io::variants().into_iter().filter(|io| io.input == io.output);
    variants.map(|io| (SHADER_NAME, format!("{SHADER_NAME} {}", io.key()), source(io))).collect()
}
