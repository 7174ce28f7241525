//! Splitting one convolution into slices of work that each read one input chunk and write one output chunk
//! (see [`GpuTensor`]'s chunks). Every algorithm dispatches through this plan, so large tensors work the same
//! way for all of them.

use std::ops::Range;

use crate::gpu::buffers::GpuTensor;
use crate::params::ConvShape;

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
    let (cig, cog) = (shape.in_per_group(), shape.out_per_group());
    let mut slices: Vec<Slice> = Vec::new();
    for n in 0..shape.batch {
        let ins = sample_parts(input, n, shape.in_channels);
        for (out_chunk, oc, out_offset) in sample_parts(output, n, shape.out_channels) {
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
                let whole = s.ic == (0..shape.in_channels) && s.oc == (0..shape.out_channels);
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
