// ceiling_copy.wgsl: the adapter's memory bandwidth, for `convt bench --ceilings`: a coalesced vec4 copy,
// one element per invocation; bandwidth counts bytes read plus bytes written.

override WORKGROUP_SIZE: u32 = 256u;

@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f32>>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = gid.y * nwg.x * WORKGROUP_SIZE + gid.x;
    if (id < arrayLength(&dst)) {
        dst[id] = src[id];
    }
}
