// direct.wgsl: transposed convolution in gather form, one invocation per (sample, output pixel, block of
// OC_BLOCK output channels of one group).
//
// What it computes: out[n, co, oh, ow] = bias[co] + sum over the input channels ic of co's group and the
// taps (kh, kw) with  oh = ih*S_H - P_H + kh*D_H  (likewise for ow)  of  x[n, ic, ih, iw] * w[ic, co % Cog, kh, kw].
//
// Taps are enumerated, never tested (axis_taps in shaders/forward/gather.wgsl, which the host puts in front of this
// file with the Slice uniform and the bindings, behind the shape constants of shaders/common/shape.wgsl): the loop
// bounds are exact and no division happens inside the loops.
//
// Mapping: invocations are numbered with ow fastest, then oh, then the channel block, then the sample, so a
// subgroup reads neighbouring input pixels and shares the same weights. Each invocation keeps OC_BLOCK
// accumulators in one vec4 and reuses every input value for all of them.
//
// Large tensors arrive in slices, as for every gather kernel (shaders/forward/gather.wgsl).

override WORKGROUP_SIZE: u32 = 256u;

const OC_BLOCK: u32 = 4u;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let id = (wid.y * slice.dispatch_width + wid.x) * WORKGROUP_SIZE + lid;
    let pixels = OUT_H * OUT_W;
    if (id >= slice.n_count * slice.block_count * pixels) {
        return;
    }
    let ow = id % OUT_W;
    let oh = (id / OUT_W) % OUT_H;
    let block = slice.block_begin + (id / pixels) % slice.block_count;
    let n = id / (pixels * slice.block_count);

    let cog = C_OUT / GROUPS;
    let cig = C_IN / GROUPS;
    let blocks_per_group = (cog + OC_BLOCK - 1u) / OC_BLOCK;
    let group = block / blocks_per_group;
    let oc0 = (block % blocks_per_group) * OC_BLOCK; // first output channel of the block, within the group
    // Weight reads for channels past the group's end are clamped to a valid one and their results discarded.
    let last = cog - 1u;
    let ocs = vec4<u32>(oc0, min(oc0 + 1u, last), min(oc0 + 2u, last), min(oc0 + 3u, last));

    let ic_lo = max(group * cig, slice.ic_begin);
    let ic_hi = min(group * cig + cig, slice.ic_end);

    let th = axis_taps(oh, P_H, S_H, D_H, G_H, INV_H, K_H, IN_H);
    let tw = axis_taps(ow, P_W, S_W, D_W, G_W, INV_W, K_W, IN_W);
    let kh_step = S_H / G_H;
    let ih_step = D_H / G_H;
    let kw_step = S_W / G_W;
    let iw_step = D_W / G_W;
    let taps = K_H * K_W;

    // Taps outside, input channels inside: an output pixel with no tap (most of them when the stride exceeds
    // the kernel's reach, e.g. 16 of 25 phases of a stride-5 3x3 kernel) skips the channel loop entirely.
    var acc = vec4<f32>(0.0);
    let plane = IN_H * IN_W;
    let x_sample = slice.in_offset + n * C_IN * plane;
    for (var jh = 0u; jh < th.count; jh++) {
        let kh = th.k + jh * kh_step;
        let ih = th.i - jh * ih_step;
        for (var jw = 0u; jw < tw.count; jw++) {
            let kw = tw.k + jw * kw_step;
            let iw = tw.i - jw * iw_step;
            let tap = kh * K_W + kw;
            let w_taps = ocs * taps + vec4<u32>(tap);
            var xi = x_sample + (ic_lo - slice.ic_begin) * plane + ih * IN_W + iw;
            for (var ic = ic_lo; ic < ic_hi; ic++) {
                let w_row = (ic * cog) * taps;
                let wv = vec4<f32>(w_ld(w_row + w_taps.x), w_ld(w_row + w_taps.y), w_ld(w_row + w_taps.z), w_ld(w_row + w_taps.w));
                acc += x_ld(xi) * wv;
                xi += plane;
            }
        }
    }

    let out_sample = slice.out_offset + n * C_OUT * pixels;
    for (var j = 0u; j < OC_BLOCK; j++) {
        let oc = oc0 + j;
        let co = group * cog + oc;
        if (oc >= cog || co < slice.oc_begin || co >= slice.oc_end) {
            continue;
        }
        let idx = out_sample + (co - slice.out_first_channel) * pixels + oh * OUT_W + ow;
        var v = acc[j];
        if (slice.accumulate != 0u) {
            v += out_ld(idx);
        } else if (HAS_BIAS) {
            v += bias_ld(co);
        }
        out_st(idx, v);
    }
}
