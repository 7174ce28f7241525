// coop_winograd_weights.wgsl: the weight of the Winograd tensor-core kernel (shaders/forward/coop_winograd.wgsl):
// from [C_IN, C_OUT, K_H, K_W] (one group, any dtype: w_ld) each kernel row's K_W taps, flipped (tap b is kernel
// column K_W - 1 - b, kernel row a is K_H - 1 - a: the correlation the kernel computes), scaled by the weight's
// power of two (shaders/common/scale.wgsl) and 2^-HW, transformed by G in f32 and rounded to f16:
// U[point][a][ic][oc], rows of C_OUT values U_ROW halves apart (the halves past C_OUT are never written or read).
// One invocation per kernel row, input channel and output channel.
//
// The host puts the shape's override constants (shaders/common/shape.wgsl), w's binding and the transform
// (TRANSFORM: the points' sums of g0 .. g(K_W - 1)) into this file.

override U_ROW: u32;
override HW: i32;

struct Params {
    dispatch_width: u32, // workgroups per grid row
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> u: Params;
@group(0) @binding(2) var<storage, read_write> uq: array<f16>;
@group(0) @binding(3) var<storage, read> op_max: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * u.dispatch_width + wid.x) * 256u + lid;
    if (i >= K_H * C_IN * C_OUT) {
        return;
    }
    let scale = ldexp(1.0, min(scale_exponent(op_max[1]), 127) - HW);
    let oc = i % C_OUT;
    let ic = (i / C_OUT) % C_IN;
    let a = i / (C_OUT * C_IN);
    let row = ((ic * C_OUT + oc) * K_H + K_H - 1u - a) * K_W + K_W - 1u;
    // Row `a`'s plane of every point: U[p][a][ic][oc].
    let at = (a * C_IN + ic) * U_ROW + oc;
    let plane = K_H * C_IN * U_ROW;
//#TRANSFORM
}
