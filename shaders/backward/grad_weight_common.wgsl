// grad_weight_common.wgsl: what the per-tap GEMM kernels of grad_weight share (shaders/backward/grad_weight.wgsl,
// exact; shaders/backward/grad_weight_half.wgsl, precision `fast`): the slice of the tensors a dispatch covers, the
// bindings, and what the loads of a K step need. The host puts it in the same module as them (no entry point of its
// own).

struct Slice {
    n_count: u32,
    x_offset: u32,          // element offset of (sample 0 of the slice, channel ic_begin) in the x binding
    go_offset: u32,         // element offset of (sample 0 of the slice, channel go_first_channel) in grad_output
    go_first_channel: u32,
    ic_begin: u32,
    ic_end: u32,
    oc_begin: u32,          // grad_output channels of the slice (global channel numbers)
    oc_end: u32,
    splits: u32,            // K chunks per tile
    chunk: u32,             // pixels per K chunk (a multiple of BK)
    dispatch_width: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> slice: Slice;
// x (binding 1) and grad_out (2), in the tensors' dtype, are read with x_ld(i) and grad_out_ld(i) (declared by
// the host: src/gpu/wgsl/operands.rs).
@group(0) @binding(3) var<storage, read_write> partial: array<f32>;

// What the loads of a step need.
struct LoadCtx {
    rh: vec2<u32>,  // the tap's input rows [rh.x, rh.y) and columns [rw.x, rw.y)
    rw: vec2<u32>,
    nh: u32,
    nw: u32,
    k_end: u32,
    k_local: u32,
    row0: u32,
    ic_lo: u32,
    ic_hi: u32,
    oc_lo: u32,
    oc_hi: u32,
    kh: u32,
    kw: u32,
}
