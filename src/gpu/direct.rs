//! The direct (gather) kernel, `shaders/direct.wgsl`: correct for every option, one invocation per output
//! pixel and block of output channels. See the shader's opening comment for the tap enumeration.

use wgpu::util::DeviceExt;

use crate::error::{ConvtError, Result};
use crate::gpu::buffers::{GpuTensor, STORAGE};
use crate::gpu::context::GpuContext;
use crate::gpu::plan::{plan, Slice};
use crate::params::ConvShape;

pub const SHADER_NAME: &str = "direct.wgsl";
pub const SHADER: &str = include_str!("../../shaders/direct.wgsl");
const WORKGROUP_SIZE: u32 = 256;
/// Output channels per invocation (`OC_BLOCK` in the shader).
const OC_BLOCK: usize = 4;

/// The uniform block `Slice` of the shader, field for field.
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

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The inverse of `a` modulo `m` (`a` and `m` coprime), 0 when `m` is 1.
fn mod_inverse(a: usize, m: usize) -> usize {
    (0..m).find(|&x| (a % m) * x % m == 1 % m).unwrap_or(0)
}

/// The shader's override constants for one shape (its specialisation). The kernel indexes with u32: every
/// value, and the largest intermediate `(kernel - 1) * dilation + padding + output size + stride`, must stay
/// below 2^31.
fn constants(shape: &ConvShape, has_bias: bool) -> Result<Vec<(&'static str, f64)>> {
    for a in 0..2 {
        let widest = (shape.kernel[a] as u128 - 1) * shape.dilation[a] as u128
            + (shape.padding[a] + shape.out_hw[a] + shape.stride[a]) as u128;
        if widest >= 1 << 31 || shape.in_channels >= 1 << 31 || shape.out_channels >= 1 << 31 {
            return Err(ConvtError::InvalidArgument(format!(
                "sizes of {shape:?} exceed the 32-bit index range of the GPU kernels"
            )));
        }
    }
    let axis = |a: usize| {
        let g = gcd(shape.stride[a], shape.dilation[a]);
        (g, mod_inverse(shape.dilation[a] / g, shape.stride[a] / g))
    };
    let ((g_h, inv_h), (g_w, inv_w)) = (axis(0), axis(1));
    Ok([
        ("C_IN", shape.in_channels),
        ("C_OUT", shape.out_channels),
        ("GROUPS", shape.groups),
        ("IN_H", shape.in_hw[0]),
        ("IN_W", shape.in_hw[1]),
        ("OUT_H", shape.out_hw[0]),
        ("OUT_W", shape.out_hw[1]),
        ("K_H", shape.kernel[0]),
        ("K_W", shape.kernel[1]),
        ("S_H", shape.stride[0]),
        ("S_W", shape.stride[1]),
        ("P_H", shape.padding[0]),
        ("P_W", shape.padding[1]),
        ("D_H", shape.dilation[0]),
        ("D_W", shape.dilation[1]),
        ("G_H", g_h),
        ("G_W", g_w),
        ("INV_H", inv_h),
        ("INV_W", inv_w),
        ("HAS_BIAS", has_bias as usize),
        ("WORKGROUP_SIZE", WORKGROUP_SIZE as usize),
    ]
    .into_iter()
    .map(|(k, v)| (k, v as f64))
    .collect())
}

/// Output channel blocks `[begin, end)` covering output channels `oc` (blocks never straddle a group).
fn blocks(shape: &ConvShape, oc: &std::ops::Range<usize>) -> (usize, usize) {
    let cog = shape.out_per_group();
    let per_group = cog.div_ceil(OC_BLOCK);
    let block_of = |c: usize| (c / cog) * per_group + (c % cog) / OC_BLOCK;
    (block_of(oc.start), block_of(oc.end - 1) + 1)
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
    let slices: Vec<Slice> = plan(shape, input, output);
    if slices.is_empty() {
        return Ok(());
    }
    let weight_buf = weight.single_buffer("weight", ctx)?;
    let unused_bias;
    let bias_buf = match bias {
        Some(b) => b.single_buffer("bias", ctx)?,
        None => {
            // The binding must exist even when HAS_BIAS is false; the shader never reads it then.
            unused_bias = ctx.pool.get(&ctx.device, 16, STORAGE);
            &unused_bias
        }
    };
    let module = ctx.module(SHADER_NAME, SHADER)?;
    let consts = constants(shape, bias.is_some())?;
    let key = format!("direct {:?} {:?}", ctx.options().shader_checks, consts);
    let pipeline = ctx.pipeline(key, &module, &consts)?;
    let max_dim = ctx
        .device
        .limits()
        .max_compute_workgroups_per_dimension
        .max(1) as usize;
    let pixels = shape.out_hw[0] * shape.out_hw[1];

    ctx.scoped(|| {
        let layout = pipeline.get_bind_group_layout(0);
        {
            pass.set_pipeline(&pipeline);
            for s in &slices {
                let (b0, b1) = blocks(shape, &s.oc);
                let invocations = s.samples.len() * (b1 - b0) * pixels;
                let groups = invocations.div_ceil(WORKGROUP_SIZE as usize);
                let width = groups.min(max_dim);
                let height = groups.div_ceil(width);
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
                    dispatch_width: width as u32,
                };
                let uniform = ctx
                    .device
                    .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                        label: Some("convt slice"),
                        contents: bytemuck::bytes_of(&u),
                        usage: wgpu::BufferUsages::UNIFORM,
                    });
                let bind_group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: None,
                    layout: &layout,
                    entries: &[
                        wgpu::BindGroupEntry {
                            binding: 0,
                            resource: uniform.as_entire_binding(),
                        },
                        wgpu::BindGroupEntry {
                            binding: 1,
                            resource: input.chunks()[s.in_chunk].buffer.as_entire_binding(),
                        },
                        wgpu::BindGroupEntry {
                            binding: 2,
                            resource: weight_buf.as_entire_binding(),
                        },
                        wgpu::BindGroupEntry {
                            binding: 3,
                            resource: bias_buf.as_entire_binding(),
                        },
                        wgpu::BindGroupEntry {
                            binding: 4,
                            resource: output.chunks()[s.out_chunk].buffer.as_entire_binding(),
                        },
                    ],
                });
                pass.set_bind_group(0, &bind_group, &[]);
                pass.dispatch_workgroups(width as u32, height as u32, 1);
            }
        }
        Ok(())
    })
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
}
