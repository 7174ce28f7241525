// ceiling_gemm.wgsl: the second GEMM yardstick of `convt bench --ceilings`: C = A B for SIZE x SIZE f16 matrices
// with f32 accumulation, in the textbook form of a tensor-core GEMM through wgpu, both operands staged in
// workgroup memory. Beside the first yardstick (the convolution's own tile on a 1 x 1 convolution, A staged per
// kernel row, B loaded from storage) it says what a GEMM core of this form reaches through wgpu on the adapter.
//
// Tiling. A workgroup of 8 subgroups computes a 128 x 128 block of C, each subgroup 64 x 32 of it as 4 x 2 named
// f32 accumulators. K advances in stages of BK (16, 32 or 64): the stage's A (BK x 128, stored k-major: A[k][m])
// and B (BK x 128, B[k][n]) are copied into workgroup memory, in rows padded by 8 halves against bank conflicts
// (as the products ceiling's staged rows: ROW = 136), and every fragment loads from there (A column-major, B
// row-major, the layouts that ceiling measures). The accumulators are stored straight to C (row-major).
//
// The pipeline. Vulkan has no asynchronous copy into workgroup memory, so a stage's loads from storage go into
// registers first, and what hides their latency is how many stages' products run between a load's issue and its
// copy into workgroup memory:
// - AHEAD (1 or 2) stages of loads are in flight in registers: stage s + AHEAD is loaded while stage s multiplies;
// - RING (1 or 2) stage buffers in workgroup memory: with one, each stage costs two barriers (everyone has read
//   the last stage; everyone has copied this one); with two, stage s + 1 is copied into the other buffer while
//   stage s multiplies, one barrier a stage.
// One stage's rows take 17 KiB at BK = 32, 35 KiB at BK = 64; a workgroup may hold 48 KiB.
//
// Two switches take parts of the loop away, to tell what bounds it (the results are then not a product; RING = 1,
// AHEAD = 1):
// - GLOBAL_LOADS = false: the stages are copied from the registers the first stage loaded, with no loads from
//   storage in the loop;
// - STAGE_COPY = false: no copy into workgroup memory either (one barrier a stage remains): the products and
//   their fragment loads from workgroup memory alone.
enable f16;
enable wgpu_cooperative_matrix;

override SIZE: u32 = 8192u;
override GLOBAL_LOADS: bool = true;
override STAGE_COPY: bool = true;
override GROUP_M: u32 = 8u; // block rows a group of consecutive workgroups sweeps together (1: rows one by one)
const THREADS: u32 = 256u;
const BM: u32 = 128u;
const BN: u32 = 128u;
override BK: u32 = 32u; // K per stage: 16, 32 or 64
override RING: u32 = 1u; // stage buffers in workgroup memory
override AHEAD: u32 = 1u; // stages of loads in flight in registers
const ROW: u32 = 136u; // halves between staged rows: 128 + 8
const MAX_LOADS: u32 = 8u; // vec4<f16> of each operand's stage per invocation, at most: 64 x 128 / 4 / THREADS
const MAX_AHEAD: u32 = 2u;
override LOADS: u32 = BK * 32u / THREADS; // vec4<f16> of each operand's stage per invocation (BK x 128 / 4 / THREADS)

@group(0) @binding(0) var<storage, read> a: array<vec4<f16>>; // A[k][m], SIZE x SIZE
@group(0) @binding(1) var<storage, read> b: array<vec4<f16>>; // B[k][n]
@group(0) @binding(2) var<storage, read_write> c: array<f32>; // C[m][n]

var<workgroup> a_tile: array<f16, BK * ROW * RING>;
var<workgroup> b_tile: array<f16, BK * ROW * RING>;

// Quad i of a stage: row i / 32 (k), quad i % 32 of the 128 halves from column `col` (m or n).
fn quad_at(k0: u32, col: u32, i: u32) -> u32 {
    return ((k0 + i / 32u) * SIZE + col) / 4u + i % 32u;
}

// Quad i of a stage into the stage buffer starting at half `buf`.
fn put(tile_is_a: bool, buf: u32, i: u32, v: vec4<f16>) {
    let at = buf + (i / 32u) * ROW + 4u * (i % 32u);
    if (tile_is_a) {
        a_tile[at] = v.x;
        a_tile[at + 1u] = v.y;
        a_tile[at + 2u] = v.z;
        a_tile[at + 3u] = v.w;
    } else {
        b_tile[at] = v.x;
        b_tile[at + 1u] = v.y;
        b_tile[at + 2u] = v.z;
        b_tile[at + 3u] = v.w;
    }
}

// The register sets of loads in flight: set h holds stages h, h + AHEAD, ... (indices constant once the callers'
// loops over h and the helpers' loops over j are unrolled, so the sets stay in registers).
var<private> ahead_a: array<vec4<f16>, MAX_LOADS * MAX_AHEAD>;
var<private> ahead_b: array<vec4<f16>, MAX_LOADS * MAX_AHEAD>;

// This invocation's quads of both operands' stage `stage` (block m0, n0) into the register set at `regs`.
fn load_stage(regs: u32, stage: u32, m0: u32, n0: u32, lid: u32) {
    for (var j = 0u; j < LOADS; j++) {
        ahead_a[regs + j] = a[quad_at(stage * BK, m0, lid + j * THREADS)];
        ahead_b[regs + j] = b[quad_at(stage * BK, n0, lid + j * THREADS)];
    }
}

// The register set at `regs` into the stage buffer starting at half `buf`.
fn put_stage(buf: u32, regs: u32, lid: u32) {
    for (var j = 0u; j < LOADS; j++) {
        put(true, buf, lid + j * THREADS, ahead_a[regs + j]);
        put(false, buf, lid + j * THREADS, ahead_b[regs + j]);
    }
}

@compute @workgroup_size(THREADS)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    // Consecutive workgroups take GROUP_M block rows column by column, so that those running at once share both
    // A's rows and B's columns in L2 (in plain row order they share A but sweep all of B, re-read from memory
    // for every block row when B exceeds L2).
    let tiles_m = SIZE / BM;
    let tiles_n = SIZE / BN;
    let wg = wid.y * 65535u + wid.x;
    let per_group = GROUP_M * tiles_n;
    let first_m = (wg / per_group) * GROUP_M;
    let rows = min(tiles_m - first_m, GROUP_M);
    let m0 = (first_m + (wg % per_group) % rows) * BM;
    let n0 = ((wg % per_group) / rows) * BN;
    let sg = lid / 32u;
    let sm = (sg % 2u) * 64u; // this subgroup's rows of the block
    let sn = (sg / 2u) * 32u; // and columns
    var acc_0_0 = coop_mat16x16<f32, C>();
    var acc_0_1 = coop_mat16x16<f32, C>();
    var acc_1_0 = coop_mat16x16<f32, C>();
    var acc_1_1 = coop_mat16x16<f32, C>();
    var acc_2_0 = coop_mat16x16<f32, C>();
    var acc_2_1 = coop_mat16x16<f32, C>();
    var acc_3_0 = coop_mat16x16<f32, C>();
    var acc_3_1 = coop_mat16x16<f32, C>();
    let stages = SIZE / BK;
    for (var h = 0u; h < AHEAD; h++) {
        load_stage(h * MAX_LOADS, h, m0, n0, lid);
    }
    if (!STAGE_COPY || RING == 2u) {
        // Stage 0 into buffer 0 before the loop (with the ring: the loop copies stage s + 1 during stage s).
        put_stage(0u, 0u, lid);
        if (RING == 2u && AHEAD < stages) {
            load_stage(0u, AHEAD, m0, n0, lid);
        }
        workgroupBarrier();
    }
    for (var s0 = 0u; s0 < stages; s0 += AHEAD) {
        for (var h = 0u; h < AHEAD; h++) {
            let s = s0 + h;
            var buf = 0u; // where stage s lies in workgroup memory
            if (RING == 2u) {
                buf = (s % 2u) * BK * ROW;
                // Stage s + 1 (register set (h + 1) % AHEAD) into the other buffer, read last by stage s - 1
                // before the barrier that ended it; then that set loads stage s + 1 + AHEAD.
                let regs = ((h + 1u) % AHEAD) * MAX_LOADS;
                let other = ((s + 1u) % 2u) * BK * ROW;
                if (s + 1u < stages) {
                    put_stage(other, regs, lid);
                }
                if (s + 1u + AHEAD < stages) {
                    load_stage(regs, s + 1u + AHEAD, m0, n0, lid);
                }
            } else {
                let regs = h * MAX_LOADS;
                if (STAGE_COPY) {
                    workgroupBarrier(); // every fragment of the last stage is loaded
                    put_stage(0u, regs, lid);
                }
                workgroupBarrier();
                if (GLOBAL_LOADS && s + AHEAD < stages) {
                    load_stage(regs, s + AHEAD, m0, n0, lid);
                }
            }
            for (var kk = 0u; kk < BK; kk += 16u) {
                let at = buf + kk * ROW;
                let a0 = coopLoad<coop_mat16x16<f16, A>>(&a_tile[at + sm], ROW);
                let a1 = coopLoad<coop_mat16x16<f16, A>>(&a_tile[at + sm + 16u], ROW);
                let a2 = coopLoad<coop_mat16x16<f16, A>>(&a_tile[at + sm + 32u], ROW);
                let a3 = coopLoad<coop_mat16x16<f16, A>>(&a_tile[at + sm + 48u], ROW);
                let b0 = coopLoadT<coop_mat16x16<f16, B>>(&b_tile[at + sn], ROW);
                let b1 = coopLoadT<coop_mat16x16<f16, B>>(&b_tile[at + sn + 16u], ROW);
                acc_0_0 = coopMultiplyAdd(a0, b0, acc_0_0);
                acc_0_1 = coopMultiplyAdd(a0, b1, acc_0_1);
                acc_1_0 = coopMultiplyAdd(a1, b0, acc_1_0);
                acc_1_1 = coopMultiplyAdd(a1, b1, acc_1_1);
                acc_2_0 = coopMultiplyAdd(a2, b0, acc_2_0);
                acc_2_1 = coopMultiplyAdd(a2, b1, acc_2_1);
                acc_3_0 = coopMultiplyAdd(a3, b0, acc_3_0);
                acc_3_1 = coopMultiplyAdd(a3, b1, acc_3_1);
            }
            if (RING == 2u) {
                workgroupBarrier(); // stage s + 1 is copied, and stage s read by everyone
            }
        }
    }
    // naga 30 needs every coopStore argument bound to a `let` (its SPIR-V writer panics otherwise).
    let base = (m0 + sm) * SIZE + n0 + sn;
    let st = SIZE;
    { let t = acc_0_0; let off = base; coopStoreT(t, &c[off], st); }
    { let t = acc_0_1; let off = base + 16u; coopStoreT(t, &c[off], st); }
    { let t = acc_1_0; let off = base + 16u * SIZE; coopStoreT(t, &c[off], st); }
    { let t = acc_1_1; let off = base + 16u * SIZE + 16u; coopStoreT(t, &c[off], st); }
    { let t = acc_2_0; let off = base + 32u * SIZE; coopStoreT(t, &c[off], st); }
    { let t = acc_2_1; let off = base + 32u * SIZE + 16u; coopStoreT(t, &c[off], st); }
    { let t = acc_3_0; let off = base + 48u * SIZE; coopStoreT(t, &c[off], st); }
    { let t = acc_3_1; let off = base + 48u * SIZE + 16u; coopStoreT(t, &c[off], st); }
}
