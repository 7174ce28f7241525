// nhwc_f16.wgsl: the input of the padded-NHWC cooperative-matrix kernel (shaders/coop_nhwc.wgsl, precision
// `fast`): the f32 NCHW input, scaled by a power of two, as f16 in NHWC order, each image in H_P rows of W_P pixels
// of C_IN channels with the input starting at row PAD_T and column PAD_L: zeros around it, and input rows or
// columns past H_P or W_P (which no output reads: padding crops them) left out. Pixels are PIXEL_STRIDE halves
// apart (C_IN + 8: see shaders/coop_nhwc.wgsl); the 8 halves past C_IN are written as zeros (never read: writing
// them makes every 32-byte sector of the padded pixels whole, so that no partial sector is written back). A
// workgroup moves 32 padded pixels x 32 channels of one padded row through workgroup memory: read along the
// input's rows (coalesced), written along the channels, 4 halves per invocation (8-byte stores; the block of the
// last channels writes the pad too). Each workgroup moves BLOCKS_PER_WG consecutive blocks (channels fastest) and
// takes one atomic for all of them: on the H100, 4 blocks per workgroup ran the copy up to 17% faster than one
// (docs/PERFORMANCE.md, q4-q5; the blocks' order did not matter). C_IN is a multiple of 16 (the kernel's `check`).
// One dispatch per input chunk (its samples: the uniform's sample range).
//
// The scale, in two passes so that the input is read once where its magnitudes are like the last call's (a
// separate pass for the largest magnitude cost 6-12% of the whole convolution, docs/PERFORMANCE.md k8):
// - the first pass (FIXUP false) scales by 2^guess[0], the exponent the last call of this shape (any batch size)
//   on this context found, and takes the largest finite magnitude of the values it copies into op_max[0] (as f32
//   bits, one atomic per workgroup, as shaders/absmax.wgsl does; input rows or columns past H_P or W_P, which no
//   output reads, do not count);
// - shaders/scale_check.wgsl then compares the guess with the exponent op_max[0] asks for (shaders/scale.wgsl);
//   where they differ, it keeps the new exponent as the next guess and this shader runs again (FIXUP true,
//   dispatched indirectly), scaling by that exponent. The result is the same either way.

enable f16;

override C_IN: u32;
override IN_H: u32;
override IN_W: u32;
override PAD_T: u32;
override PAD_L: u32;
override H_P: u32;
override W_P: u32;
override PIXEL_STRIDE: u32;
override FIXUP: bool;
override BLOCKS_PER_WG: u32; // blocks of 32 pixels x 32 channels per workgroup

struct Params {
    first_sample: u32,   // the chunk's first sample (index into the whole padded tensor)
    samples: u32,        // samples in the chunk
    dispatch_width: u32, // workgroups per grid row
    _pad: u32,
}

@group(0) @binding(0) var<uniform> u: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> xp: array<vec4<f16>>; // 4 channels of a pixel each
@group(0) @binding(3) var<storage, read_write> op_max: array<atomic<u32>>;
@group(0) @binding(4) var<storage, read> guess: array<i32>; // the scale exponent of the first pass

const BLOCK: u32 = 32u;
var<workgroup> tile: array<f32, BLOCK * (BLOCK + 1u)>; // [channel][pixel], rows padded against bank conflicts
var<workgroup> largest: atomic<u32>; // the block's largest finite magnitude, as f32 bits (first pass)

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    var k = guess[0];
    if (FIXUP) {
        k = min(scale_exponent(atomicLoad(&op_max[0])), 127);
    }
    let scale = ldexp(1.0, k);
    let col_blocks = (W_P + BLOCK - 1u) / BLOCK;
    let ch_blocks = (C_IN + BLOCK - 1u) / BLOCK;
    let blocks = u.samples * H_P * col_blocks * ch_blocks;
    let first = (wid.y * u.dispatch_width + wid.x) * BLOCKS_PER_WG;
    if (first >= blocks) {
        return;
    }
    let last = min(first + BLOCKS_PER_WG, blocks);
    let lane = lid % BLOCK;
    if (!FIXUP && lid == 0u) {
        atomicStore(&largest, 0u); // before the barriers below, and every atomicMax after them
    }
    var m = 0u;
    for (var block = first; block < last; block++) {
        let row = block / (col_blocks * ch_blocks); // padded row of the chunk: sample * H_P + hp
        let rest = block % (col_blocks * ch_blocks);
        let wp0 = (rest / ch_blocks) * BLOCK;
        let c0 = (rest % ch_blocks) * BLOCK;
        let n = row / H_P;
        let h = i32(row % H_P) - i32(PAD_T);
        for (var i = lid / BLOCK; i < BLOCK; i += 8u) {
            let c = c0 + i;
            let w = i32(wp0 + lane) - i32(PAD_L);
            var v = 0.0;
            if (c < C_IN && h >= 0 && h < i32(IN_H) && w >= 0 && w < i32(IN_W)) {
                v = x[((n * C_IN + c) * IN_H + u32(h)) * IN_W + u32(w)];
                let b = bitcast<u32>(v) & 0x7fffffffu;
                if (b < 0x7f800000u) {
                    m = max(m, b); // non-finite values pass through as themselves and do not set the scale
                }
            }
            tile[i * (BLOCK + 1u) + lane] = v;
        }
        workgroupBarrier();
        // Invocation (pixel i, quad q) writes channels c0 + 4q .. + 3 of pixel i; quads 8 and 9 are the pad when
        // this block ends exactly at C_IN.
        let i = lid / 8u;
        let wp = wp0 + i;
        let p = (u.first_sample + n) * H_P + row % H_P;
        for (var q = lid % 8u; q < BLOCK / 4u + 2u; q += 8u) {
            let c = c0 + 4u * q;
            if (wp < W_P && c < PIXEL_STRIDE && (q < BLOCK / 4u || c >= C_IN)) {
                var v = vec4<f16>();
                if (c < C_IN) {
                    let t = 4u * q * (BLOCK + 1u) + i;
                    v = vec4<f16>(vec4<f32>(tile[t], tile[t + BLOCK + 1u], tile[t + 2u * (BLOCK + 1u)],
                                            tile[t + 3u * (BLOCK + 1u)]) * scale);
                }
                xp[((p * W_P + wp) * PIXEL_STRIDE + c) / 4u] = v;
            }
        }
        workgroupBarrier(); // the tile is read before the next block overwrites it
    }
    if (!FIXUP) {
        atomicMax(&largest, m);
        workgroupBarrier();
        if (lid == 0u) {
            atomicMax(&op_max[0], atomicLoad(&largest));
        }
    }
}
