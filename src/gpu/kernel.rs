//! What every kernel shares: the shape's override constants (`shaders/common/shape.wgsl` and their values), the
//! filling of a generated shader's marker lines, the 32-bit index check, the binding of input, weight, bias and
//! output, and the folding of large dispatches into a 2-D grid.

use crate::error::{ConvtError, Result};
use crate::gpu::context::GpuContext;
use crate::gpu::memory::GpuTensor;
use crate::params::ConvShape;

pub(crate) fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The inverse of `a` modulo `m` (`a` and `m` coprime), 0 when `m` is 1.
pub(crate) fn mod_inverse(a: usize, m: usize) -> usize {
    (0..m).find(|&x| (a % m) * x % m == 1 % m).unwrap_or(0)
}

/// The kernels index with u32 (signed i32 for input rows and columns): every size, and the largest
/// intermediate `(kernel - 1) * dilation + padding + output size + stride`, must stay below 2^31.
pub(crate) fn check_index_range(shape: &ConvShape) -> Result<()> {
    for a in 0..2 {
        let widest = (shape.kernel[a] as u128 - 1) * shape.dilation[a] as u128
            + (shape.padding[a] + shape.out_hw[a] + shape.stride[a]) as u128;
        if widest >= 1 << 31 || shape.in_channels >= 1 << 31 || shape.out_channels >= 1 << 31 {
            return Err(ConvtError::InvalidArgument(format!(
                "sizes of {shape:?} exceed the 32-bit index range of the GPU kernels"
            )));
        }
    }
    Ok(())
}

/// A kernel's weight: the tensor, and where the caller has it, the weight as that kernel prepared it earlier
/// ([`crate::gpu::plan`]); without it the kernel prepares the weight in its own pass.
#[derive(Clone, Copy)]
pub(crate) struct Weight<'a> {
    pub tensor: &'a GpuTensor,
    pub prepared: Option<&'a crate::gpu::plan::PreparedWeight>,
}

/// What a kernel binds: a whole buffer of convt's own, or a tensor's chunk (which in a view of an application's
/// buffer starts at an offset).
pub(crate) trait Bindable {
    /// The buffer, the offset of the bytes bound and their count.
    fn range(&self) -> (&wgpu::Buffer, u64, u64);
    /// The binding of those bytes.
    fn resource(&self) -> wgpu::BindingResource<'_> {
        let (buffer, offset, bytes) = self.range();
        wgpu::BindingResource::Buffer(wgpu::BufferBinding { buffer, offset, size: std::num::NonZeroU64::new(bytes) })
    }
}

impl<T: Bindable + ?Sized> Bindable for &T {
    fn range(&self) -> (&wgpu::Buffer, u64, u64) {
        (**self).range()
    }
}

impl Bindable for wgpu::Buffer {
    fn range(&self) -> (&wgpu::Buffer, u64, u64) {
        (self, 0, self.size())
    }
}

impl Bindable for crate::gpu::memory::PooledBuffer {
    fn range(&self) -> (&wgpu::Buffer, u64, u64) {
        (self, 0, self.size())
    }
}

/// The weight and bias buffers of one call (the bias binding exists even without a bias: the shader's
/// HAS_BIAS constant keeps it unread, and the context's placeholder is bound there).
pub(crate) struct Operands<'a> {
    pub weight: &'a dyn Bindable,
    bias: &'a dyn Bindable,
}

impl<'a> Operands<'a> {
    /// `weight` is the weight's buffer as the kernel reads it (the tensor's own, or a packed copy).
    pub fn new(ctx: &'a GpuContext, weight: &'a dyn Bindable, bias: Option<&'a GpuTensor>) -> Result<Self> {
        let bias: &dyn Bindable = match bias {
            Some(b) => b.single_buffer("bias", ctx)?,
            None => &ctx.unused_binding,
        };
        Ok(Self { weight, bias })
    }

    /// The forward shaders' bindings 1 to 4: input, weight, bias, output.
    pub fn buffers<'b>(&'b self, input: &'b dyn Bindable, output: &'b dyn Bindable) -> Vec<&'b dyn Bindable> {
        vec![input, self.weight, self.bias, output]
    }
}

/// The uniform block `Params` of the shaders whose only parameter is their grid's width (`shaders/forward/gemm_weights.wgsl`,
/// `shaders/forward/coop_nhwc_weights.wgsl`), field for field.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct GridParams {
    dispatch_width: u32,
    _pad: [u32; 3],
}

impl GridParams {
    /// The block for a grid from [`grid`].
    pub(crate) fn of(grid: (u32, u32)) -> GridParams {
        GridParams { dispatch_width: grid.0, _pad: [0; 3] }
    }
}

/// Folds `workgroups` into a grid of at most `max_compute_workgroups_per_dimension` columns: (width, height).
pub(crate) fn grid(ctx: &GpuContext, workgroups: usize) -> (u32, u32) {
    let max_dim = ctx.device.limits().max_compute_workgroups_per_dimension.max(1) as usize;
    let width = workgroups.clamp(1, max_dim);
    (width as u32, workgroups.div_ceil(width) as u32)
}

/// Binds (uniform, input chunk, weight, bias, output chunk) in the forward shaders' common layout and
/// dispatches `(width, height)` workgroups.
#[allow(clippy::too_many_arguments)]
pub(crate) fn dispatch(
    ctx: &GpuContext,
    pass: &mut wgpu::ComputePass<'_>,
    pipeline: &wgpu::ComputePipeline,
    uniform: &[u8],
    input: &dyn Bindable,
    ops: &Operands<'_>,
    output: &dyn Bindable,
    grid: (u32, u32),
) {
    dispatch_buffers(ctx, pass, pipeline, uniform, &ops.buffers(input, output), grid);
}

/// Binds `uniform` at binding 0 and `buffers` at bindings 1, 2, ... (as the shader declares them) and
/// dispatches `(width, height)` workgroups (a grid of one layer: every kernel derives its work from x and y).
pub(crate) fn dispatch_buffers(
    ctx: &GpuContext,
    pass: &mut wgpu::ComputePass<'_>,
    pipeline: &wgpu::ComputePipeline,
    uniform: &[u8],
    buffers: &[&dyn Bindable],
    (width, height): (u32, u32),
) {
    bind_buffers(ctx, pass, pipeline, uniform, buffers);
    ctx.dispatch_in(pass, pipeline, |pass| pass.dispatch_workgroups(width, height, 1));
}

/// Sets `pipeline` with `uniform` bound at binding 0 and `buffers` at bindings 1, 2, ..., for a dispatch to follow.
pub(crate) fn bind_buffers(
    ctx: &GpuContext,
    pass: &mut wgpu::ComputePass<'_>,
    pipeline: &wgpu::ComputePipeline,
    uniform: &[u8],
    buffers: &[&dyn Bindable],
) {
    let uniform = ctx.uniforms.get(&ctx.device, uniform);
    let entries: Vec<wgpu::BindGroupEntry<'_>> =
        std::iter::once(wgpu::BindGroupEntry { binding: 0, resource: uniform.as_entire_binding() })
            .chain(buffers.iter().zip(1..).map(|(b, i)| wgpu::BindGroupEntry { binding: i, resource: b.resource() }))
            .collect();
    let bind_group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &entries,
    });
    pass.set_pipeline(pipeline);
    pass.set_bind_group(0, &bind_group, &[]);
}

/// Encodes a weight-preparation kernel (one invocation per value it writes: the GEMM's packing, the Winograd
/// weight transform): `src` bound at 0, `dst` at 1, `values` invocations in workgroups of `workgroup_size`.
pub(crate) fn dispatch_weight_prep(
    ctx: &GpuContext,
    pass: &mut wgpu::ComputePass<'_>,
    pipeline: &wgpu::ComputePipeline,
    src: &dyn Bindable,
    dst: &dyn Bindable,
    values: usize,
    workgroup_size: u32,
) -> Result<()> {
    let (width, height) = grid(ctx, values.div_ceil(workgroup_size as usize));
    ctx.scoped(|| {
        let bind_group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("convt weight preparation"),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: src.resource() },
                wgpu::BindGroupEntry { binding: 1, resource: dst.resource() },
            ],
        });
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        ctx.dispatch_in(pass, pipeline, |pass| pass.dispatch_workgroups(width, height, 1));
        Ok(())
    })
}

/// Blocks of `block` channels covering the channel range `channels` of a tensor whose groups have `per_group`
/// channels, as `[begin, end)` block indices (blocks never straddle a group; a group's last block may be short).
pub(crate) fn channel_blocks(per_group: usize, block: usize, channels: &std::ops::Range<usize>) -> (usize, usize) {
    let per_group_blocks = per_group.div_ceil(block);
    let block_of = |c: usize| (c / per_group) * per_group_blocks + (c % per_group) / block;
    (block_of(channels.start), block_of(channels.end - 1) + 1)
}

/// Stride phase r's geometry along one axis (the GEMM's and the padded-NHWC kernel's phases): output count,
/// first tap, tap count, tap step, input step per tap, and the input offset of the first tap.
pub(crate) struct AxisPhase {
    pub count: usize,
    pub k0: usize,
    pub taps: usize,
    pub kstep: usize,
    pub istep: usize,
    pub off: i64,
}

pub(crate) fn axis_phase(r: usize, out: usize, k: usize, s: usize, p: usize, d: usize) -> AxisPhase {
    let count = if r < out { (out - 1 - r) / s + 1 } else { 0 };
    let q = r + p;
    let g = gcd(s, d);
    let (kstep, istep) = (s / g, d / g);
    // The first tap kh with kh*d = q (mod s); the others follow every kstep taps.
    match (0..kstep).find(|&kh| kh * d % s == q % s).filter(|&k0| k0 < k) {
        Some(k0) => AxisPhase {
            count,
            k0,
            taps: (k - 1 - k0) / kstep + 1,
            kstep,
            istep,
            off: (q as i64 - (k0 * d) as i64) / s as i64,
        },
        None => AxisPhase { count, k0: 0, taps: 0, kstep, istep, off: 0 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modular_inverse_solves_every_residue() {
        for s in 1..12usize {
            for d in 1..12usize {
                let g = gcd(s, d);
                let inv = mod_inverse(d / g, s / g);
                for r in (0..s).filter(|r| r % g == 0) {
                    let k0 = (r / g * inv) % (s / g);
                    assert_eq!(k0 * d % s, r, "s={s} d={d} r={r}");
                }
            }
        }
    }

    #[test]
    fn phases_enumerate_exactly_the_valid_taps() {
        // For every output coordinate, the phase's taps must be exactly those with (o + p - k*d) a
        // non-negative-or-not multiple of s (bounds are the shader's job), and the input index must match.
        for s in 1..6 {
            for d in 1..5 {
                for k in 1..6 {
                    for p in 0..4 {
                        let out = 20;
                        for r in 0..s {
                            let ph = axis_phase(r, out, k, s, p, d);
                            let expected: Vec<usize> = (0..k).filter(|kk| (r + p + s * 10 - kk * d) % s == 0).collect();
                            let got: Vec<usize> = (0..ph.taps).map(|j| ph.k0 + j * ph.kstep).collect();
                            assert_eq!(got, expected, "s={s} d={d} k={k} p={p} r={r}");
                            for a in 0..ph.count {
                                let o = r + a * s;
                                for (j, kk) in got.iter().enumerate() {
                                    let ih = a as i64 + ph.off - (j * ph.istep) as i64;
                                    assert_eq!(ih * s as i64, o as i64 + p as i64 - (kk * d) as i64);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
