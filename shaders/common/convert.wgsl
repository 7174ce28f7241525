// convert.wgsl: a tensor chunk's values from one dtype into another, one element per invocation: src read with
// src_ld(i) (exact) and dst written with dst_st(i, v), rounded to nearest even (both declared by the host, in the
// tensors' dtypes: src/gpu/wgsl/operands.rs).

struct Params {
    count: u32,          // elements in the chunk
    dispatch_width: u32, // workgroups per grid row
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> u: Params;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * u.dispatch_width + wid.x) * 256u + lid;
    if (i < u.count) {
        dst_st(i, src_ld(i));
    }
}
