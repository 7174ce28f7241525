// grad_weight.wgsl: the gradient of conv_transpose2d with respect to its weight, as one GEMM per tap with the
// reduction dimension split into chunks.
//
// What it computes: grad_weight[ic, oc, kh, kw] = sum over samples n and input pixels (ih, iw) whose output
// pixel  oh = ih*S_H - P_H + kh*D_H  (likewise ow) lies inside the output  of
// x[n, ic, ih, iw] * grad_output[n, g*Cog + oc, oh, ow]. For one tap the pixels that reach the output form one
// rectangle per sample (bounds computed once), so per tap and group this is a GEMM: M = input channels,
// N = output channels, K = samples x rectangle pixels.
//
// Mapping: a workgroup computes a TILE x TILE (input channel x output channel) tile of one tap over one chunk
// of K (split-K: K is long, the tile grid short). TILE is 64, or 32 or 16 where the groups have fewer channels
// (the host prepends it, src/gpu/grad_weight.rs; a 64-wide tile over 8 x 16 channels would be 97% waste).
// K is walked in steps of BK pixels: the x step (BK x TILE) and the grad_output step (BK x TILE) are staged in
// workgroup memory, loaded with consecutive invocations on consecutive pixels (coalesced rows); each of the
// WG = (TILE/4)^2 invocations keeps a 4 x 4 register tile (four named vec4s) and reads its operands from
// workgroup memory as vec4s. Each chunk's tile goes to its own slot of a scratch buffer
// [split][Cin][Cog][taps]; shaders/reduce_splits.wgsl then adds the slots in a fixed order. No atomics: the
// result is the same bit for bit on every run.
//
// Large tensors arrive in slices (src/gpu/plan.rs, x read with grad_output): a dispatch covers samples
// [0, n_count) of the bound chunks, x channels [ic_begin, ic_end) and grad_output channels [oc_begin, oc_end);
// channels outside the slice contribute zero to its slots.

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

// TILE (input channels and output channels per workgroup tile) is prepended by the host.
const WG: u32 = (TILE / 4u) * (TILE / 4u);
const BK: u32 = 16u;     // pixels per K step
const LOADS: u32 = TILE * BK / WG; // values of each operand one invocation stages per step (4 to 16)
// The staging covers each of the TILE rows of a step exactly once (rows row0 + (WG/BK)*j).
const_assert WG % BK == 0u && (TILE * BK) % WG == 0u;

struct Slice {
    n_count: u32,
    x_offset: u32,          // element offset of (sample 0 of the slice, channel ic_begin) in the x binding
    go_offset: u32,         // element offset of (sample 0 of the slice, channel go_first_channel) in grad_output
    go_first_channel: u32,
    ic_begin: u32,
    ic_end: u32,
    oc_begin: u32,          // grad_output channels of the slice (global channel numbers)
    oc_end: u32,
    splits: u32,            // K chunks per tile
    chunk: u32,             // pixels per K chunk (a multiple of BK)
    dispatch_width: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> slice: Slice;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> grad_out: array<f32>;
@group(0) @binding(3) var<storage, read_write> partial: array<f32>;

var<workgroup> xs: array<vec4<f32>, BK * TILE / 4u>;   // [k][ic / 4]
var<workgroup> gs: array<vec4<f32>, BK * TILE / 4u>;   // [k][oc / 4]

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

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let cig = C_IN / GROUPS;
    let cog = C_OUT / GROUPS;
    let taps = K_H * K_W;
    let ic_tiles = (cig + TILE - 1u) / TILE;
    let oc_tiles = (cog + TILE - 1u) / TILE;
    let wg = wid.y * slice.dispatch_width + wid.x;
    if (wg >= GROUPS * ic_tiles * oc_tiles * taps * slice.splits) {
        return;
    }
    let split = wg % slice.splits;
    let tap = (wg / slice.splits) % taps;
    let oct = (wg / (slice.splits * taps)) % oc_tiles;
    let ict = (wg / (slice.splits * taps * oc_tiles)) % ic_tiles;
    let group = wg / (slice.splits * taps * oc_tiles * ic_tiles);
    let kh = tap / K_W;
    let kw = tap % K_W;

    // This tile's channels in global numbering, restricted to the group and the slice: [lo, hi).
    let ic_lo = group * cig + ict * TILE;
    let ic_hi = min(min(ic_lo + TILE, group * cig + cig), slice.ic_end);
    let oc_lo = group * cog + oct * TILE;
    let oc_hi = min(min(oc_lo + TILE, group * cog + cog), slice.oc_end);

    let rh = axis_range(kh, S_H, P_H, D_H, IN_H, OUT_H);
    let rw = axis_range(kw, S_W, P_W, D_W, IN_W, OUT_W);
    let nh = rh.y - rh.x;
    let nw = rw.y - rw.x;
    let count = slice.n_count * nh * nw;
    let k_begin = min(split * slice.chunk, count);
    let k_end = min(k_begin + slice.chunk, count);
    let in_pixels = IN_H * IN_W;
    let out_pixels = OUT_H * OUT_W;

    // Staging: invocation lid loads pixel k_local = lid % BK of the step for channel rows lid / BK + (WG/BK)*j.
    let k_local = lid % BK;
    let row0 = lid / BK;

    // Register tile: input channels 4*ty .. 4*ty+3, output channels 4*tx .. 4*tx+3 of the workgroup tile.
    let tx = lid % (TILE / 4u);
    let ty = lid / (TILE / 4u);
    var a0 = vec4<f32>(0.0);
    var a1 = vec4<f32>(0.0);
    var a2 = vec4<f32>(0.0);
    var a3 = vec4<f32>(0.0);

    for (var k0 = k_begin; k0 < k_end; k0 += BK) {
        let k = k0 + k_local;
        var xv = array<f32, LOADS>();
        var gv = array<f32, LOADS>();
        if (k < k_end) {
            let c = k % nw;
            let r = (k / nw) % nh;
            let n = k / (nw * nh);
            let ih = rh.x + r;
            let iw = rw.x + c;
            let xi = slice.x_offset + n * C_IN * in_pixels + ih * IN_W + iw;
            let gi = slice.go_offset + n * C_OUT * out_pixels + (ih * S_H + kh * D_H - P_H) * OUT_W
                + (iw * S_W + kw * D_W - P_W);
            for (var j = 0u; j < LOADS; j++) {
                let ic = ic_lo + row0 + j * (WG / BK);
                if (ic >= slice.ic_begin && ic < ic_hi) {
                    xv[j] = x[xi + (ic - slice.ic_begin) * in_pixels];
                }
                let oc = oc_lo + row0 + j * (WG / BK);
                if (oc >= slice.oc_begin && oc < oc_hi) {
                    gv[j] = grad_out[gi + (oc - slice.go_first_channel) * out_pixels];
                }
            }
        }
        workgroupBarrier();
        // Rows row0 + (WG/BK)*j: one vec4 lane each, stored element by element.
        for (var j = 0u; j < LOADS; j++) {
            let row = row0 + j * (WG / BK);
            let slot = k_local * (TILE / 4u) + row / 4u;
            xs[slot][row % 4u] = xv[j];
            gs[slot][row % 4u] = gv[j];
        }
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk++) {
            let a = xs[kk * (TILE / 4u) + ty];
            let b = gs[kk * (TILE / 4u) + tx];
            a0 += a.x * b;
            a1 += a.y * b;
            a2 += a.z * b;
            a3 += a.w * b;
        }
    }

    // Slot [split][ic][oc][tap] of the scratch buffer; every element of the tile inside the group is written
    // (zero when this chunk holds no pixel or the channel lies outside the slice).
    let sums = array<vec4<f32>, 4>(a0, a1, a2, a3);
    for (var i = 0u; i < 4u; i++) {
        let ic = ic_lo + ty * 4u + i;
        if (ic >= group * cig + cig) {
            break;
        }
        for (var o = 0u; o < 4u; o++) {
            let oc = oc_lo + tx * 4u + o;
            if (oc < group * cog + cog) {
                let idx = ((split * C_IN + ic) * cog + (oc - group * cog)) * taps + tap;
                partial[idx] = sums[i][o];
            }
        }
    }
}
