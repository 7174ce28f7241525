// absmax.wgsl: the largest finite magnitude of a tensor, for the power-of-two scaling of f16 operands
// (precision `fast`, see shaders/forward/gemm.wgsl).
//
// The result is kept as f32 bits (`finite_magnitude_bits`, shaders/common/scale.wgsl, which the host appends:
// non-finite values left out), so an atomicMax on u32 finds the maximum, and the result does not depend on the
// order the invocations run in. Each invocation walks the chunk with a grid stride
// (coalesced), LOADS values a stride apart per pass so that several loads are in flight at once (one per pass
// read well below the copy bandwidth: docs/PERFORMANCE.md), the workgroup combines its
// invocations in workgroup memory, and one atomic per workgroup updates slot `slot` of `maxima` (which the host
// zeroes; a tensor in several chunks is several dispatches into the same slot).

override WORKGROUP_SIZE: u32 = 256u;
override LOADS: u32 = 4u;

struct Params {
    count: u32,       // elements of this chunk
    slot: u32,        // 0: input, 1: weight
    stride: u32,      // invocations in the dispatch
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
// data (binding 1), the tensor in its dtype, is read with data_ld(i) (declared by the host:
// src/gpu/wgsl/operands.rs).
@group(0) @binding(2) var<storage, read_write> maxima: array<atomic<u32>>;

var<workgroup> wg_max: atomic<u32>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    if (lid == 0u) {
        atomicStore(&wg_max, 0u);
    }
    workgroupBarrier();
    var m = 0u;
    for (var i = gid.x; i < p.count; i += LOADS * p.stride) {
        for (var k = 0u; k < LOADS; k++) {
            let j = i + k * p.stride;
            if (j < p.count) {
                m = max(m, finite_magnitude_bits(data_ld(j)));
            }
        }
    }
    atomicMax(&wg_max, m);
    workgroupBarrier();
    if (lid == 0u) {
        atomicMax(&maxima[p.slot], atomicLoad(&wg_max));
    }
}
