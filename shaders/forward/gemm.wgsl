// gemm.wgsl: transposed convolution as an implicit GEMM per stride phase.
//
// Phases: output pixels with the same (oh mod S_H, ow mod S_W) see the same kernel taps, so each of the
// S_H*S_W phases is a dense stride-1 correlation with its own sub-kernel: for oh = rh + a*S_H,
//   ih = a + off_h - jh*istep_h  for the phase's taps kh = kh0 + jh*kstep_h  (jh < cnt_h)
// and likewise for the width (host-computed per phase, see src/gpu/forward/gemm.rs). No tap is wasted and nothing
// is divided or tested for divisibility in the loops.
//
// The same kernel computes grad_input at any stride (src/gpu/backward/grad_input.rs): a strided convolution of
// grad_output, i.e. a stride-1 correlation sampled every S input pixels. That is one phase whose output pixel a
// reads ih = a*IN_STEP_H + off_h - jh*istep_h (IN_STEP = the convolution's stride; 1 for every phase above).
//
// GEMM per phase and group: M = output pixels of the phase (samples x rows x columns), N = output channels of
// the group, K = taps x input channels of the group. All phases run in one dispatch with the phases fastest
// (workgroup w: phase w % n_phases): the phases' tiles of the same pixels run at the same time, so the output
// columns they interleave (every S_W-th each) are written close together in time rather than one phase after
// the other, which measured faster in both precisions (docs/PERFORMANCE.md).
// A workgroup computes a BM x BN tile of the output; K is walked in steps of BK input channels of one tap: the
// A step (BK x BM im2col values, gathered from the input with zero fill outside it) and the B step (BK x BN
// weights) are staged in workgroup memory, where the invocations multiply them (registers or cooperative
// matrices, see Variants). The next step's global loads are issued into registers before the current step's
// math, so their latency hides behind it. Bias (or, for a later slice of a split input, the partial sum already
// written) is added in the epilogue.
//
// Variants. The host prepends the tile constants and the shape's override constants (shaders/common/shape.wgsl),
// and generates the code at the marker lines MODULE, PROLOGUE, ACC_DECL, MATH and EPILOGUE, one module per variant
// (src/gpu/forward/gemm.rs, src/gpu/forward/coop.rs; every variant is validated by naga in tests/shaders.rs):
// - registers, f32 operands (exact): each invocation keeps a TM x TN register tile (TM pixels x TN channels)
//   as named vec4 accumulators and reads the staged tiles as vec4s, BK rank-1 updates per step, written out
//   straight-line with the next channel's reads ahead of the current channel's multiply-adds.
//   THREADS = (BM/TM)*(BN/TN). Its pixels are TM/4 runs of 4, one in each BM/(TM/4) part of the tile (likewise
//   its channels), so that neighbouring invocations read neighbouring 16-byte words of workgroup memory; each
//   32 invocations (a subgroup on NVIDIA) cover WARP_M = 8 pixel runs x 4 channel runs, so that one read of A
//   or of B serves a subgroup with 8 or 4 distinct words (one pass of the memory banks).
// - registers, f16 operands (precision `fast` without cooperative matrices, needs SHADER_F16): the same with
//   the tiles staged as f16 (half the workgroup memory traffic), products and sums in f32.
// - cooperative matrices (precision `fast` on tensor cores): each subgroup of 32 invocations owns a WM x WN
//   part of the tile as 16x16 f32 accumulator matrices and multiplies 16x16 f16 matrices loaded from the
//   staged tiles; the epilogue moves each accumulator through workgroup memory so that the stores run along
//   the pixels (coalesced). THREADS = 32 * (BM/WM)*(BN/WN).
// In every variant THREADS must be a multiple of BM and of BN, and BK*BM and BK*BN multiples of THREADS (the
// register variants also need BM/TM a multiple of 8 and BN/TN of 4: `is_consistent` in src/gpu/forward/gemm.rs).
// The weight arrives packed as [tap][ic][oc] (shaders/forward/gemm_weights.wgsl).
//
// Operand types. f16 operands are scaled by powers of two (exact) chosen from each tensor's largest finite
// magnitude (the input's by shaders/common/absmax.wgsl, the weight's while shaders/forward/gemm_weights.wgsl packs
// it; see scale_exponent in shaders/common/scale.wgsl) so that no finite value overflows f16 or loses
// its precision to f16's small range; the f32 sums are scaled back before the bias is added. Non-finite
// values pass through as themselves.

// Input rows (columns) between neighbouring output pixels of a phase: 1, or grad_input's stride (see above).
override IN_STEP_H: i32 = 1;
override IN_STEP_W: i32 = 1;

const A_LOADS: u32 = BM * BK / THREADS;
const B_LOADS: u32 = BN * BK / THREADS;

// One stride phase (see above); a dispatch covers up to MAX_PHASES of them, one per grid layer (z).
struct Phase {
    rh: u32,
    rw: u32,
    ah: u32,        // rows of this phase
    aw: u32,        // columns of this phase
    kh0: u32,
    kw0: u32,
    cnt_h: u32,
    cnt_w: u32,
    off_h: i32,
    off_w: i32,
    m_tiles: u32,   // this phase's pixel tiles (the grid has the dispatch's largest count)
    _pad: u32,
}

const MAX_PHASES: u32 = 64u;

struct Dispatch {
    n_count: u32,
    in_offset: u32,
    out_offset: u32,
    out_first_channel: u32,
    ic_begin: u32,
    ic_end: u32,
    oc_begin: u32,
    oc_end: u32,
    accumulate: u32,
    dispatch_width: u32,
    m_tiles: u32,
    n_tiles_per_group: u32,
    group_begin: u32,
    kstep_h: u32,
    kstep_w: u32,
    istep_h: u32,
    istep_w: u32,
    n_phases: u32, // phases in this dispatch (entries of `phases`)
    _pad1: u32,
    _pad2: u32,
    phases: array<Phase, MAX_PHASES>,
}

@group(0) @binding(0) var<uniform> u: Dispatch;
// The tensors x (binding 1), w (2, packed), bias (3) and out (4), in the call's dtype: read with x_ld(i) and the
// like, written with out_st(i, v) (declared by the host, src/gpu/wgsl/operands.rs).

// The phase of this workgroup, set once at the start of main.
var<private> ph: Phase;

// Generated per variant: the staged tiles a_tile ([k][m]) and b_tile ([k][n]) in workgroup memory, the
// functions stage_a(k, m, v) / stage_b(k, n, v) that write one value into them (converting it to the operand
// type), and for the f16 variants the operand scale exponents (see "Operand types" above).
//#MODULE


// What one invocation needs to gather its share of a K step.
struct LoadCtx {
    am_ok: bool,   // its A pixel lies inside the phase
    aa: i32,       // that pixel's phase row and column
    ab: i32,
    a_base: u32,   // element offset of its sample in the input binding
    ak0: u32,      // first K row (input channel within the step) it loads for A
    bk0: u32,      // first K row (input channel within the step) it loads for B
    bn: u32,       // the B column (output channel within the tile) it loads
    ic_lo: u32,
    ic_hi: u32,
    oc_tile: u32,
    cog: u32,
}

// The values as loaded (f32, f16 or bf16's bits: src/gpu/wgsl/operands.rs), converted where they are staged.
struct Staged {
    a: array<x_raw_t, A_LOADS>,
    b: array<w_raw_t, B_LOADS>,
}

// Position of a K step: tap (jh, jw) of the phase, input channels from ic0.
struct Step {
    jh: u32,
    jw: u32,
    ic0: u32,
}

// The step after `p`: input channels first, then the taps (counters instead of divisions).
fn next_step(c: LoadCtx, p: Step) -> Step {
    var n = p;
    n.ic0 += BK;
    if (n.ic0 >= c.ic_hi) {
        n.ic0 = c.ic_lo;
        n.jw += 1u;
        if (n.jw == ph.cnt_w) {
            n.jw = 0u;
            n.jh += 1u;
        }
    }
    return n;
}

// The global loads of K step `p`. Each invocation loads A_LOADS input values of one pixel (input channels
// THREADS / BM apart) and B_LOADS weights of one output channel (input channels THREADS / BN apart); a value
// outside the input, the slice's channels or the group's output channels is zero and never read.
fn load_step(c: LoadCtx, p: Step) -> Staged {
    var r: Staged;
    let ih = c.aa * IN_STEP_H + ph.off_h - i32(p.jh * u.istep_h);
    let iw = c.ab * IN_STEP_W + ph.off_w - i32(p.jw * u.istep_w);
    let in_ok = c.am_ok && ih >= 0 && ih < i32(IN_H) && iw >= 0 && iw < i32(IN_W);
    // The first input channel this invocation loads, and how many channels from it lie below ic_hi.
    let ic_a = p.ic0 + c.ak0;
    let a_left = select(0u, c.ic_hi - min(ic_a, c.ic_hi), in_ok);
    // (Wraps where the pixel lies outside the input; then nothing is read.)
    let a_at = c.a_base + (ic_a - u.ic_begin) * IN_H * IN_W + u32(ih) * IN_W + u32(iw);
    for (var i = 0u; i < A_LOADS; i++) {
        var v = x_raw_t();
        if (i * (THREADS / BM) < a_left) {
            v = x_raw(a_at + i * (THREADS / BM) * IN_H * IN_W);
        }
        r.a[i] = v;
    }
    // w is packed as [tap][ic][oc] (shaders/forward/gemm_weights.wgsl): consecutive invocations, consecutive oc.
    let tap = (ph.kh0 + p.jh * u.kstep_h) * K_W + ph.kw0 + p.jw * u.kstep_w;
    let ic_b = p.ic0 + c.bk0;
    let oc = c.oc_tile + c.bn;
    let b_left = select(0u, c.ic_hi - min(ic_b, c.ic_hi), oc < c.cog);
    let b_at = (tap * C_IN + ic_b) * c.cog + oc;
    for (var i = 0u; i < B_LOADS; i++) {
        var v = w_raw_t();
        if (i * (THREADS / BN) < b_left) {
            v = w_raw(b_at + i * (THREADS / BN) * c.cog);
        }
        r.b[i] = v;
    }
    return r;
}

struct StoreCtx {
    m_total: u32,
    phase_pixels: u32,
    g: u32,
    cog: u32,
}

// Where pixel m of the phase lies in the output binding (channel first_channel), or None past the last pixel.
struct Pixel {
    ok: bool,
    base: u32,
}

fn pixel(c: StoreCtx, m: u32) -> Pixel {
    if (m >= c.m_total) {
        return Pixel(false, 0u);
    }
    let n = m / c.phase_pixels;
    let p = m % c.phase_pixels;
    let oh = ph.rh + (p / ph.aw) * S_H;
    let ow = ph.rw + (p % ph.aw) * S_W;
    return Pixel(true, u.out_offset + n * C_OUT * OUT_H * OUT_W + oh * OUT_W + ow);
}

// Writes output channel oc (within the group) of a pixel: v plus the bias, or plus the partial sum an earlier
// slice wrote; channels outside the group or the slice are skipped.
fn store1(c: StoreCtx, px: Pixel, oc: u32, v: f32) {
    let co = c.g * c.cog + oc;
    if (!px.ok || oc >= c.cog || co < u.oc_begin || co >= u.oc_end) {
        return;
    }
    let idx = px.base + (co - u.out_first_channel) * OUT_H * OUT_W;
    var r = v;
    if (u.accumulate != 0u) {
        r += out_ld(idx);
    } else if (HAS_BIAS) {
        r += bias_ld(co);
    }
    out_st(idx, r);
}

// Stores four output channels (oc0 .. oc0 + 3, within the group) of pixel m.
fn store4(c: StoreCtx, m: u32, oc0: u32, v: vec4<f32>) {
    let px = pixel(c, m);
    for (var j = 0u; j < 4u; j++) {
        store1(c, px, oc0 + j, v[j]);
    }
}

@compute @workgroup_size(THREADS)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    // The workgroup's control flow depends only on `phase`, read from the uniform block (the cooperative
    // matrix operations need uniform control flow, and naga counts reads of a private variable as non-uniform).
    // Phases fastest (see "GEMM per phase and group" above): tile w / n_phases of phase w % n_phases.
    let wg_all = wid.y * u.dispatch_width + wid.x;
    let phase = u.phases[wg_all % u.n_phases];
    ph = phase;
//#PROLOGUE
    let wg = wg_all / u.n_phases;
    let m_tile = wg % u.m_tiles;
    let n_lin = wg / u.m_tiles;
    if (m_tile >= phase.m_tiles) {
        return; // a smaller phase than the dispatch's largest: the whole workgroup leaves, before any barrier
    }
    let g = u.group_begin + n_lin / u.n_tiles_per_group;
    let cog = C_OUT / GROUPS;
    let cig = C_IN / GROUPS;
    let oc_tile = (n_lin % u.n_tiles_per_group) * BN; // first output channel of the tile, within the group
    let ic_lo = max(g * cig, u.ic_begin);
    let ic_hi = max(min(g * cig + cig, u.ic_end), ic_lo);
    let ic_chunks = (ic_hi - ic_lo + BK - 1u) / BK;
    let taps = phase.cnt_h * phase.cnt_w;
    let steps = taps * ic_chunks;
    let phase_pixels = ph.ah * ph.aw;
    let m_total = u.n_count * phase_pixels;
    let plane = IN_H * IN_W;

    // This invocation's A-load pixel (THREADS is a multiple of BM, so it is the same for every load).
    let am = lid % BM;
    let ak0 = lid / BM;
    let am_g = m_tile * BM + am;
    let am_ok = am_g < m_total;
    let an = am_g / max(phase_pixels, 1u);
    let ap = am_g % max(phase_pixels, 1u);
    let aa = i32(ap / max(ph.aw, 1u));
    let ab = i32(ap % max(ph.aw, 1u));
    let a_base = u.in_offset + an * C_IN * plane;
    // This invocation's B-load output channel (THREADS is a multiple of BN).
    let bn = lid % BN;
    let bk0 = lid / BN;

    let lc = LoadCtx(am_ok, aa, ab, a_base, ak0, bk0, bn, ic_lo, ic_hi, oc_tile, cog);
    var regs = Staged();
    var step = Step(0u, 0u, ic_lo);
    if (steps > 0u) {
        regs = load_step(lc, step);
    }

    // The accumulators as named variables acc_<i>_<j> (generated: no array, so nothing can be demoted to local
    // memory), and the invocation's place in the tile.
//#ACC_DECL

    for (var s = 0u; s < steps; s++) {
        // Registers -> workgroup memory.
        for (var i = 0u; i < A_LOADS; i++) {
            stage_a(ak0 + i * (THREADS / BM), am, x_value(regs.a[i]));
        }
        for (var i = 0u; i < B_LOADS; i++) {
            stage_b(bk0 + i * (THREADS / BN), bn, w_value(regs.b[i]));
        }
        workgroupBarrier();

        // Prefetch step s + 1: its global loads are in flight during this step's math.
        if (s + 1u < steps) {
            step = next_step(lc, step);
            regs = load_step(lc, step);
        }

        // The step's math on the staged tiles (generated).
//#MATH
        // Nobody may stage step s + 1 before everyone has read step s. (Double-buffered tiles, with one barrier
        // per step, measured slower: docs/PERFORMANCE.md.)
        workgroupBarrier();
    }

    // Epilogue (generated): unscale, add the bias or the earlier partial sum, store.
    let sc = StoreCtx(m_total, phase_pixels, g, cog);
//#EPILOGUE
}
