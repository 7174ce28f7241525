// grad_input_weights.wgsl: the weight of the convolution that computes grad_input at stride 1, from the layer's
// weight [Cin, Cout/groups, kH, kW]: w2[co, ic, kh, kw] = w[g*Cig + ic, co - g*Cog, kH-1-kh, kW-1-kw] for co in
// group g, a weight [Cout, Cin/groups, kH, kW]. With it, grad_input is a transposed convolution of grad_output
// (stride 1, padding dilation*(k-1) - padding), which the GEMM kernel runs (src/gpu/backward/grad_input.rs).
// One invocation per element of w2, writing coalesced.

override COUT: u32;
override CIG: u32;
override COG: u32;
override TAPS: u32;
override WORKGROUP_SIZE: u32 = 256u;

@group(0) @binding(0) var<uniform> dispatch_width: u32;
// src (binding 1) and dst (2) in the weight's dtype, through src_ld and dst_st (declared by the host:
// src/gpu/wgsl/operands.rs).

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * dispatch_width + wid.x) * WORKGROUP_SIZE + lid;
    if (i >= COUT * CIG * TAPS) {
        return;
    }
    let tap = i % TAPS;
    let ic = (i / TAPS) % CIG;
    let co = i / (TAPS * CIG);
    let g = co / COG;
    dst_st(i, src_ld(((g * CIG + ic) * COG + co % COG) * TAPS + (TAPS - 1u - tap)));
}
