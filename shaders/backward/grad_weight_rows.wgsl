// grad_weight_rows.wgsl: the gradient of conv_transpose2d with respect to its weight for strided problems whose
// groups have few channels (at most 16 x 16, or 32 input channels whose kernel rows fit one invocation), by rows:
// each workgroup reads the grad_output rows of a block of kernel rows for a block of input rows once and
// accumulates every kernel column's products from them.
//
// What it computes: partial[slot][ic][oc][tap] = sum over the block's input rows ih, the columns iw and, for tap
// (kh, kw), the output pixel oh = ih*S_H - P_H + kh*D_H, ow = iw*S_W - P_W + kw*D_W where it lies inside the
// output, of x[n, ic, ih, iw] * grad_output[n, g*Cog + oc, oh, ow]; one slot per sample and block of RB input rows.
// shaders/backward/grad_weight_reduce.wgsl then adds the slots in a fixed order (deterministic, no atomics), as it
// does for shaders/backward/grad_weight.wgsl.
//
// Why this form. shaders/backward/grad_weight.wgsl runs one GEMM per tap, and at a stride above 1 each tap reads
// its own strided subset of grad_output: at stride 2 x 3 and dilation 2 x 1, a 3 x 5 kernel's 15 taps all read the
// same half of the rows, every 32-byte sector of them, and groups of 8 x 16 channels take 16-invocation tiles;
// there grad_weight took most of the backward's time (docs/PERFORMANCE.md). Here a kernel row's taps share one pass
// over their grad_output rows: the lanes of one output channel read neighbouring columns (kernel columns D_W apart)
// through L1.
// That measured faster there. On groups of 32 x 64 channels (kb81) it is faster than the per-tap GEMM's 64-wide
// register tiles only with every kernel row in one invocation, so the host gives it the shapes the GEMM would run
// with its 16-wide tile, and groups of up to 32 input channels whose kernel rows fit one invocation's accumulators
// (src/gpu/backward/grad_weight.rs, `RowsKernel::for_shape`).
//
// Mapping: a workgroup takes (sample n, block of RB input rows, block of KHB kernel rows, group g, block of OCB
// output channels), the kernel-row block fastest so that the workgroups reading overlapping grad_output rows (other
// kernel rows, same input rows) run together and share them through L2. Invocation (KHR kernel rows from kh0, oc,
// kw), kw fastest, keeps KHR x CIG4 vec4 accumulators: its sums for the group's input channels at each of its
// kernel rows. For each input row, the x row (the group's channels, XW columns at a time) is staged in workgroup
// memory as [iw][ic / 4] (loaded along the row, coalesced) once for all the workgroup's kernel rows; each
// invocation then walks the staged columns its tap reaches the output from, loads UNROLL grad_output values of
// each of its rows at a time and multiply-adds them with the staged x values, each staged value read once for its
// KHR rows (one load at a time, in a loop that tested each column, measured much slower; reading the staged x
// once per kernel row cost about a quarter of the kernel's time).
//
// The host prepends CIG4 (vec4s of input channels per group, zero-padded) and KHR (kernel rows per invocation),
// the sizes of each invocation's accumulator and load arrays, so constants, and the shape's constants
// (shaders/common/shape.wgsl); it sets the layout's override constants below (src/gpu/backward/grad_weight.rs,
// `RowsKernel`), appends shaders/backward/tap_range.wgsl, and binds whole tensors (one binding each: the host uses
// this kernel only where they fit).

override OCB: u32;     // output channels per workgroup
override KHB: u32;     // kernel rows per workgroup (KHR per invocation)
override RB: u32;      // input rows per partial-sum slot
override XW: u32;      // x columns staged at once
override THREADS: u32; // KHB / KHR * OCB * K_W invocations per workgroup

struct Params {
    n_count: u32,
    dispatch_width: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> u: Params;
// x (binding 1) and grad_out (2), in the tensors' dtype, are read with x_ld(i) and grad_out_ld(i) (declared by
// the host: src/gpu/wgsl/operands.rs).
@group(0) @binding(3) var<storage, read_write> partial: array<f32>;

var<workgroup> xs: array<vec4<f32>, XW * CIG4>; // [iw - c0][ic / 4]

// Columns of grad_output a lane loads before it multiplies.
const UNROLL: u32 = 8u;

@compute @workgroup_size(THREADS)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let cig = C_IN / GROUPS;
    let cog = C_OUT / GROUPS;
    let oc_blocks = (cog + OCB - 1u) / OCB;
    let kh_blocks = (K_H + KHB - 1u) / KHB;
    let row_blocks = (IN_H + RB - 1u) / RB;
    let wg = wid.y * u.dispatch_width + wid.x;
    if (wg >= u.n_count * row_blocks * GROUPS * oc_blocks * kh_blocks) {
        return; // the grid's last row: the whole workgroup leaves, before any barrier
    }
    let kb = wg % kh_blocks;
    let ob = (wg / kh_blocks) % oc_blocks;
    let group = (wg / (kh_blocks * oc_blocks)) % GROUPS;
    let slot = wg / (kh_blocks * oc_blocks * GROUPS); // n * row_blocks + the row block
    let n = slot / row_blocks;
    let ih0 = (slot % row_blocks) * RB;

    let kw = lid % K_W;
    let oc = ob * OCB + (lid / K_W) % OCB; // within the group
    let kh0 = kb * KHB + (lid / (K_W * OCB)) * KHR; // this invocation's first kernel row
    let has_oc = oc < cog && kh0 < K_H;
    let cols = axis_range(kw, S_W, P_W, D_W, IN_W, OUT_W); // the input columns whose kw tap lands in the output
    var acc: array<vec4<f32>, CIG4 * KHR>; // [kernel row kh0 + t][ic / 4]

    for (var r = 0u; r < RB; r++) {
        let ih = ih0 + r;
        if (ih >= IN_H) {
            break; // the same for the whole workgroup
        }
        // The output rows of (ih, kh0 + t): oh = ih*S_H + (kh0 + t)*D_H - P_H, where inside the output.
        var go_row: array<u32, KHR>;
        var row_in: array<bool, KHR>;
        var any_row = false;
        for (var t = 0u; t < KHR; t++) {
            let oh_p = ih * S_H + (kh0 + t) * D_H;
            row_in[t] = has_oc && kh0 + t < K_H && oh_p >= P_H && oh_p - P_H < OUT_H;
            go_row[t] = ((n * C_OUT + group * cog + oc) * OUT_H + oh_p - P_H) * OUT_W + kw * D_W - P_W;
            any_row = any_row || row_in[t];
        }
        let x_row = ((n * C_IN + group * cig) * IN_H + ih) * IN_W;
        for (var c0 = 0u; c0 < IN_W; c0 += XW) {
            workgroupBarrier(); // the last chunk's staged values are read
            // Stage x[n, group's channels, ih, c0 .. c0 + XW) as [iw][ic / 4], zero past the row and the channels.
            for (var i = lid; i < XW * CIG4 * 4u; i += THREADS) {
                let col = i % XW;
                let ic = i / XW;
                var v = 0.0;
                if (ic < cig && c0 + col < IN_W) {
                    v = x_ld(x_row + ic * IN_H * IN_W + c0 + col);
                }
                xs[col * CIG4 + ic / 4u][ic % 4u] = v;
            }
            workgroupBarrier();
            if (any_row) {
                // The chunk's columns whose ow = iw*S_W + kw*D_W - P_W lies inside the output, UNROLL at a time:
                // their grad_output loads (every kernel row's) issued together, then the multiply-adds, each staged
                // x value read once for the KHR rows (one load at a time left the loop waiting on each; a staged
                // value read per row cost a quarter of the kernel's time: docs/PERFORMANCE.md).
                let lo = max(cols.x, c0);
                let hi = min(cols.y, c0 + XW);
                var iw = lo;
                for (; iw + UNROLL <= hi; iw += UNROLL) {
                    var g: array<f32, UNROLL * KHR>;
                    for (var t = 0u; t < KHR; t++) {
                        for (var j = 0u; j < UNROLL; j++) {
                            var v = 0.0;
                            if (row_in[t]) {
                                v = grad_out_ld(go_row[t] + (iw + j) * S_W);
                            }
                            g[t * UNROLL + j] = v;
                        }
                    }
                    for (var j = 0u; j < UNROLL; j++) {
                        for (var q = 0u; q < CIG4; q++) {
                            let xv = xs[(iw + j - c0) * CIG4 + q];
                            for (var t = 0u; t < KHR; t++) {
                                acc[t * CIG4 + q] += xv * g[t * UNROLL + j];
                            }
                        }
                    }
                }
                for (; iw < hi; iw++) {
                    for (var t = 0u; t < KHR; t++) {
                        if (row_in[t]) {
                            let g = grad_out_ld(go_row[t] + iw * S_W);
                            for (var q = 0u; q < CIG4; q++) {
                                acc[t * CIG4 + q] += xs[(iw - c0) * CIG4 + q] * g;
                            }
                        }
                    }
                }
            }
        }
    }

    // Slot `slot` of the scratch buffer, [ic][oc][tap] with ic in global numbering: every value of this workgroup's
    // (group, channel block, kernel row) part, zero where no row of the block reaches the output.
    if (has_oc) {
        let taps = K_H * K_W;
        for (var t = 0u; t < KHR; t++) {
            if (kh0 + t < K_H) {
                let tap = (kh0 + t) * K_W + kw;
                for (var q = 0u; q < CIG4; q++) {
                    for (var e = 0u; e < 4u; e++) {
                        let ic = 4u * q + e;
                        if (ic < cig) {
                            partial[((slot * C_IN + group * cig + ic) * cog + oc) * taps + tap] = acc[t * CIG4 + q][e];
                        }
                    }
                }
            }
        }
    }
}
