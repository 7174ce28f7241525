// coop_nhwc_input.wgsl: the input of the padded-NHWC cooperative-matrix kernel (shaders/forward/coop_nhwc.wgsl,
// precision `fast`): the NCHW input (f32, f16 or bf16, read with x_ld: src/gpu/wgsl/operands.rs), scaled by a power
// of two where it is not f16 already (SCALED), as f16 in NHWC order, each image in H_P rows of W_P pixels of C_IN
// channels with the input starting at row PAD_T and column PAD_L: zeros around it, and input rows or columns
// outside COPY_H_BEGIN..COPY_H_END, COPY_W_BEGIN..COPY_W_END (which no output reads: padding crops them) left out.
// The last chunk's dispatch also writes the zero rows after the last sample that its last outputs read (`rows`: the
// kernel's reads run past a row's end into the next row's margin). Pixels are PIXEL_STRIDE halves apart (C_IN, or
// C_IN + 8 for the kernel's direct tiles and the other readers: see shaders/forward/coop_nhwc.wgsl); the halves
// past C_IN are written as zeros (never read: writing them makes every 32-byte sector of the padded pixels whole,
// so that no partial sector is written back). A workgroup moves blocks of BLOCK_P padded pixels x BLOCK_C channels
// of one padded row through workgroup memory: read along the input's rows (coalesced), written along the channels,
// 4 halves per invocation (8-byte stores; the block of the last channels writes the pad too), BLOCKS_PER_WG
// consecutive blocks (channels fastest) with one atomic for all of them. Measured (docs/PERFORMANCE.md): several
// blocks per workgroup ran faster than one; blocks with more channels than pixels (longer runs of each pixel
// written) ran faster and ones with more pixels (longer runs of each input row read) much slower; 16 x 64 blocks
// copy a 64-channel input faster than 32 x 32 ones, and go 4 per workgroup up to 512 MiB of padded input, 2 above
// (src/gpu/nhwc_copy.rs, `PrepBlock`). C_IN is a multiple of 16 (the kernel's `check`). One dispatch per input
// chunk (its samples: the uniform's sample range).
//
// The scale (f32 and bf16 inputs; an f16 input is copied as it is, SCALED false, and runs neither the scale check nor
// the fix-up), in two passes so that the input is read once where its magnitudes are like the last call's (a
// separate pass for the largest magnitude measured a noticeable share of the whole convolution,
// docs/PERFORMANCE.md):
// - the first pass (FIXUP false) scales by 2^guess[0], the exponent the last call of this shape (any batch size)
//   on this context found, and takes the largest finite magnitude of the values it copies into op_max[MAX_SLOT]
//   (as f32 bits, one atomic per workgroup, as shaders/common/absmax.wgsl does; input rows or columns outside the
//   copied ones, which no output reads, do not count);
// - shaders/forward/coop_nhwc_scale_check.wgsl then compares the guess with the exponent op_max[MAX_SLOT] asks for
//   (shaders/common/scale.wgsl); where they differ, it keeps the new exponent as the next guess and this shader
//   runs again (FIXUP true, dispatched indirectly), scaling by that exponent. The result is the same either way.
// The forward's input and grad_weight's x take both passes (src/gpu/nhwc_copy.rs, `encode_at_guess`); a copy whose
// tensor's largest magnitude was taken beforehand (grad_weight's grad_output) runs only the FIXUP pass, reading
// slot MAX_SLOT (`encode_at_maximum`).
//
// The host puts the shape's override constants (shaders/common/shape.wgsl) and x's binding in front of this file,
// and the scale functions after it.

// The input rows and columns copied, from the first some output reads to the last (padding may crop the others).
override COPY_H_BEGIN: u32;
override COPY_H_END: u32;
override COPY_W_BEGIN: u32;
override COPY_W_END: u32;
override PAD_T: u32;
override PAD_L: u32;
override H_P: u32;
override W_P: u32;
override PIXEL_STRIDE: u32;
override FIXUP: bool;
override BLOCK_P: u32;       // padded pixels of a block (along a padded row)
override BLOCK_C: u32;       // channels of a block, a multiple of 4
override QUADS: u32;         // BLOCK_C / 4: 4-channel stores per pixel of a block
override BLOCKS_PER_WG: u32; // blocks per workgroup
override SCALED: bool;       // false for an f16 input: scale 1, no maximum taken
override MAX_SLOT: u32;      // the slot of op_max that holds the input's largest magnitude

struct Params {
    first_sample: u32,   // the chunk's first sample (index into the whole padded tensor)
    samples: u32,        // samples in the chunk
    dispatch_width: u32, // workgroups per grid row
    rows: u32,           // padded rows to write: samples * H_P, plus the tail rows for the last chunk only
}

@group(0) @binding(0) var<uniform> u: Params;
enable f16;
@group(0) @binding(2) var<storage, read_write> xp: array<vec4<f16>>; // 4 channels of a pixel each
@group(0) @binding(3) var<storage, read_write> op_max: array<atomic<u32>>;
@group(0) @binding(4) var<storage, read> guess: array<i32>; // the scale exponent of the first pass

const THREADS: u32 = 256u;
// The tile holds BLOCK_C rows of BLOCK_P + 1 floats: 16 x 64 blocks (17 x 64 floats) and 32 x 32 (33 x 32) fit.
const TILE_FLOATS: u32 = 1088u;
var<workgroup> tile: array<f32, TILE_FLOATS>; // [channel][pixel], rows padded against bank conflicts
var<workgroup> largest: atomic<u32>; // the block's largest finite magnitude, as f32 bits (first pass)

@compute @workgroup_size(THREADS)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    var k = select(0, guess[0], SCALED);
    if (FIXUP) {
        k = min(scale_exponent(atomicLoad(&op_max[MAX_SLOT])), 127);
    }
    let scale = ldexp(1.0, k);
    let col_blocks = (W_P + BLOCK_P - 1u) / BLOCK_P;
    let ch_blocks = (C_IN + BLOCK_C - 1u) / BLOCK_C;
    let blocks = u.rows * col_blocks * ch_blocks;
    let first = (wid.y * u.dispatch_width + wid.x) * BLOCKS_PER_WG;
    if (first >= blocks) {
        return;
    }
    let last = min(first + BLOCKS_PER_WG, blocks);
    let lane = lid % BLOCK_P;
    if (!FIXUP && lid == 0u) {
        atomicStore(&largest, 0u); // before the barriers below, and every atomicMax after them
    }
    var m = 0u;
    for (var block = first; block < last; block++) {
        // Padded row of the chunk, sample * H_P + hp; with n past the chunk's samples, a tail row (zeros).
        let row = block / (col_blocks * ch_blocks);
        let rest = block % (col_blocks * ch_blocks);
        let wp0 = (rest / ch_blocks) * BLOCK_P;
        let c0 = (rest % ch_blocks) * BLOCK_C;
        let n = row / H_P;
        let h = i32(row % H_P) - i32(PAD_T);
        // Read along the input's rows: invocation lid reads pixel `lane` of channels lid / BLOCK_P + k * (THREADS
        // / BLOCK_P).
        for (var i = lid / BLOCK_P; i < BLOCK_C; i += THREADS / BLOCK_P) {
            let c = c0 + i;
            let w = i32(wp0 + lane) - i32(PAD_L);
            var v = 0.0;
            if (n < u.samples && c < C_IN && h >= i32(COPY_H_BEGIN) && h < i32(COPY_H_END) && w >= i32(COPY_W_BEGIN)
                && w < i32(COPY_W_END)) {
                let e = ((n * C_IN + c) * IN_H + u32(h)) * IN_W + u32(w);
                v = x_ld(e);
                m = max(m, finite_magnitude_bits(v)); // non-finite values do not set the scale
            }
            tile[i * (BLOCK_P + 1u) + lane] = v;
        }
        workgroupBarrier();
        // Written along the channels: slot s stores channels c0 + 4q .. + 3 of pixel i (q = s % quads), zeros
        // past C_IN; consecutive invocations fill a pixel's channels. The block of the last channels also writes
        // the pixel's pad (its quads past C_IN), in the same run: where one block holds all the channels, the
        // block's pixels are then written as one contiguous run.
        let quads = select(QUADS, QUADS + (PIXEL_STRIDE - C_IN) / 4u, c0 + BLOCK_C >= C_IN);
        let p = (u.first_sample + n) * H_P + row % H_P;
        for (var s = lid; s < BLOCK_P * quads; s += THREADS) {
            let i = s / quads;
            let c = c0 + 4u * (s % quads);
            let wp = wp0 + i;
            if (wp < W_P && c < PIXEL_STRIDE) {
                var v = vec4<f16>();
                if (c < C_IN) {
                    let t = (c - c0) * (BLOCK_P + 1u) + i;
                    v = vec4<f16>(vec4<f32>(tile[t], tile[t + BLOCK_P + 1u], tile[t + 2u * (BLOCK_P + 1u)],
                                            tile[t + 3u * (BLOCK_P + 1u)]) * scale);
                }
                xp[((p * W_P + wp) * PIXEL_STRIDE + c) / 4u] = v;
            }
        }
        workgroupBarrier(); // the tile is read before the next block overwrites it
    }
    if (!FIXUP && SCALED) {
        atomicMax(&largest, m);
        workgroupBarrier();
        if (lid == 0u) {
            atomicMax(&op_max[MAX_SLOT], atomicLoad(&largest));
        }
    }
}
