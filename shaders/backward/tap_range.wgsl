// tap_range.wgsl: which input indices a tap reaches the output from, shared by the grad_weight kernels
// (shaders/backward/grad_weight.wgsl, shaders/backward/grad_weight_rows.wgsl), put in the same module as them (no
// entry point of its own).

// Input indices [lo, hi) along one axis whose output index i*s - pad + k*d lies in [0, out_size), for tap k (s and
// out_size at least 1, as the host's validation guarantees).
fn axis_range(k: u32, s: u32, pad: u32, d: u32, in_size: u32, out_size: u32) -> vec2<u32> {
    let kd = k * d;
    if (out_size - 1u + pad < kd) {
        return vec2<u32>(0u, 0u);
    }
    var lo = 0u;
    if (pad > kd) {
        lo = (pad - kd + s - 1u) / s;
    }
    let hi = min(in_size, (out_size - 1u + pad - kd) / s + 1u);
    return vec2<u32>(lo, max(lo, hi));
}
