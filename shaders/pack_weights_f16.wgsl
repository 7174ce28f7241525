// pack_weights_f16.wgsl: the weight of the padded-NHWC cooperative-matrix kernel (shaders/coop_nhwc.wgsl,
// precision `fast`): [C_IN, C_OUT, K_H, K_W] f32 (one group) to [tap][ic][oc] f16, scaled by its power of two
// (shaders/scale.wgsl), the taps flipped: tap t = a * K_W + b holds kernel element (K_H-1-a, K_W-1-b), the one
// that pairs an output pixel with the input pixel a*D_H rows and b*D_W columns after it in the padded input.
// One invocation per packed value.

enable f16;

override C_IN: u32;
override C_OUT: u32;
override K_H: u32;
override K_W: u32;

struct Params {
    dispatch_width: u32, // workgroups per grid row
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> u: Params;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> wp: array<f16>;
@group(0) @binding(3) var<storage, read> op_max: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * u.dispatch_width + wid.x) * 256u + lid;
    if (i >= K_H * K_W * C_IN * C_OUT) {
        return;
    }
    let scale = ldexp(1.0, min(scale_exponent(op_max[1]), 127));
    let oc = i % C_OUT;
    let ic = (i / C_OUT) % C_IN;
    let t = i / (C_OUT * C_IN);
    let kh = K_H - 1u - t / K_W;
    let kw = K_W - 1u - t % K_W;
    wp[i] = f16(w[((ic * C_OUT + oc) * K_H + kh) * K_W + kw] * scale);
}
