// ceiling_gemm.wgsl: the second GEMM yardstick of `convt bench --ceilings`: C = A B for SIZE x SIZE f16 matrices
// with f32 accumulation, in the textbook form of a tensor-core GEMM through wgpu, both operands staged in
// workgroup memory. Beside the first yardstick (the convolution's own tile on a 1 x 1 convolution, A staged per
// kernel row, B loaded from storage) it says what a GEMM core of this form reaches through wgpu on the adapter.
//
// Tiling. A workgroup of 8 subgroups computes a 128 x 128 block of C, each subgroup 64 x 32 of it as 4 x 2 named
// f32 accumulators. K advances in stages of BK = 32: the stage's A (32 x 128, stored k-major: A[k][m]) and B
// (32 x 128, B[k][n]) are copied into workgroup memory, in rows padded by 8 halves against bank conflicts (as the
// products ceiling's staged rows: ROW = 136), and every fragment loads from there (A column-major, B row-major,
// the layouts that ceiling measures). The next stage's loads from storage are issued into registers before the
// current stage's products, so they arrive while the tensor cores work; the copy between the two barriers only
// writes workgroup memory. One stage's rows take 17 KiB at BK = 32 (two workgroups fit a multiprocessor's 48 KiB),
// 35 KiB at BK = 64. The accumulators are stored straight to C (row-major).
//
// Two switches take parts of the loop away, to tell what bounds it (the results are then not a product):
// - GLOBAL_LOADS = false: the stages are copied from the registers the first stage loaded, with no loads from
//   storage in the loop;
// - STAGE_COPY = false: no copy into workgroup memory and no barriers in the loop either: the products and their
//   fragment loads from workgroup memory alone.
enable f16;
enable wgpu_cooperative_matrix;

override SIZE: u32 = 8192u;
override GLOBAL_LOADS: bool = true;
override STAGE_COPY: bool = true;
override GROUP_M: u32 = 8u; // block rows a group of consecutive workgroups sweeps together (1: rows one by one)
const THREADS: u32 = 256u;
const BM: u32 = 128u;
const BN: u32 = 128u;
override BK: u32 = 32u; // K per stage: 32 or 64
const ROW: u32 = 136u; // halves between staged rows: 128 + 8
const MAX_LOADS: u32 = 8u; // vec4<f16> of each operand's stage per invocation, at most: 64 x 128 / 4 / THREADS

@group(0) @binding(0) var<storage, read> a: array<vec4<f16>>; // A[k][m], SIZE x SIZE
@group(0) @binding(1) var<storage, read> b: array<vec4<f16>>; // B[k][n]
@group(0) @binding(2) var<storage, read_write> c: array<f32>; // C[m][n]

var<workgroup> a_tile: array<f16, BK * ROW>;
var<workgroup> b_tile: array<f16, BK * ROW>;

// Quad i of a stage: row i / 32 (k), quad i % 32 of the 128 halves from column `col` (m or n).
fn quad_at(k0: u32, col: u32, i: u32) -> u32 {
    return ((k0 + i / 32u) * SIZE + col) / 4u + i % 32u;
}

fn put(tile_is_a: bool, i: u32, v: vec4<f16>) {
    let at = (i / 32u) * ROW + 4u * (i % 32u);
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
    let loads = BK * 32u / THREADS; // BK rows of 32 quads per operand
    var ahead_a: array<vec4<f16>, MAX_LOADS>;
    var ahead_b: array<vec4<f16>, MAX_LOADS>;
    for (var j = 0u; j < loads; j++) {
        ahead_a[j] = a[quad_at(0u, m0, lid + j * THREADS)];
        ahead_b[j] = b[quad_at(0u, n0, lid + j * THREADS)];
    }
    if (!STAGE_COPY) {
        for (var j = 0u; j < loads; j++) {
            put(true, lid + j * THREADS, ahead_a[j]);
            put(false, lid + j * THREADS, ahead_b[j]);
        }
    }
    for (var k0 = 0u; k0 < SIZE; k0 += BK) {
        if (STAGE_COPY) {
            workgroupBarrier(); // every fragment of the last stage is loaded
            for (var j = 0u; j < loads; j++) {
                put(true, lid + j * THREADS, ahead_a[j]);
                put(false, lid + j * THREADS, ahead_b[j]);
            }
        }
        workgroupBarrier();
        if (GLOBAL_LOADS && k0 + BK < SIZE) {
            for (var j = 0u; j < loads; j++) {
                ahead_a[j] = a[quad_at(k0 + BK, m0, lid + j * THREADS)];
                ahead_b[j] = b[quad_at(k0 + BK, n0, lid + j * THREADS)];
            }
        }
        for (var kk = 0u; kk < BK; kk += 16u) {
            let a0 = coopLoad<coop_mat16x16<f16, A>>(&a_tile[kk * ROW + sm], ROW);
            let a1 = coopLoad<coop_mat16x16<f16, A>>(&a_tile[kk * ROW + sm + 16u], ROW);
            let a2 = coopLoad<coop_mat16x16<f16, A>>(&a_tile[kk * ROW + sm + 32u], ROW);
            let a3 = coopLoad<coop_mat16x16<f16, A>>(&a_tile[kk * ROW + sm + 48u], ROW);
            let b0 = coopLoadT<coop_mat16x16<f16, B>>(&b_tile[kk * ROW + sn], ROW);
            let b1 = coopLoadT<coop_mat16x16<f16, B>>(&b_tile[kk * ROW + sn + 16u], ROW);
            acc_0_0 = coopMultiplyAdd(a0, b0, acc_0_0);
            acc_0_1 = coopMultiplyAdd(a0, b1, acc_0_1);
            acc_1_0 = coopMultiplyAdd(a1, b0, acc_1_0);
            acc_1_1 = coopMultiplyAdd(a1, b1, acc_1_1);
            acc_2_0 = coopMultiplyAdd(a2, b0, acc_2_0);
            acc_2_1 = coopMultiplyAdd(a2, b1, acc_2_1);
            acc_3_0 = coopMultiplyAdd(a3, b0, acc_3_0);
            acc_3_1 = coopMultiplyAdd(a3, b1, acc_3_1);
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
