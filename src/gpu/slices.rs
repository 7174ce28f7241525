//! Splitting one convolution into slices of work that each read one input chunk and write one output chunk
//! (see [`GpuTensor`]'s chunks). Every algorithm dispatches through this plan, so large tensors work the same
//! way for all of them, the backward kernels included: there "input" is the tensor a kernel reads and
//! "output" the one it writes (for grad_input: grad_output and grad_input; see [`plan_between`]).

use std::ops::Range;

use crate::gpu::memory::GpuTensor;
use crate::params::ConvShape;

/// One side of a plan: a chunked `[N, C, H, W]` tensor whose `channels` form groups of `per_group`.
#[derive(Clone, Copy)]
pub(crate) struct Side<'a> {
    pub tensor: &'a GpuTensor,
    pub channels: usize,
    pub per_group: usize,
}

/// One dispatch's share of the work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Slice {
    /// Samples covered; more than one only when both chunks hold whole samples.
    pub samples: Range<usize>,
    pub in_chunk: usize,
    /// Element offset, within the input chunk, of (first sample, channel `ic.start`).
    pub in_offset: usize,
    pub out_chunk: usize,
    /// Element offset, within the output chunk, of (first sample, channel `out_first_channel`).
    pub out_offset: usize,
    pub out_first_channel: usize,
    pub ic: Range<usize>,
    pub oc: Range<usize>,
    /// Add to the output already written by an earlier slice (same samples and output channels, other input
    /// channels) instead of starting from the bias.
    pub accumulate: bool,
}

/// Where a slice reads and writes, as the first nine fields of the uniform blocks of shaders/forward/gemm.wgsl and
/// shaders/forward/winograd.wgsl (`Dispatch`), field for field.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct SliceFields {
    n_count: u32,
    in_offset: u32,
    out_offset: u32,
    out_first_channel: u32,
    ic_begin: u32,
    ic_end: u32,
    oc_begin: u32,
    oc_end: u32,
    accumulate: u32,
}

impl From<&Slice> for SliceFields {
    fn from(s: &Slice) -> Self {
        SliceFields {
            n_count: s.samples.len() as u32,
            in_offset: s.in_offset as u32,
            out_offset: s.out_offset as u32,
            out_first_channel: s.out_first_channel as u32,
            ic_begin: s.ic.start as u32,
            ic_end: s.ic.end as u32,
            oc_begin: s.oc.start as u32,
            oc_end: s.oc.end as u32,
            accumulate: s.accumulate as u32,
        }
    }
}

/// Parts of one sample's channels held by each chunk: (chunk index, channel range, element offset in chunk).
fn sample_parts(t: &GpuTensor, n: usize, channels: usize) -> Vec<(usize, Range<usize>, usize)> {
    let (lo, hi) = (n * channels, (n + 1) * channels);
    t.chunks()
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let (a, b) = (lo.max(c.first_plane), hi.min(c.first_plane + c.planes));
            (a < b).then(|| (i, a - lo..b - lo, (a - c.first_plane) * t.plane_elems()))
        })
        .collect()
}

/// Slices covering every output element exactly once with a non-accumulating write (plus accumulating ones
/// where a sample's input channels span several chunks), in an order where each accumulation follows its write.
pub(crate) fn plan(shape: &ConvShape, input: &GpuTensor, output: &GpuTensor) -> Vec<Slice> {
    plan_between(
        shape.batch,
        Side { tensor: input, channels: shape.in_channels, per_group: shape.in_per_group() },
        Side { tensor: output, channels: shape.out_channels, per_group: shape.out_per_group() },
    )
}

/// [`plan`] between any tensor read (`input`) and any tensor written (`output`) sample by sample, their
/// channels connected group to group.
pub(crate) fn plan_between(batch: usize, input: Side<'_>, output: Side<'_>) -> Vec<Slice> {
    let (cig, cog) = (input.per_group, output.per_group);
    let mut slices: Vec<Slice> = Vec::new();
    for n in 0..batch {
        let ins = sample_parts(input.tensor, n, input.channels);
        for (out_chunk, oc, out_offset) in sample_parts(output.tensor, n, output.channels) {
            let groups_out = oc.start / cog..(oc.end - 1) / cog + 1;
            let mut first = true;
            for (in_chunk, ic, in_offset) in &ins {
                let groups_in = ic.start / cig..(ic.end - 1) / cig + 1;
                let overlaps = groups_in.start < groups_out.end && groups_out.start < groups_in.end;
                // The first slice of an output range writes all of it (bias included), even if its input
                // channels feed none of those outputs; later ones only matter where they overlap.
                if !first && !overlaps {
                    continue;
                }
                let s = Slice {
                    samples: n..n + 1,
                    in_chunk: *in_chunk,
                    in_offset: *in_offset,
                    out_chunk,
                    out_offset,
                    out_first_channel: oc.start,
                    ic: ic.clone(),
                    oc: oc.clone(),
                    accumulate: !first,
                };
                first = false;
                // Whole samples in the same chunks as the previous slice: extend it instead.
                let whole = s.ic == (0..input.channels) && s.oc == (0..output.channels);
                match slices.last_mut() {
                    Some(p)
                        if whole
                            && p.ic == s.ic
                            && p.oc == s.oc
                            && p.in_chunk == s.in_chunk
                            && p.out_chunk == s.out_chunk
                            && p.samples.end == n =>
                    {
                        p.samples.end = n + 1
                    }
                    _ => slices.push(s),
                }
            }
        }
    }
    slices
}
