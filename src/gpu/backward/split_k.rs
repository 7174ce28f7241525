//! The split-K half of every grad_weight kernel (the kit they share): the scratch buffer of f32 partial sums each
//! kernel writes, one slot per split of its reduction, and `shaders/backward/grad_weight_reduce.wgsl`, which adds the
//! slots in a fixed order into grad_weight (no atomics: the same bits on every run).

use crate::dtype::DType;
use crate::error::Result;
use crate::gpu::context::GpuContext;
use crate::gpu::kernel::{dispatch_buffers, grid};
use crate::gpu::memory::{GpuTensor, InFlight, STORAGE};
use crate::gpu::wgsl;
use crate::gpu::wgsl::operands::{declare, Access, Io};

pub const REDUCE_SHADER_NAME: &str = "backward/grad_weight_reduce.wgsl";
const REDUCE_SHADER: &str = include_str!("../../../shaders/backward/grad_weight_reduce.wgsl");
/// Most bytes of partial sums kept at once.
pub(crate) const MAX_PARTIAL_BYTES: u64 = 256 << 20;
const REDUCE_WORKGROUP_SIZE: usize = 256;

/// The reduction's source: f32 partial sums into a grad_weight of `io`'s output dtype.
fn reduce_source(io: Io) -> String {
    let operands = declare(io.storage, &[io.operand("out", 2, Access::ReadWrite)]);
    wgsl::module(&[&operands, REDUCE_SHADER])
}

/// The reduction's uniform block `Params`, field for field.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ReduceUniform {
    elems: u32,
    splits: u32,
    accumulate: u32,
    dispatch_width: u32,
}

/// A scratch buffer for `values` partial sums, kept until the call's submission; filled with NaN where the context
/// poisons outputs, so that a slot element no workgroup writes shows in the reduced gradient.
pub(crate) fn partial_sums(ctx: &GpuContext, in_flight: &mut InFlight, values: usize) -> wgpu::Buffer {
    let partial = in_flight.keep(ctx.pool.get(&ctx.device, (values * 4) as u64, STORAGE));
    if ctx.options().poison_outputs {
        ctx.queue.write_buffer(&partial, 0, &vec![0xff; values * 4]); // 0xffffffff is an f32 NaN
    }
    partial
}

/// Bytes of partial sums a call may keep: `MAX_PARTIAL_BYTES`, at least one weight's (`elems` values), within one
/// binding of `binding_limit` bytes.
pub(crate) fn partial_cap(binding_limit: u64, elems: usize) -> u64 {
    MAX_PARTIAL_BYTES.max(elems as u64 * 4).min(binding_limit)
}

/// Encodes the reduction of `splits` slots of `elems` partial sums into `grad_weight`, in split order (plus its
/// values where `accumulate`); `tap_major`: the kernel's taps where each slot is laid out [tap][ic][oc] (the NHWC
/// GEMM's), 1 where it is laid out as grad_weight.
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode_reduce(
    ctx: &GpuContext,
    pass: &mut wgpu::ComputePass<'_>,
    partial: &wgpu::Buffer,
    grad_weight: &GpuTensor,
    elems: usize,
    splits: usize,
    accumulate: bool,
    tap_major: usize,
) -> Result<()> {
    let reduce_io = Io::new(ctx, DType::F32, grad_weight.dtype());
    let module = ctx.module_with(&format!("{REDUCE_SHADER_NAME} {}", reduce_io.key()), || reduce_source(reduce_io))?;
    let consts = [("TAP_MAJOR", tap_major as f64)];
    let checks = ctx.options().shader_checks;
    let reduce = ctx.pipeline(format!("reduce_splits {} {checks:?} {consts:?}", reduce_io.key()), &module, &consts)?;
    let g = grid(ctx, elems.div_ceil(REDUCE_WORKGROUP_SIZE));
    let r = ReduceUniform {
        elems: elems as u32,
        splits: splits as u32,
        accumulate: accumulate as u32,
        dispatch_width: g.0,
    };
    let gw = grad_weight.single_buffer("grad_weight", ctx)?;
    dispatch_buffers(ctx, pass, &reduce, bytemuck::bytes_of(&r), &[partial, gw], g);
    Ok(())
}

/// The reduction's shader for validation, for every output dtype (it reads f32 partial sums).
pub(crate) fn shader_variants() -> Vec<crate::gpu::ShaderVariant> {
    Io::variants()
        .into_iter()
        .map(|io| Io { input: DType::F32, ..io })
        .map(|io| (REDUCE_SHADER_NAME, format!("{REDUCE_SHADER_NAME} {}", io.key()), reduce_source(io)))
        .collect()
}
