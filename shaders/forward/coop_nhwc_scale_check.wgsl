// coop_nhwc_scale_check.wgsl: settles an f16 NHWC copy's scale between the two passes of
// shaders/forward/coop_nhwc_input.wgsl (precision `fast`: the padded-NHWC kernel's input, grad_weight's x;
// src/gpu/nhwc_copy.rs, `encode_at_guess`). The first pass scaled by 2^guess[0] and left the tensor's largest
// finite magnitude in op_max[MAX_SLOT]. One invocation compares the guess with the exponent that magnitude asks for
// (shaders/common/scale.wgsl: the largest magnitude scaled into [2^14, 2^15), capped at 127 as the kernels cap it):
// - equal: the first pass's copy stands, and the fix-up's workgroup counts are zeroed, so it dispatches nothing;
// - different: the exponent becomes the guess of the next call, and the counts (the first pass's grid per input
//   chunk) stay, so the fix-up pass rewrites the copy at the exponent the kernel will read from op_max[MAX_SLOT].

override MAX_SLOT: u32;

struct Params {
    chunks: u32, // input chunks: one indirect dispatch (x, y, z workgroup counts) each in `fixup`
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> u: Params;
@group(0) @binding(1) var<storage, read> op_max: array<u32>;
@group(0) @binding(2) var<storage, read_write> fixup: array<u32>;
@group(0) @binding(3) var<storage, read_write> guess: array<i32>;

@compute @workgroup_size(1)
fn main() {
    let k = min(scale_exponent(op_max[MAX_SLOT]), 127);
    if (k == guess[0]) {
        for (var c = 0u; c < u.chunks; c++) {
            fixup[3u * c] = 0u;
        }
    } else {
        guess[0] = k;
    }
}
