// grad_input.wgsl: the gradient of conv_transpose2d with respect to its input, one invocation per (sample,
// input pixel, block of IC_BLOCK input channels of one group).
//
// What it computes: grad_input[n, ic, ih, iw] = sum over the output channels co of ic's group and the taps
// (kh, kw) with  oh = ih*S_H - P_H + kh*D_H  inside [0, OUT_H)  (likewise ow)  of
// grad_output[n, co, oh, ow] * w[ic, co % Cog, kh, kw]. This is a regular strided, dilated, grouped convolution
// of grad_output with the weight: every input pixel reaches its output pixels through every tap, so there is
// nothing to divide. The valid taps of an axis are one contiguous range [k_lo, k_hi], computed once per
// invocation; the loops run exactly over it.
//
// Mapping: invocations are numbered with iw fastest, then ih, then the channel block, then the sample, so a
// subgroup reads neighbouring grad_output pixels and shares the same weights. Each invocation keeps IC_BLOCK
// accumulators in one vec4 and reuses every grad_output value for all of them.
//
// Large tensors arrive in slices (src/gpu/slices.rs with grad_output as the tensor read and grad_input as the
// one written): one dispatch covers samples [0, n_count) of the bound chunks, grad_output channels
// [go_begin, go_end) and grad_input channel blocks [block_begin, block_begin + block_count). When a sample's
// grad_output channels are split over several dispatches, the later ones add to what the first wrote.
//
// The host puts the shape's override constants (shaders/common/shape.wgsl) in front of this file.

override WORKGROUP_SIZE: u32 = 256u;

const IC_BLOCK: u32 = 4u;

struct Slice {
    n_count: u32,
    go_offset: u32,        // element offset of (sample 0 of the slice, channel go_begin) in the grad_output binding
    gi_offset: u32,        // element offset of (sample 0 of the slice, channel gi_first_channel) in the grad_input binding
    gi_first_channel: u32,
    go_begin: u32,
    go_end: u32,
    block_begin: u32,
    block_count: u32,
    gi_begin: u32,         // grad_input channels outside [gi_begin, gi_end) belong to another slice
    gi_end: u32,
    accumulate: u32,
    dispatch_width: u32,   // workgroups per row of the dispatch grid
}

@group(0) @binding(0) var<uniform> slice: Slice;
// grad_out (binding 1), w (2) and grad_in (3, written), in the tensors' dtype: read with grad_out_ld(i) and the
// like, written with grad_in_st(i, v) (declared by the host: src/gpu/wgsl/operands.rs).

// The taps k of one axis whose output index i*s - pad + k*d lies in [0, out_size): k in [lo, lo + count).
struct Taps {
    lo: u32,
    count: u32,
}

fn axis_taps(i: u32, s: u32, pad: u32, d: u32, k_size: u32, out_size: u32) -> Taps {
    var t = Taps(0u, 0u);
    let base = i * s;
    if (out_size - 1u + pad < base) {
        return t;
    }
    if (pad > base) {
        t.lo = (pad - base + d - 1u) / d;
    }
    let hi = min(k_size - 1u, (out_size - 1u + pad - base) / d);
    if (hi >= t.lo) {
        t.count = hi - t.lo + 1u;
    }
    return t;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let id = (wid.y * slice.dispatch_width + wid.x) * WORKGROUP_SIZE + lid;
    let pixels = IN_H * IN_W;
    if (id >= slice.n_count * slice.block_count * pixels) {
        return;
    }
    let iw = id % IN_W;
    let ih = (id / IN_W) % IN_H;
    let block = slice.block_begin + (id / pixels) % slice.block_count;
    let n = id / (pixels * slice.block_count);

    let cog = C_OUT / GROUPS;
    let cig = C_IN / GROUPS;
    let blocks_per_group = (cig + IC_BLOCK - 1u) / IC_BLOCK;
    let group = block / blocks_per_group;
    let ic0 = (block % blocks_per_group) * IC_BLOCK; // first input channel of the block, within the group
    // Weight reads for channels past the group's end are clamped to a valid one and their results discarded.
    let last = cig - 1u;
    let taps = K_H * K_W;
    let rows = (group * cig + vec4<u32>(ic0, min(ic0 + 1u, last), min(ic0 + 2u, last), min(ic0 + 3u, last)))
        * cog * taps;

    let co_lo = max(group * cog, slice.go_begin);
    let co_hi = min(group * cog + cog, slice.go_end);
    let th = axis_taps(ih, S_H, P_H, D_H, K_H, OUT_H);
    let tw = axis_taps(iw, S_W, P_W, D_W, K_W, OUT_W);
    let out_pixels = OUT_H * OUT_W;

    var acc = vec4<f32>(0.0);
    let go_sample = slice.go_offset + n * C_OUT * out_pixels;
    for (var co = co_lo; co < co_hi; co++) {
        let go_plane = go_sample + (co - slice.go_begin) * out_pixels;
        let w_col = (co - group * cog) * taps;
        for (var kh = th.lo; kh < th.lo + th.count; kh++) {
            let oh = ih * S_H + kh * D_H - P_H;
            for (var kw = tw.lo; kw < tw.lo + tw.count; kw++) {
                let ow = iw * S_W + kw * D_W - P_W;
                let g = grad_out_ld(go_plane + oh * OUT_W + ow);
                let t = w_col + kh * K_W + kw;
                acc += g * vec4<f32>(w_ld(rows.x + t), w_ld(rows.y + t), w_ld(rows.z + t), w_ld(rows.w + t));
            }
        }
    }

    let gi_sample = slice.gi_offset + n * C_IN * pixels;
    for (var j = 0u; j < IC_BLOCK; j++) {
        let ic = ic0 + j;
        let ci = group * cig + ic;
        if (ic >= cig || ci < slice.gi_begin || ci >= slice.gi_end) {
            continue;
        }
        let idx = gi_sample + (ci - slice.gi_first_channel) * pixels + ih * IN_W + iw;
        var v = acc[j];
        if (slice.accumulate != 0u) {
            v += grad_in_ld(idx);
        }
        grad_in_st(idx, v);
    }
}
