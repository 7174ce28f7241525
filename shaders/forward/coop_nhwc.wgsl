// coop_nhwc.wgsl: one stride phase of a transposed convolution on tensor cores (precision `fast`), its f16
// operands read straight from storage (direct tiles) or its input rows staged in workgroup memory once per kernel
// row (staged-rows tiles, `_rows`; see "Two K loops" below).
//
// Why this form. A stride phase (output rows R_H + S_H*i, columns R_W + S_W*j) is a stride-1 correlation of the
// input with the phase's taps (src/gpu/kernel.rs, `axis_phase`), flipped so that packed tap (a, b) reads input
// row i + first_h + a*D_H and column j + first_w + b*D_W. At stride 1 there is one phase and every tap. With the
// input zero-padded (`before` rows and columns before it) and stored as f16 in NHWC order
// (shaders/forward/coop_nhwc_input.wgsl), and the phase's output pixels counted over the padded images' pixels too
// (m = (n * H_P + i) * W_P + j), the input pixel under output pixel m and tap (a, b) is m + BASE + a*D_H*W_P +
// b*D_W for every m, BASE = (first_h + before_h) * W_P + first_w + before_w: the whole phase is a 1-D convolution
// of the flat pixel index. A padded row needs room only for the phase's outputs and the input positions they read:
// the reads of its last outputs that run past its end land in the next row's left margin (zeros), those of a
// sample's last rows in the next sample's top margin, and those of the last sample in zero rows the copy writes
// after it (src/gpu/forward/coop_nhwc.rs, `Geometry`: the 130 x 260 outputs of a 3 x 5 kernel take 130 x 260 padded
// pixels, not 132 x 264). So the A operand of a K step (16 consecutive pixels x 16 channels of one tap) is a
// row-major 16 x 16 matrix at stride PIXEL_STRIDE in the padded input, and the B operand (16 channels x 16 output
// channels of one tap) a row-major matrix at stride W_ROW in the phase's part of the packed weight
// (shaders/forward/coop_nhwc_weights.wgsl): both load with `coopLoadT` (the direct tiles' A and every tile's B
// directly from storage), and the neighbouring subgroups and taps that read the same lines find them in L1/L2.
// Where fragments load from storage, the strides are the row's values plus 8 halves (16 bytes): rows a multiple of
// 128 bytes apart (64 or 128 channels) fall in the same L1 banks, and a load's 16 rows are then served one bank
// pass each; shifted by 16 bytes per row, 8 rows share a pass. With these strides the tensor-core ceiling with
// loads from storage at this kernel's addresses measured much higher (docs/PERFORMANCE.md). The staged tiles read
// the padded input only in their stage's copy and pad their staged rows instead: their PIXEL_STRIDE is C_IN (C_IN + 8
// where the copy is laid out for a second reader too: src/gpu/nhwc_copy.rs, `CopyNeeds`). Pixels
// with i >= PH_H or j >= PH_W (rows and columns the layout needs beyond the phase's outputs: few or none at stride
// 1, more where rows are rounded for aligned stores, on strided phases and on small images) are computed from
// padding and never stored. At stride 1 this form measured much faster than the staged GEMM kernel's
// cooperative-matrix variant (docs/PERFORMANCE.md). A phase
// without taps (kernel smaller than the stride) runs no K step and stores the bias.
//
// Tiling. A workgroup of SG_M x SG_N subgroups computes BM = SG_M * WM pixels x BN = SG_N * WN output
// channels; each subgroup a WM x WN block as (WM/16) x (WN/16) named f32 accumulators (generated: ACC_DECL,
// MATH). Neighbouring workgroups take the channel tiles of the same pixels (they share A in L2). The epilogue
// (EPILOGUE, generated) stores a 16-pixel fragment's accumulators straight to the output with `coopStore`
// (column-major, the channel plane as stride: 16 consecutive floats per channel), unscaled and with the bias
// added as matrices, wherever its 16 pixels are 16 consecutive output pixels and the first is 16-byte aligned
// (`direct_run`: stride 1 along W, within one row and the phase, the plane a multiple of 4 floats). The other
// fragments (a row's end, strided phases, unaligned rows) go through workgroup memory, 32 pixels (two fragments)
// or 16 x 16 channels at a time, so that the lanes store them pixel by pixel. Storing the aligned fragments
// straight measured faster than moving every fragment through workgroup memory (docs/PERFORMANCE.md).
//
// Two K loops, one per tile kind (the generator keeps one section). Direct: every fragment loads from storage.
// Staged rows: the taps of one kernel row read the same input pixels shifted by D_W, so the workgroup copies the
// BM + (taps - 1) * D_W pixels of up to TAPS_PER_STAGE taps (STAGE_C channels at a time) into workgroup memory once
// and loads their A fragments from there, in rows padded by 8 halves (STAGE_STRIDE; B stays in storage). That
// halves the loads from storage, which bound the direct loop (docs/PERFORMANCE.md: its products alone run much
// faster). Workgroup memory is kept small: on NVIDIA's driver all workgroups on a multiprocessor share about 48
// KiB of it, so every KiB a workgroup declares can cost a workgroup per multiprocessor. With 128 x 128 tiles (four
// subgroups sharing the staged rows) this form measured faster than the direct one; with 64 output channels it
// lost until the staged tiles' input lost its pixel pad, and now wins on kernel rows of many taps
// (src/gpu/forward/coop_nhwc.rs, `STAGED_MIN_ROW_TAPS`).

override C_IN: u32;
override C_OUT: u32;
override K_H: u32;
override K_W: u32;
override D_H: u32;
override D_W: u32;
override H_P: u32;
override W_P: u32;
override OUT_H: u32;
override OUT_W: u32;
override HAS_BIAS: bool;
override S_H: u32;     // stride: the phase's outputs are R_H + S_H*i, R_W + S_W*j
override S_W: u32;
override R_H: u32;
override R_W: u32;
override PH_H: u32;    // the phase's output rows and columns
override PH_W: u32;
override BASE: u32;    // input pixel of packed tap (0, 0) relative to the output pixel (see above)
override W_OFF: u32;   // the phase's packed weight, in halves from the start
override PIXEL_STRIDE: u32; // halves between the padded input's pixels (C_IN + 8 or C_IN, see above)
override W_ROW: u32;   // halves between the packed weight's rows (C_OUT + 8)

struct Dispatch {
    m_begin: u32,        // first padded pixel of this dispatch (its first sample * H_P * W_P)
    m_end: u32,          // one past its last padded pixel
    first_sample: u32,   // the output chunk's first sample
    dispatch_width: u32, // workgroups per grid row
    n_tiles: u32,        // output-channel tiles: C_OUT / BN
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> u: Dispatch;
@group(0) @binding(1) var<storage, read> xp: array<f16>;
@group(0) @binding(2) var<storage, read> wp: array<f16>;
// bias (binding 3) and out (4), in the call's dtype, read with bias_ld(i) and written with out_st(i, v) (declared by
// the host: src/gpu/wgsl/operands.rs). The direct stores of the epilogue exist for f32 outputs only (a
// cooperative matrix stores its own element type, and naga converts none from f32 to f16); a half-precision output
// takes every fragment through workgroup memory.

//#MODULE

// Where the phase's padded pixel m lands in the output chunk (channel 0), and whether it is stored: not where it
// is padding or past the dispatch.
struct OutPixel {
    index: u32,
    ok: bool,
}

fn out_pixel(m: u32) -> OutPixel {
    let n = m / (H_P * W_P);
    let rest = m % (H_P * W_P);
    let oh = rest / W_P;
    let ow = rest % W_P;
    let ok = m < u.m_end && oh < PH_H && ow < PH_W;
    let index = (n - u.first_sample) * C_OUT * (OUT_H * OUT_W) + (R_H + S_H * oh) * OUT_W + R_W + S_W * ow;
    return OutPixel(select(0u, index, ok), ok);
}

// Stores output channel oc of pixel p: the sum unscaled, the bias added.
fn store(p: OutPixel, oc: u32, v: f32) {
    if (p.ok) {
        var r = unscale(v);
        if (HAS_BIAS) {
            r += bias_ld(oc);
        }
        out_st(p.index + oc * (OUT_H * OUT_W), r);
    }
}

// Whether the 16 phase pixels from m are 16 consecutive output pixels, all stored, the first 16-byte aligned: then
// a fragment of them may be stored with `coopStore`, whose address and stride Vulkan needs 16-byte aligned. The
// output chunk's binding starts 256-byte aligned. (Where the padded rows are the output's rows, a fragment over a
// row's end is consecutive too; storing those straight measured slower: docs/PERFORMANCE.md.)
fn direct_run(m: u32) -> bool {
    let rest = m % (H_P * W_P);
    let oh = rest / W_P;
    let ow = rest % W_P;
    return S_W == 1u && (OUT_H * OUT_W) % 4u == 0u && m + 16u <= u.m_end && oh < PH_H && ow + 16u <= PH_W
        && out_pixel(m).index % 4u == 0u;
}

//#STAGE_FNS_BEGIN
// Stages of a kernel row: its taps in groups of TAPS_PER_STAGE, each group in slices of STAGE_C channels.
fn stages_per_row() -> u32 {
    return ((K_W + TAPS_PER_STAGE - 1u) / TAPS_PER_STAGE) * (C_IN / STAGE_C);
}

// Stage `stage` of the staged loop (see main): kernel row a, taps first_tap .. first_tap + taps - 1, channels cc ..
// cc + STAGE_C - 1; its `pixels` staged pixels (BM + the shifts of its taps, at most the staged rows' capacity:
// NhwcTile::stage_pixels, TAPS_PER_STAGE is chosen so) start at padded pixel `first_pixel` of the tile at m_tile.
struct Stage {
    a: u32,
    first_tap: u32,
    taps: u32,
    cc: u32,
    pixels: u32,
    first_pixel: u32,
}

fn stage_at(m_tile: u32, stage: u32) -> Stage {
    let slices = C_IN / STAGE_C;
    let a = stage / stages_per_row();
    let first_tap = (stage % stages_per_row()) / slices * TAPS_PER_STAGE;
    let taps = min(TAPS_PER_STAGE, K_W - first_tap);
    let first_pixel = m_tile + BASE + a * D_H * W_P + first_tap * D_W;
    return Stage(a, first_tap, taps, stage % slices * STAGE_C, BM + (taps - 1u) * D_W, first_pixel);
}

// Quad i (4 channels) of stage s's staged rows, from the padded input: channels cc + 4 * (i % STAGE_QUADS) of
// staged pixel i / STAGE_QUADS (neighbouring invocations read a pixel's channels, contiguous in the padded input);
// zero past the stage's pixels (never written to the staged rows).
fn stage_quad(s: Stage, i: u32) -> vec4<f16> {
    if (i >= s.pixels * STAGE_QUADS) {
        return vec4<f16>();
    }
    // 4 channels of a pixel: (s.first_pixel + i / STAGE_QUADS) * PIXEL_STRIDE + s.cc is a multiple of 8 halves.
    return xp4[((s.first_pixel + i / STAGE_QUADS) * PIXEL_STRIDE + s.cc) / 4u + i % STAGE_QUADS];
}
//#STAGE_FNS_END

@compute @workgroup_size(THREADS)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
//#PROLOGUE
    let n_tiles = u.n_tiles;
    let wg = wid.y * u.dispatch_width + wid.x;
    let m_tile = u.m_begin + (wg / n_tiles) * BM;
    if (m_tile >= u.m_end) {
        return; // the grid's last row: the whole workgroup leaves, before any barrier
    }
    let sg = lid / 32u;
    let lane = lid % 32u;
    let m0 = m_tile + (sg % SG_M) * WM;
    let n0 = (wg % n_tiles) * BN + (sg / SG_M) * WN;
//#ACC_DECL
//#DIRECT_BEGIN
    // Direct: every fragment loaded from storage (A: pixel a_base / PIXEL_STRIDE of the padded input).
    for (var tap = 0u; tap < K_H * K_W; tap++) {
        let a_base = (m0 + BASE + (tap / K_W) * D_H * W_P + (tap % K_W) * D_W) * PIXEL_STRIDE;
        let b_base = W_OFF + tap * C_IN * W_ROW + n0;
        for (var c0 = 0u; c0 < C_IN; c0 += 16u) {
//#MATH
        }
    }
//#DIRECT_END
//#STAGED_BEGIN
    // Staged rows: the taps of one kernel row read the same input pixels shifted by D_W, so the workgroup copies
    // the pixels its tile needs for TAPS_PER_STAGE taps of a row (BM plus the shifts, STAGE_C channels) into
    // workgroup memory once, and every A fragment of those taps loads from there (B still from storage). The
    // stages (kernel row a, taps from first_tap, channels from cc; in that order) are one loop, so that each
    // stage's loads from storage are issued into registers (`ahead`) before the products of the stage before
    // it: they arrive while the tensor cores work, and the copy between the barriers only writes workgroup memory
    // (loading a stage ahead measured faster: docs/PERFORMANCE.md).
    let sg_row = (sg % SG_M) * WM; // this subgroup's first pixel in the staged rows
    let stages = K_H * stages_per_row();
    var ahead: array<vec4<f16>, STAGE_LOADS>;
    if (stages > 0u) {
        let s = stage_at(m_tile, 0u);
        for (var k = 0u; k < STAGE_LOADS; k++) {
            ahead[k] = stage_quad(s, lid + k * THREADS);
        }
    }
    for (var stage = 0u; stage < stages; stage++) {
        let s = stage_at(m_tile, stage);
        workgroupBarrier(); // every fragment of the last stage is loaded
        for (var k = 0u; k < STAGE_LOADS; k++) {
            let i = lid + k * THREADS;
            if (i < s.pixels * STAGE_QUADS) {
                let v = ahead[k];
                let at = (i / STAGE_QUADS) * STAGE_STRIDE + 4u * (i % STAGE_QUADS);
                a_stage[at] = v.x;
                a_stage[at + 1u] = v.y;
                a_stage[at + 2u] = v.z;
                a_stage[at + 3u] = v.w;
            }
        }
        workgroupBarrier();
        if (stage + 1u < stages) {
            let next = stage_at(m_tile, stage + 1u);
            for (var k = 0u; k < STAGE_LOADS; k++) {
                ahead[k] = stage_quad(next, lid + k * THREADS);
            }
        }
        for (var b = 0u; b < s.taps; b++) {
            let a_base = (b * D_W + sg_row) * STAGE_STRIDE;
            let b_base = W_OFF + ((s.a * K_W + s.first_tap + b) * C_IN + s.cc) * W_ROW + n0;
            for (var c0 = 0u; c0 < STAGE_C; c0 += 16u) {
//#MATH
            }
        }
    }
//#STAGED_END
//#EPILOGUE
}
