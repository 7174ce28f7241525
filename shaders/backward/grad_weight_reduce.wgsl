// grad_weight_reduce.wgsl: out[i] = sum over s of partial[s * ELEMS + i], s in a fixed order (plus out[i] itself
// when accumulating): the second half of a split-K reduction (shaders/backward/grad_weight.wgsl writes the partial
// sums). With TAP_MAJOR = the kernel's taps (the GEMMs: shaders/backward/grad_weight_nhwc.wgsl, grad_weight.wgsl
// and grad_weight_half.wgsl), each slot is laid out [tap][ic][oc] instead of out's [ic][oc][tap]; 1 for the same
// layout (one tap: the same index).
//
// A workgroup sums COLS consecutive slot elements, ROWS invocations each: invocation (r, c) adds the slots r,
// r + ROWS, r + 2 ROWS, ... of element c in four running sums (slot k into sum k / ROWS % 4: four loads in flight),
// then the four sums in order; the first row then adds the ROWS results in row order. Where a weight is small and
// the splits many (thousands of slots of a few thousand values), one invocation per element left most of the GPU
// idle, each waiting on one load at a time; where the splits are few, one row is enough (the host sets ROWS from
// the splits). Every sum's order is fixed by (s, r, c) and ROWS alone, never by scheduling: the same bits on every
// run.

override TAP_MAJOR: u32 = 1u;
override ROWS: u32 = 8u; // 1, 2, 4 or 8
override COLS: u32 = 256u / ROWS;

struct Params {
    elems: u32,
    splits: u32,
    accumulate: u32,
    dispatch_width: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> partial: array<f32>;
// out (binding 2), grad_weight in its dtype, is read with out_ld(i) and written with out_st(i, v) (declared by the
// host: src/gpu/wgsl/operands.rs).

var<workgroup> rows: array<f32, 256>; // ROWS x COLS

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = lid % COLS;
    let r = lid / COLS;
    let at = (wid.y * params.dispatch_width + wid.x) * COLS + c;
    var s0 = 0.0;
    var s1 = 0.0;
    var s2 = 0.0;
    var s3 = 0.0;
    if (at < params.elems) {
        var s = r;
        let step = ROWS * params.elems;
        var p = r * params.elems + at;
        for (; s + 3u * ROWS < params.splits; s += 4u * ROWS) {
            s0 += partial[p];
            s1 += partial[p + step];
            s2 += partial[p + 2u * step];
            s3 += partial[p + 3u * step];
            p += 4u * step;
        }
        if (s < params.splits) {
            s0 += partial[p];
        }
        if (s + ROWS < params.splits) {
            s1 += partial[p + step];
        }
        if (s + 2u * ROWS < params.splits) {
            s2 += partial[p + 2u * step];
        }
    }
    rows[lid] = ((s0 + s1) + s2) + s3;
    workgroupBarrier();
    if (r != 0u || at >= params.elems) {
        return;
    }
    var sum = rows[c];
    for (var k = 1u; k < ROWS; k++) {
        sum += rows[k * COLS + c];
    }
    // The slot element `at` is tap t's (ic, oc) value j; out's index is j * TAP_MAJOR + t.
    let per_tap = params.elems / TAP_MAJOR;
    let i = (at % per_tap) * TAP_MAJOR + at / per_tap;
    if (params.accumulate != 0u) {
        sum += out_ld(i);
    }
    out_st(i, sum);
}
