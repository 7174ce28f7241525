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
/// Invocations in a workgroup of the reduction: `rows` (`reduce_rows`) x the elements it sums.
const REDUCE_INVOCATIONS: usize = 256;

/// The reduction's invocations per element for `splits` slots: about one per 16 slots, rounded up to a power of
/// two, at most 8 (more sums in flight where the slots are many, none idle where they are few).
fn reduce_rows(splits: usize) -> usize {
    (splits / 16).max(1).next_power_of_two().min(8)
}

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

/// Encodes the reduction of `splits` slots of `elems` partial sums into `grad_weight`, in a fixed order (plus its
/// values where `accumulate`); `tap_major`: the kernel's taps where each slot is laid out [tap][ic][oc] (the NHWC
/// and per-tap GEMMs'), 1 where it is laid out as grad_weight.
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
    let rows = reduce_rows(splits);
    let consts = [("TAP_MAJOR", tap_major as f64), ("ROWS", rows as f64)];
    let checks = ctx.options().shader_checks;
    let reduce = ctx.pipeline(format!("reduce_splits {} {checks:?} {consts:?}", reduce_io.key()), &module, &consts)?;
    let g = grid(ctx, elems.div_ceil(REDUCE_INVOCATIONS / rows));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tensor;

    #[test]
    fn the_reduction_adds_every_slot_into_its_element_in_either_layout() {
        // Slot counts for every row count (1, 2, 4, 8) and every remainder of a row's slots by four (60 slots in 4
        // rows and 88 in 8: rows of 15 and 11), around rows x four running sums, tap-major and plain
        // layouts, elements that end inside a workgroup's columns, accumulation into the values already there.
        // Partial sums of small integers: every order of the sum is exact, so the result must equal the float64
        // sum bit for bit.
        let ctx = GpuContext::new().expect("the GPU tests need an adapter");
        for (elems, splits, taps, accumulate) in [
            (9 * 5, 1, 9, false),
            (7 * 9, 31, 9, true),
            (100, 32, 1, false),
            (3 * 40, 37, 3, true),
            (9 * 7, 300, 9, true),
            (64, 100, 4, false),
            (50, 70, 5, false),
            (3 * 11, 60, 3, true),
            (8 * 9, 88, 9, false),
        ] {
            let seed: u64 = rand::random();
            let ints = |n: usize, seed: u64| {
                let t = Tensor::uniform([n, 1, 1, 1], -64.0, 64.0, seed).unwrap();
                t.into_data().into_iter().map(f32::round).collect::<Vec<f32>>()
            };
            let slots = ints(splits * elems, seed);
            let before = ints(elems, seed ^ 1);
            let partial = wgpu::util::DeviceExt::create_buffer_init(
                &ctx.device,
                &wgpu::util::BufferInitDescriptor {
                    label: None,
                    contents: bytemuck::cast_slice(&slots),
                    usage: STORAGE,
                },
            );
            let out = GpuTensor::upload(&ctx, &Tensor::new(vec![elems, 1, 1, 1], before.clone()).unwrap()).unwrap();
            let mut encoder = ctx.device.create_command_encoder(&Default::default());
            {
                let mut pass = encoder.begin_compute_pass(&Default::default());
                encode_reduce(&ctx, &mut pass, &partial, &out, elems, splits, accumulate, taps).unwrap();
            }
            ctx.queue.submit([encoder.finish()]);
            let got = out.download(&ctx).unwrap().into_data();
            let per_tap = elems / taps;
            for (i, g) in got.iter().enumerate() {
                let at = (i % taps) * per_tap + i / taps;
                let mut want: f64 = (0..splits).map(|s| slots[s * elems + at] as f64).sum();
                if accumulate {
                    want += before[i] as f64;
                }
                assert_eq!(*g as f64, want, "{elems} elems, {splits} splits, {taps} taps, seed {seed}: element {i}");
            }
        }
    }
}
