// grad_weight.wgsl: the gradient of conv_transpose2d with respect to its weight, one workgroup per (block of
// 4 input channels, block of 4 output channels of the same group, tap).
//
// What it computes: grad_weight[ic, oc, kh, kw] = sum over samples n and input pixels (ih, iw) whose output
// pixel  oh = ih*S_H - P_H + kh*D_H  (likewise ow) lies inside the output  of
// x[n, ic, ih, iw] * grad_output[n, g*Cog + oc, oh, ow]: a reduction over batch and space.
//
// Mapping: for its tap, a workgroup walks the input pixels that reach the output (one rectangle per tap,
// bounds computed once) with its invocations on consecutive columns, so x and grad_output rows are read
// coalesced. Each invocation keeps a 4x4 block of products in four vec4 accumulators (4 x values times 4
// grad_output values per pixel), then the workgroup adds its invocations' partial sums in a fixed tree in
// workgroup memory. Nothing is added with atomics, so the result is the same bit for bit on every run.
//
// Large tensors arrive in slices (src/gpu/plan.rs, x read with grad_output): a dispatch covers samples
// [0, n_count) of the bound chunks, x channels [ic_begin, ic_end) and grad_output channels [oc_begin, oc_end);
// with accumulate set, dispatches add to grad_weight in the plan's fixed order (the host clears it first).

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

const WG: u32 = 256u;
const BLOCK: u32 = 4u;

struct Slice {
    n_count: u32,
    x_offset: u32,          // element offset of (sample 0 of the slice, channel ic_begin) in the x binding
    go_offset: u32,         // element offset of (sample 0 of the slice, channel go_first_channel) in grad_output
    go_first_channel: u32,
    ic_begin: u32,
    ic_end: u32,
    oc_begin: u32,          // grad_output channels of the slice (global channel numbers)
    oc_end: u32,
    accumulate: u32,
    dispatch_width: u32,
}

@group(0) @binding(0) var<uniform> slice: Slice;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> grad_out: array<f32>;
@group(0) @binding(3) var<storage, read_write> grad_w: array<f32>;

var<workgroup> partial: array<vec4<f32>, WG>;

// Input indices [lo, hi) along one axis whose output index i*s - pad + k*d lies in [0, out_size), for tap k.
fn axis_range(k: u32, s: u32, pad: u32, d: u32, in_size: u32, out_size: u32) -> vec2<u32> {
    let kd = k * d;
    if (out_size - 1u + pad < kd) {
        return vec2<u32>(0u, 0u);
    }
    var lo = 0u;
    if (pad > kd) {
        lo = (pad - kd + s - 1u) / s;
    }
    let hi = min(in_size, (out_size - 1u + pad - kd) / s + 1u);
    return vec2<u32>(lo, max(lo, hi));
}

// The workgroup's sum of v (every invocation calls it, in uniform control flow).
fn workgroup_sum(v: vec4<f32>, lid: u32) -> vec4<f32> {
    partial[lid] = v;
    workgroupBarrier();
    for (var half = WG / 2u; half > 0u; half /= 2u) {
        if (lid < half) {
            partial[lid] += partial[lid + half];
        }
        workgroupBarrier();
    }
    let total = partial[0];
    workgroupBarrier();
    return total;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let cig = C_IN / GROUPS;
    let cog = C_OUT / GROUPS;
    let taps = K_H * K_W;
    let ic_blocks = (cig + BLOCK - 1u) / BLOCK;
    let oc_blocks = (cog + BLOCK - 1u) / BLOCK;
    let wg = wid.y * slice.dispatch_width + wid.x;
    if (wg >= GROUPS * ic_blocks * oc_blocks * taps) {
        return;
    }
    let tap = wg % taps;
    let ocb = (wg / taps) % oc_blocks;
    let icb = (wg / (taps * oc_blocks)) % ic_blocks;
    let group = wg / (taps * oc_blocks * ic_blocks);
    let kh = tap / K_W;
    let kw = tap % K_W;

    // The block's channels that exist and belong to this slice: [lo, hi) in global numbering.
    let ic_lo = max(group * cig + icb * BLOCK, slice.ic_begin);
    let ic_hi = min(min(group * cig + icb * BLOCK + BLOCK, group * cig + cig), slice.ic_end);
    let oc_lo = max(group * cog + ocb * BLOCK, slice.oc_begin);
    let oc_hi = min(min(group * cog + ocb * BLOCK + BLOCK, group * cog + cog), slice.oc_end);
    if (ic_lo >= ic_hi || oc_lo >= oc_hi) {
        return;
    }
    // Lanes past the block's end read a valid channel (clamped); their sums are never stored.
    let ics = min(ic_lo + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(ic_hi - 1u));
    let ocs = min(oc_lo + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(oc_hi - 1u));
    let in_pixels = IN_H * IN_W;
    let out_pixels = OUT_H * OUT_W;
    let x_planes = (ics - slice.ic_begin) * in_pixels;
    let go_planes = (ocs - slice.go_first_channel) * out_pixels;

    let rh = axis_range(kh, S_H, P_H, D_H, IN_H, OUT_H);
    let rw = axis_range(kw, S_W, P_W, D_W, IN_W, OUT_W);
    let nh = rh.y - rh.x;
    let nw = rw.y - rw.x;
    let count = slice.n_count * nh * nw;

    var a0 = vec4<f32>(0.0);
    var a1 = vec4<f32>(0.0);
    var a2 = vec4<f32>(0.0);
    var a3 = vec4<f32>(0.0);
    for (var t = lid; t < count; t += WG) {
        let c = t % nw;
        let r = (t / nw) % nh;
        let n = t / (nw * nh);
        let ih = rh.x + r;
        let iw = rw.x + c;
        let xi = slice.x_offset + n * C_IN * in_pixels + ih * IN_W + iw;
        let gi = slice.go_offset + n * C_OUT * out_pixels + (ih * S_H + kh * D_H - P_H) * OUT_W
            + (iw * S_W + kw * D_W - P_W);
        let xv = vec4<f32>(x[xi + x_planes.x], x[xi + x_planes.y], x[xi + x_planes.z], x[xi + x_planes.w]);
        let gv = vec4<f32>(grad_out[gi + go_planes.x], grad_out[gi + go_planes.y], grad_out[gi + go_planes.z],
                           grad_out[gi + go_planes.w]);
        a0 += xv.x * gv;
        a1 += xv.y * gv;
        a2 += xv.z * gv;
        a3 += xv.w * gv;
    }
    let s0 = workgroup_sum(a0, lid);
    let s1 = workgroup_sum(a1, lid);
    let s2 = workgroup_sum(a2, lid);
    let s3 = workgroup_sum(a3, lid);

    // Invocation i < 16 stores the sum of x channel i / 4 with grad_output channel i % 4.
    if (lid < BLOCK * BLOCK) {
        let i = lid / BLOCK;
        let o = lid % BLOCK;
        let ic = ic_lo + i;
        let oc = oc_lo + o;
        if (ic < ic_hi && oc < oc_hi) {
            let sums = mat4x4<f32>(s0, s1, s2, s3);
            let idx = (ic * cog + (oc - group * cog)) * taps + tap;
            var v = sums[i][o];
            if (slice.accumulate != 0u) {
                v += grad_w[idx];
            }
            grad_w[idx] = v;
        }
    }
}
