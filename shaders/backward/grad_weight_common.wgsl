// grad_weight_common.wgsl: what the per-tap GEMM kernels of grad_weight share (shaders/backward/grad_weight.wgsl,
// exact; shaders/backward/grad_weight_half.wgsl, precision `fast`): the slice of the tensors a dispatch covers, the
// bindings and the loads of a K step (each workgroup's job is src/gpu/backward/grad_weight.rs `JOB`, code in
// the kernels' entry points, where naga can see that it is uniform). The host puts it in the same module as them (no entry
// point of its own).

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
// x (binding 1) and grad_out (2), in the tensors' dtype, are read with x_raw(i) and grad_out_raw(i) and converted
// with x_value and grad_out_value (declared by the host: src/gpu/wgsl/operands.rs).
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

// The values of one K step an invocation stages, as loaded (f32, f16 or bf16's bits: src/gpu/wgsl/operands.rs):
// converted where they are staged, so the step's products hide the loads' latency. Each kernel sets BK (pixels
// per step), THREADS (invocations) and LOADS_A / LOADS_B (values of x / grad_output per invocation and step).
struct Staged {
    x: array<x_raw_t, LOADS_A>,
    g: array<grad_out_raw_t, LOADS_B>,
}

// This invocation's share of the step starting at pixel k0: pixel k0 + k_local of the chunk for channel rows
// row0 + (THREADS / BK) * j of x and of grad_output (zero past the chunk's end or outside the tile's channels):
// consecutive invocations load consecutive pixels of a row (coalesced).
fn load_step(c: LoadCtx, k0: u32) -> Staged {
    var r = Staged();
    let k = k0 + c.k_local;
    if (k >= c.k_end) {
        return r;
    }
    let in_pixels = IN_H * IN_W;
    let out_pixels = OUT_H * OUT_W;
    let col = k % c.nw;
    let row = (k / c.nw) % c.nh;
    let n = k / (c.nw * c.nh);
    let ih = c.rh.x + row;
    let iw = c.rw.x + col;
    let xi = slice.x_offset + n * C_IN * in_pixels + ih * IN_W + iw;
    let gi = slice.go_offset + n * C_OUT * out_pixels + (ih * S_H + c.kh * D_H - P_H) * OUT_W
        + (iw * S_W + c.kw * D_W - P_W);
    for (var j = 0u; j < LOADS_A; j++) {
        let ic = c.ic_lo + c.row0 + j * (THREADS / BK);
        if (ic >= slice.ic_begin && ic < c.ic_hi) {
            r.x[j] = x_raw(xi + (ic - slice.ic_begin) * in_pixels);
        }
    }
    for (var j = 0u; j < LOADS_B; j++) {
        let oc = c.oc_lo + c.row0 + j * (THREADS / BK);
        if (oc >= slice.oc_begin && oc < c.oc_hi) {
            r.g[j] = grad_out_raw(gi + (oc - slice.go_first_channel) * out_pixels);
        }
    }
    return r;
}
