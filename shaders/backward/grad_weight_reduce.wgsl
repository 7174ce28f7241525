// grad_weight_reduce.wgsl: out[i] = sum over s of partial[s * ELEMS + i], s in order (plus out[i] itself when
// accumulating): the second half of a split-K reduction (shaders/backward/grad_weight.wgsl writes the partial
// sums). One invocation per element; the fixed order of the sum makes the result the same bit for bit on every run.
// With TAP_MAJOR = the kernel's taps (shaders/backward/grad_weight_nhwc.wgsl), each slot is laid out [tap][ic][oc]
// instead of out's [ic][oc][tap]; 1 for the same layout (one tap: the same index).

override WORKGROUP_SIZE: u32 = 256u;
override TAP_MAJOR: u32 = 1u;

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

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * params.dispatch_width + wid.x) * WORKGROUP_SIZE + lid;
    if (i >= params.elems) {
        return;
    }
    let at = (i % TAP_MAJOR) * (params.elems / TAP_MAJOR) + i / TAP_MAJOR;
    var sum = 0.0;
    for (var s = 0u; s < params.splits; s++) {
        sum += partial[s * params.elems + at];
    }
    if (params.accumulate != 0u) {
        sum += out_ld(i);
    }
    out_st(i, sum);
}
