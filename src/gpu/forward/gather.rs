//! What the gather kernels ([`crate::gpu::forward::direct`], [`crate::gpu::forward::rows`]) share, as
//! `shaders/forward/gather.wgsl` does on the shader side: the shape's override constants with the tap
//! enumeration's, the `Slice` uniform, and the encoding of a kernel over every slice of the plan.

use crate::error::Result;
use crate::gpu::context::GpuContext;
use crate::gpu::kernel::{channel_blocks, check_index_range, dispatch, gcd, grid, mod_inverse, Operands};
use crate::gpu::memory::GpuTensor;
use crate::gpu::slices::{plan, Slice};
use crate::gpu::wgsl::operands::Io;
use crate::gpu::wgsl::{self, shape_constants, with_shape_prelude};
use crate::params::ConvShape;

pub const SHADER_NAME: &str = "forward/gather.wgsl";
/// The shape constants, the Slice uniform and the tap enumeration; each gather kernel's source starts with it.
pub const SHADER: &str = with_shape_prelude!("forward/gather.wgsl");

/// A gather kernel's source from its `parts` (behind [`SHADER`] and the bindings of its tensors, of `io`: x, w and
/// bias read, out written).
pub(crate) fn source(io: Io, parts: &[&str]) -> String {
    let operands = crate::gpu::wgsl::operands::forward(io);
    let mut all = vec![operands.as_str(), SHADER];
    all.extend_from_slice(parts);
    wgsl::module(&all)
}

/// The uniform block `Slice` of shaders/forward/gather.wgsl, field for field; also that of
/// shaders/backward/grad_input.wgsl, a gather whose plan reads grad_output ("in") and writes grad_input ("out").
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct SliceUniform {
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

impl SliceUniform {
    /// Slice `s` of the plan with the written tensor's channel blocks `[b0, b1)` (`channel_blocks`), in a grid
    /// `dispatch_width` workgroups wide.
    pub(crate) fn new(s: &Slice, (b0, b1): (usize, usize), dispatch_width: u32) -> Self {
        SliceUniform {
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
            dispatch_width,
        }
    }
}

/// The override constants of [`SHADER`] for one shape: its sizes and what `axis_taps` needs.
pub(crate) fn constants(shape: &ConvShape, has_bias: bool) -> Result<Vec<(&'static str, f64)>> {
    check_index_range(shape)?;
    let axis = |a: usize| {
        let g = gcd(shape.stride[a], shape.dilation[a]);
        (g, mod_inverse(shape.dilation[a] / g, shape.stride[a] / g))
    };
    let ((g_h, inv_h), (g_w, inv_w)) = (axis(0), axis(1));
    let mut c = shape_constants(shape, has_bias);
    c.extend([("G_H", g_h), ("G_W", g_w), ("INV_H", inv_h), ("INV_W", inv_w)].map(|(k, v)| (k, v as f64)));
    Ok(c)
}

/// A gather kernel as [`encode`] needs it.
pub(crate) struct Kernel<'a, S: FnOnce(Io) -> String, W: Fn(usize, usize) -> usize> {
    /// Names the shader module (and, with the constants, the pipeline).
    pub name: &'a str,
    /// Its whole source for the call's tensors, made only when the context has no module of that name yet.
    pub source: S,
    /// Its override constants for the shape ([`constants`] and its own).
    pub constants: Vec<(&'static str, f64)>,
    /// Output channels per block (what the Slice's block indices count).
    pub block: usize,
    /// Workgroups a slice of `samples` samples and `blocks` channel blocks needs.
    pub workgroups: W,
}

/// Encodes a gather kernel over every slice of the plan into `pass`; `output` has `shape`'s output size.
pub(crate) fn encode<S: FnOnce(Io) -> String, W: Fn(usize, usize) -> usize>(
    ctx: &GpuContext,
    shape: &ConvShape,
    kernel: Kernel<'_, S, W>,
    [input, weight, output]: [&GpuTensor; 3],
    bias: Option<&GpuTensor>,
    pass: &mut wgpu::ComputePass<'_>,
) -> Result<()> {
    let io = Io::new(ctx, input.dtype(), output.dtype());
    let name = format!("{} {}", kernel.name, io.key());
    let module = ctx.module_with(&name, || (kernel.source)(io))?;
    let key = format!("{name} {:?} {:?}", ctx.options().shader_checks, kernel.constants);
    let pipeline = ctx.pipeline(key, &module, &kernel.constants)?;
    let slices = plan(shape, input, output);
    if slices.is_empty() {
        return Ok(());
    }
    let ops = Operands::new(ctx, weight.single_buffer("weight", ctx)?, bias)?;
    ctx.scoped(|| {
        for s in &slices {
            let (b0, b1) = channel_blocks(shape.out_per_group(), kernel.block, &s.oc);
            let grid = grid(ctx, (kernel.workgroups)(s.samples.len(), b1 - b0));
            let u = SliceUniform::new(s, (b0, b1), grid.0);
            let input = &input.chunks()[s.in_chunk];
            let out = &output.chunks()[s.out_chunk];
            dispatch(ctx, pass, &pipeline, bytemuck::bytes_of(&u), input, &ops, out, grid);
        }
        Ok(())
    })
}
