// direct.wgsl: transposed convolution in gather form, one invocation per (sample, output pixel, block of
// OC_BLOCK output channels of one group).
//
// What it computes: out[n, co, oh, ow] = bias[co] + sum over the input channels ic of co's group and the
// taps (kh, kw) with  oh = ih*S_H - P_H + kh*D_H  (likewise for ow)  of  x[n, ic, ih, iw] * w[ic, co % Cog, kh, kw].
//
// Taps are enumerated, never tested: for q = oh + P_H, the valid kh satisfy kh*D_H = q (mod S_H). With
// g = gcd(S_H, D_H) that needs g | (q mod S_H), and then kh runs through an arithmetic progression of step
// S_H/g starting at ((q mod S_H)/g * INV_H) mod (S_H/g), INV_H being the inverse of D_H/g modulo S_H/g (host
// computed). Along it ih = (q - kh*D_H)/S_H falls by D_H/g per step, so the loop bounds are exact, every
// operation is on non-negative u32 values, and no division happens inside the loops.
//
// Mapping: invocations are numbered with ow fastest, then oh, then the channel block, then the sample, so a
// subgroup reads neighbouring input pixels and shares the same weights. Each invocation keeps OC_BLOCK
// accumulators in one vec4 and reuses every input value for all of them.
//
// Large tensors arrive in slices (see src/gpu/plan.rs): one dispatch covers samples [0, n_count) of the bound
// chunks, input channels [ic_begin, ic_end) and output channel blocks [block_begin, block_begin + block_count).
// When a sample's input channels are split over several dispatches, the later ones add to the output
// (accumulate = 1) instead of starting from the bias.

override C_IN: u32;
override C_OUT: u32;
override GROUPS: u32;
override IN_H: u32;
override IN_W: u32;
override OUT_H: u32;
override OUT_W: u32;
override K_H: u32;
override K_W: u32;
override S_H: u32;
override S_W: u32;
override P_H: u32;
override P_W: u32;
override D_H: u32;
override D_W: u32;
// gcd(S, D), the inverse of D/gcd modulo S/gcd (0 when S/gcd is 1); computed on the host.
override G_H: u32;
override G_W: u32;
override INV_H: u32;
override INV_W: u32;
override HAS_BIAS: bool;
override WORKGROUP_SIZE: u32 = 256u;

const OC_BLOCK: u32 = 4u;

struct Slice {
    n_count: u32,
    in_offset: u32,      // element offset of (sample 0 of the slice, channel ic_begin) in the input binding
    out_offset: u32,     // element offset of (sample 0 of the slice, channel of block_begin's group start) in the output binding
    out_first_channel: u32, // the output channel stored at out_offset
    ic_begin: u32,
    ic_end: u32,
    block_begin: u32,
    block_count: u32,
    oc_begin: u32,       // output channels outside [oc_begin, oc_end) belong to another slice
    oc_end: u32,
    accumulate: u32,
    dispatch_width: u32, // workgroups per row of the dispatch grid
}

@group(0) @binding(0) var<uniform> slice: Slice;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

// First tap and tap count along one axis for output coordinate o.
struct Taps {
    k: u32,   // first kernel index
    i: u32,   // its input index
    count: u32,
}

fn axis_taps(o: u32, pad: u32, s: u32, d: u32, g: u32, inv: u32, k_size: u32, in_size: u32) -> Taps {
    var t = Taps(0u, 0u, 0u);
    let q = o + pad;
    let r = q % s;
    if (r % g != 0u) {
        return t;
    }
    let k_step = s / g;
    let i_step = d / g;
    let k0 = ((r / g) * inv) % k_step;
    if (k0 >= k_size || k0 * d > q) {
        return t;
    }
    var k = k0;
    var i = (q - k0 * d) / s;
    if (i >= in_size) {
        // Skip the taps whose input index lies past the end.
        let skip = (i - (in_size - 1u) + i_step - 1u) / i_step;
        k += skip * k_step;
        if (k >= k_size || skip * i_step > i) {
            return t;
        }
        i -= skip * i_step;
    }
    t.k = k;
    t.i = i;
    t.count = min((k_size - 1u - k) / k_step + 1u, i / i_step + 1u);
    return t;
}

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
                let wv = vec4<f32>(w[w_row + w_taps.x], w[w_row + w_taps.y], w[w_row + w_taps.z], w[w_row + w_taps.w]);
                acc += x[xi] * wv;
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
            v += out[idx];
        } else if (HAS_BIAS) {
            v += bias[co];
        }
        out[idx] = v;
    }
}
