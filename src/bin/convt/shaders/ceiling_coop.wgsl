// ceiling_coop.wgsl: the adapter's f16 tensor-core rate through wgpu's cooperative matrices (16x16x16, f16
// operands, f32 accumulators), for `convt bench --ceilings` on adapters that have them. Each subgroup of 32
// invocations owns a 64 x 64 block as 4 x 4 named accumulators, the largest subgroup tile of the convolution's
// cooperative-matrix kernel (src/gpu/forward/coop.rs), and runs ITERATIONS rounds of 16 products (a 64 x 64 x 16 step).
// Two specialisations tell the tensor cores' own rate from what feeding them from workgroup memory allows:
// - LOADS_IN_LOOP = false: the 4 A and 4 B matrices are loaded once, before the rounds; no memory traffic in
//   the loop.
// - LOADS_IN_LOOP = true: every round first loads its 4 + 4 matrices from workgroup memory, at the offsets and
//   in the layouts the convolution kernel uses (A channel-major [k][m], B [k][n] loaded transposed), as one K
//   step of a GEMM whose tiles are staged there does; no global traffic and no barriers in the loop. The staged
//   rows are ROW_STRIDE = 72 halves apart, as the kernel's (src/gpu/forward/coop.rs, STAGE_PAD): with rows 64 halves
//   (128 bytes) apart, each load's 16 rows fall in the same memory banks and this rate measured far lower; A
//   row-major or B column-major measured the same (docs/PERFORMANCE.md).
// The accumulators are stored once at the end (into a small sink: racing stores are fine, nothing reads them)
// so that the loop stays alive.
enable f16;
enable wgpu_cooperative_matrix;

override ITERATIONS: u32 = 1024u;
const WORKGROUP_SIZE: u32 = 128u; // four subgroups
const BLOCK: u32 = 64u; // each subgroup's block: 64 x 64
override LOADS_IN_LOOP: bool = false;
const ROW_STRIDE: u32 = BLOCK + 8u; // halves between staged rows (see above)
const STEPS: u32 = 4u; // K steps of 16 staged in workgroup memory, cycled through when LOADS_IN_LOOP

@group(0) @binding(0) var<storage, read_write> sink: array<f32>;

var<workgroup> a_tile: array<f16, STEPS * 16u * ROW_STRIDE>; // [k][m]
var<workgroup> b_tile: array<f16, STEPS * 16u * ROW_STRIDE>; // [k][n]

// Fills the staged tiles with values in [0.5, 1] taken from the sink (written by the host first, then holding
// the accumulators earlier runs stored), so that no compiler can know them and none is zero or subnormal: the
// tensor cores' power, and so perhaps their clock, depends on the data.
fn fill(lid: u32) {
    for (var i = lid; i < STEPS * 16u * ROW_STRIDE; i += WORKGROUP_SIZE) {
        a_tile[i] = f16(0.5 + 0.5 * fract(abs(sink[i])));
        b_tile[i] = f16(0.5 + 0.5 * fract(abs(sink[i + 1u])));
    }
    workgroupBarrier();
}

fn store(m: coop_mat16x16<f32, C>, block: u32, part: u32) {
    let t = m;
    let off = (block % 64u) * 4096u + part * 256u;
    let st = 16u;
    coopStore(t, &sink[off], st);
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    fill(lid);
    var a0 = coopLoad<coop_mat16x16<f16, A>>(&a_tile[0u], ROW_STRIDE);
    var a1 = coopLoad<coop_mat16x16<f16, A>>(&a_tile[16u], ROW_STRIDE);
    var a2 = coopLoad<coop_mat16x16<f16, A>>(&a_tile[32u], ROW_STRIDE);
    var a3 = coopLoad<coop_mat16x16<f16, A>>(&a_tile[48u], ROW_STRIDE);
    var b0 = coopLoadT<coop_mat16x16<f16, B>>(&b_tile[0u], ROW_STRIDE);
    var b1 = coopLoadT<coop_mat16x16<f16, B>>(&b_tile[16u], ROW_STRIDE);
    var b2 = coopLoadT<coop_mat16x16<f16, B>>(&b_tile[32u], ROW_STRIDE);
    var b3 = coopLoadT<coop_mat16x16<f16, B>>(&b_tile[48u], ROW_STRIDE);
    var c00 = coop_mat16x16<f32, C>(); var c01 = coop_mat16x16<f32, C>();
    var c02 = coop_mat16x16<f32, C>(); var c03 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>(); var c11 = coop_mat16x16<f32, C>();
    var c12 = coop_mat16x16<f32, C>(); var c13 = coop_mat16x16<f32, C>();
    var c20 = coop_mat16x16<f32, C>(); var c21 = coop_mat16x16<f32, C>();
    var c22 = coop_mat16x16<f32, C>(); var c23 = coop_mat16x16<f32, C>();
    var c30 = coop_mat16x16<f32, C>(); var c31 = coop_mat16x16<f32, C>();
    var c32 = coop_mat16x16<f32, C>(); var c33 = coop_mat16x16<f32, C>();
    for (var r = 0u; r < ITERATIONS; r++) {
        if LOADS_IN_LOOP {
            let kk = (r % STEPS) * 16u * ROW_STRIDE;
            a0 = coopLoad<coop_mat16x16<f16, A>>(&a_tile[kk], ROW_STRIDE);
            a1 = coopLoad<coop_mat16x16<f16, A>>(&a_tile[kk + 16u], ROW_STRIDE);
            a2 = coopLoad<coop_mat16x16<f16, A>>(&a_tile[kk + 32u], ROW_STRIDE);
            a3 = coopLoad<coop_mat16x16<f16, A>>(&a_tile[kk + 48u], ROW_STRIDE);
            b0 = coopLoadT<coop_mat16x16<f16, B>>(&b_tile[kk], ROW_STRIDE);
            b1 = coopLoadT<coop_mat16x16<f16, B>>(&b_tile[kk + 16u], ROW_STRIDE);
            b2 = coopLoadT<coop_mat16x16<f16, B>>(&b_tile[kk + 32u], ROW_STRIDE);
            b3 = coopLoadT<coop_mat16x16<f16, B>>(&b_tile[kk + 48u], ROW_STRIDE);
        }
        c00 = coopMultiplyAdd(a0, b0, c00); c01 = coopMultiplyAdd(a0, b1, c01);
        c02 = coopMultiplyAdd(a0, b2, c02); c03 = coopMultiplyAdd(a0, b3, c03);
        c10 = coopMultiplyAdd(a1, b0, c10); c11 = coopMultiplyAdd(a1, b1, c11);
        c12 = coopMultiplyAdd(a1, b2, c12); c13 = coopMultiplyAdd(a1, b3, c13);
        c20 = coopMultiplyAdd(a2, b0, c20); c21 = coopMultiplyAdd(a2, b1, c21);
        c22 = coopMultiplyAdd(a2, b2, c22); c23 = coopMultiplyAdd(a2, b3, c23);
        c30 = coopMultiplyAdd(a3, b0, c30); c31 = coopMultiplyAdd(a3, b1, c31);
        c32 = coopMultiplyAdd(a3, b2, c32); c33 = coopMultiplyAdd(a3, b3, c33);
    }
    let block = wg.x * 4u + lid / 32u;
    store(c00, block, 0u); store(c01, block, 1u); store(c02, block, 2u); store(c03, block, 3u);
    store(c10, block, 4u); store(c11, block, 5u); store(c12, block, 6u); store(c13, block, 7u);
    store(c20, block, 8u); store(c21, block, 9u); store(c22, block, 10u); store(c23, block, 11u);
    store(c30, block, 12u); store(c31, block, 13u); store(c32, block, 14u); store(c33, block, 15u);
}
