// grad_weight_nhwc.wgsl: the gradient of conv_transpose2d with respect to its weight at precision `fast`, as a
// tensor-core GEMM whose fragments load straight from f16 NHWC copies of x and grad_output.
//
// What it computes: grad_weight[ic, oc, kh, kw] = sum over samples n and input pixels (i, j) of
// x[n, ic, i, j] * grad_output[n, oc, i*S_H - P_H + kh*D_H, j*S_W - P_W + kw*D_W] (zero outside grad_output);
// per tap a GEMM with M = input channels, N = output channels, K = samples x input pixels.
//
// Why this form. The host copies x as f16 NHWC, each row rounded up to WB blocks of 16 pixels (zeros past the row),
// and grad_output as f16 NHWC with its padding written out as zeros: P_H rows and P_W columns before it, GH rows of
// GW pixels per image, enough that every tap of every copied x pixel reads inside the image (src/gpu/nhwc_copy.rs;
// x at the scale of slot X_SLOT of the maxima, grad_output at slot G_SLOT's). At stride 1 grad_output's copy may be
// the one grad_input's padded-NHWC kernel made (src/gpu/forward/coop_nhwc.rs): laid out for both, with images at
// least GH x GW, so every read lands where it lands in a copy of this kernel's own. Then a block of 16 consecutive
// x pixels of one row is, for every tap, 16 grad_output pixels S_W apart in one padded row: the A operand of a
// 16-deep product (16 input channels x 16 pixels) is a column-major matrix at stride CSX in the x copy, the B
// operand (16 pixels x 16 output channels) a row-major one at stride S_W * CSG in the grad_output copy, the tap
// moving only its first row. Both load with one instruction from storage at 16-byte aligned addresses (the pixel
// strides are the channels plus 8 halves, which also spreads a load's rows over L1's banks, as in
// shaders/forward/coop_nhwc.wgsl); no workgroup memory, no barrier.
//
// Gathered (GATHERED). Where x's rows are short of whole blocks (dcgan's rows of 8 pixels would leave half of every
// block zeros), a block is 16 consecutive x pixels of any rows instead (x copied in rows of its own width), and
// grad_output is gathered per tap first (shaders/backward/grad_weight_gather.wgsl: for each tap a region of
// TAP_PIXELS pixels, pixel p the one x pixel p meets under that tap): a block's B operand for a tap is 16
// consecutive pixels of the tap's region (G_STEP 1), the tap moving it by TAP_PIXELS. The gathered copy holds
// K_H * K_W / (S_H * S_W) times grad_output's pixels.
//
// Tiling. A subgroup's job is WM input channels x WN output channels of TAPS_PER taps (consecutive in kh, kw
// order) over one split of the blocks: its A fragments serve all its taps (the taps differ only in B). A job's
// accumulators are TAPS_PER x (WM/16) x (WN/16) named f32 matrices (generated: TAP_DECL, ACC_DECL, MATH,
// EPILOGUE). The variant for adapters without cooperative matrices computes the same products on the FMA units:
// lane l of the 32 a job has owns elements l, l + 32, ... of each tap's block, f32 sums of the same f16 values.
// A workgroup runs SUBS consecutive jobs, output-channel tile fastest, then input-channel tile, tap group and
// split: neighbouring subgroups read the same x and grad_output lines (L1) and the splits' workgroups run in
// order (L2).
//
// Non-finite values. The zeros the copies add (x's pixels past a row's end in rows, past its last pixel gathered;
// grad_output's padding) enter the products: an inf or NaN multiplied by one gives NaN in the sums of its channel's
// weight gradients, where the exact kernels, which sum only the pixel pairs inside both tensors, may give a finite
// value or an inf. Every element non-finite in the exact kernels is non-finite here too (docs/RELIABILITY.md).
//
// Uniform control flow (naga's rule for cooperative-matrix operations): every job runs the same number of blocks
// (u.chunk). Blocks past the tensors' end (the last split's) load both operands from zero pixels at the copies'
// ends (the tail rows; gathered, grad_output's zeros after x's pixels in the first tap's region), taps past the
// kernel's (the last tap group's) compute a real tap's products and store them to a scratch region no one reads
// (u.trash), and the host rounds the job count up to whole workgroups with splits past the end: all zeros.
//
// The epilogue stores each accumulator, unscaled, to partial sums laid out [split][tap][ic][oc] (row-major
// 16 x 16 stores of stride C_OUT), which shaders/backward/grad_weight_reduce.wgsl adds in a fixed order into
// grad_weight's [ic][oc][kh][kw]: the same bits on every run.
//
// The host puts in front: the tile's constants (WM, WN, TAPS_PER, SUBS), and behind: the maxima's binding and
// the scale functions.

override C_IN: u32;
override C_OUT: u32;
override K_H: u32;
override K_W: u32;
override S_H: u32;
override S_W: u32;
override D_H: u32;
override D_W: u32;
override IN_H: u32;  // x rows per image
override WB: u32;    // 16-pixel blocks per x row
override GH: u32;    // the grad_output copy's rows and columns per image
override GW: u32;
override CSX: u32;   // halves between the copies' pixels
override CSG: u32;
override X_SLOT: u32; // the maxima's slots of x's and grad_output's largest magnitudes
override G_SLOT: u32;
override GATHERED: bool;   // blocks across x's rows, grad_output gathered per tap (see above)
override TAP_PIXELS: u32;  // gathered: pixels of a tap's region
override G_STEP: u32;      // pixels between a block's consecutive grad_output pixels: S_W, or gathered 1

struct Job {
    blocks: u32,         // 16-pixel blocks of x (samples x rows x WB; gathered, x's pixels / 16 rounded up)
    chunk: u32,          // blocks per split
    zero_x: u32,         // the first pixel of x's tail row (zeros)
    zero_g: u32,         // the first pixel of grad_output's tail row (gathered: the first zero of the first region)
    trash: u32,          // where taps past the kernel's store (C_IN x C_OUT floats past the partial sums)
    dispatch_width: u32, // workgroups per grid row
    workgroups: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> u: Job;
@group(0) @binding(1) var<storage, read> xq: array<f16>;
@group(0) @binding(2) var<storage, read> gq: array<f16>;
@group(0) @binding(3) var<storage, read_write> partial: array<f32>;

@compute @workgroup_size(32u * SUBS)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
//#PROLOGUE
    let wg = wid.y * u.dispatch_width + wid.x;
    if (wg >= u.workgroups) {
        return; // the grid's last row: the whole workgroup leaves
    }
    let taps = K_H * K_W;
    // (At least one tile: the host's shapes have whole tiles; max keeps any constants' division defined.)
    let n_tiles = max(C_OUT / WN, 1u);
    let m_tiles = max(C_IN / WM, 1u);
    let tap_groups = (taps + TAPS_PER - 1u) / TAPS_PER;
    let job = wg * SUBS + lid / 32u;
    let oc0 = (job % n_tiles) * WN;
    let ic0 = ((job / n_tiles) % m_tiles) * WM;
    let tg = (job / (n_tiles * m_tiles)) % tap_groups;
    let split = job / (n_tiles * m_tiles * tap_groups);
    // Tap t of the group: its first grad_output pixel relative to the block's tap (0, 0) (taps past the kernel's
    // compute tap 0 again: see above).
//#TAP_DECL
//#ACC_DECL
    for (var s = 0u; s < u.chunk; s++) {
        let b = split * u.chunk + s;
        let live = b < u.blocks;
        let r = b / WB;              // sample * IN_H + row
        let i = r % IN_H;
        let n = r / IN_H;
        let xa = select(u.zero_x, b * 16u, live) * CSX + ic0;
        let g0 = select(u.zero_g, select((n * GH + i * S_H) * GW + (b % WB) * 16u * S_W, b * 16u, GATHERED), live);
//#MATH
    }
//#EPILOGUE
}
