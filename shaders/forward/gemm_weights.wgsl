// gemm_weights.wgsl: reorders a weight [Cin, Cout/groups, kH, kW] into [kH*kW, Cin, Cout/groups] for the GEMM
// kernel, so that a K step's B tile (fixed tap and input channel, consecutive output channels) is read with
// consecutive invocations at consecutive addresses. That is the transpose of the matrix [ROWS = Cin * Cout/groups]
// x [TAPS] into [TAPS] x [ROWS]: each workgroup moves a block of BLOCK rows x BLOCK taps through workgroup memory,
// reading along the taps and writing along the rows, so that both sides run at consecutive addresses. (One
// invocation per element, reading along the taps, wrote each tap's values 4 bytes apart in TAPS different planes,
// well below the copy bandwidth; docs/PERFORMANCE.md.)
//
// With TAKE_MAX (precision `fast`) the same pass takes the weight's largest finite magnitude into maxima[1] as
// shaders/common/absmax.wgsl would (`finite_magnitude_bits` of shaders/common/scale.wgsl, which the host appends;
// one atomicMax per workgroup), so that the weight is read once rather than twice.
//
// The host puts the shape's override constants (shaders/common/shape.wgsl) and the bindings in front of this file.

override COG: u32;
override TAPS: u32;
override TAKE_MAX: bool;

struct Params {
    dispatch_width: u32, // workgroups per grid row
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> u: Params;
// src (binding 1) and dst (2) in the weight's dtype, read with src_ld(i) and written with dst_st(i, v) (declared
// by the host, src/gpu/wgsl/operands.rs).
@group(0) @binding(3) var<storage, read_write> maxima: array<atomic<u32>>; // read only with TAKE_MAX

const BLOCK: u32 = 32u;
const THREADS: u32 = 256u;
var<workgroup> tile: array<f32, BLOCK * (BLOCK + 1u)>; // [tap][row], rows padded against bank conflicts
var<workgroup> wg_max: atomic<u32>;

@compute @workgroup_size(THREADS)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let rows = C_IN * COG;
    let tap_blocks = (TAPS + BLOCK - 1u) / BLOCK;
    let block = wid.y * u.dispatch_width + wid.x;
    if (block >= tap_blocks * ((rows + BLOCK - 1u) / BLOCK)) {
        return; // the whole workgroup: the grid's last row may run past the blocks
    }
    let r0 = (block / tap_blocks) * BLOCK;
    let t0 = (block % tap_blocks) * BLOCK;
    let lane = lid % BLOCK;
    if (TAKE_MAX && lid == 0u) {
        atomicStore(&wg_max, 0u);
    }
    // Read: invocation (lane, j) takes tap t0 + lane of row r0 + j.
    var m = 0u;
    for (var j = lid / BLOCK; j < BLOCK; j += THREADS / BLOCK) {
        let r = r0 + j;
        let t = t0 + lane;
        if (r < rows && t < TAPS) {
            let v = src_ld(r * TAPS + t);
            tile[lane * (BLOCK + 1u) + j] = v;
            m = max(m, finite_magnitude_bits(v));
        }
    }
    workgroupBarrier();
    // Write: invocation (lane, j) stores row r0 + lane of tap t0 + j.
    for (var j = lid / BLOCK; j < BLOCK; j += THREADS / BLOCK) {
        let r = r0 + lane;
        let t = t0 + j;
        if (r < rows && t < TAPS) {
            dst_st(t * rows + r, tile[j * (BLOCK + 1u) + lane]);
        }
    }
    if (TAKE_MAX) {
        atomicMax(&wg_max, m);
        workgroupBarrier();
        if (lid == 0u) {
            atomicMax(&maxima[1], atomicLoad(&wg_max));
        }
    }
}
