// pack_weights.wgsl: reorders a weight [Cin, Cout/groups, kH, kW] into [kH*kW, Cin, Cout/groups] for the GEMM
// kernel, so that a K step's B tile (fixed tap and input channel, consecutive output channels) is read with
// consecutive invocations at consecutive addresses. One invocation per element, reading coalesced.

override C_IN: u32;
override COG: u32;
override TAPS: u32;
override WORKGROUP_SIZE: u32 = 256u;

@group(0) @binding(0) var<storage, read> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.y * nwg.x * WORKGROUP_SIZE + gid.x;
    if (i >= C_IN * COG * TAPS) {
        return;
    }
    // i indexes src = [ic][oc][tap]
    let tap = i % TAPS;
    let row = i / TAPS; // ic * COG + oc
    dst[tap * C_IN * COG + row] = src[i];
}
