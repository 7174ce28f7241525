// coop_nhwc_weights.wgsl: one stride phase's weight for the padded-NHWC cooperative-matrix kernel
// (shaders/forward/coop_nhwc.wgsl, precision `fast`): from [C_IN, C_OUT, K_H, K_W] (one group, any dtype: w_ld) the phase's T_H
// x T_W taps as [tap][ic][oc] f16 at W_OFF, scaled by its power of two (shaders/common/scale.wgsl), the taps
// flipped: packed tap t = a * T_W + b holds kernel element (LAST_H - a*KSTEP_H, LAST_W - b*KSTEP_W), the one that
// pairs an output pixel of the phase with the input pixel a*D_H rows and b*D_W columns after that of packed tap
// (0, 0). At stride 1 the phase has every tap (T = K, LAST = K - 1, KSTEP = 1). Rows of C_OUT values are W_ROW
// halves apart (C_OUT + 8: see shaders/forward/coop_nhwc.wgsl); the halves past C_OUT are never written or read.
// One invocation per packed value.
//
// The host puts the shape's override constants (shaders/common/shape.wgsl) and w's binding in front of this file.

override T_H: u32;     // the phase's taps
override T_W: u32;
override LAST_H: u32;  // the phase's last tap, packed first
override LAST_W: u32;
override KSTEP_H: u32; // kernel elements between the phase's taps
override KSTEP_W: u32;
override W_OFF: u32;   // the phase's place in the packed weight, in halves
override W_ROW: u32;   // halves between rows (ic) of the packed weight

struct Params {
    dispatch_width: u32, // workgroups per grid row
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> u: Params;
enable f16;
@group(0) @binding(2) var<storage, read_write> wp: array<f16>;
@group(0) @binding(3) var<storage, read> op_max: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * u.dispatch_width + wid.x) * 256u + lid;
    if (i >= T_H * T_W * C_IN * C_OUT) {
        return;
    }
    let scale = ldexp(1.0, min(scale_exponent(op_max[1]), 127));
    let oc = i % C_OUT;
    let ic = (i / C_OUT) % C_IN;
    let t = i / (C_OUT * C_IN);
    let kh = LAST_H - (t / T_W) * KSTEP_H;
    let kw = LAST_W - (t % T_W) * KSTEP_W;
    wp[W_OFF + (t * C_IN + ic) * W_ROW + oc] = f16(w_ld(((ic * C_OUT + oc) * K_H + kh) * K_W + kw) * scale);
}
