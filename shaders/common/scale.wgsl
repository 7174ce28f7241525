// scale.wgsl: the power-of-two operand scales of precision `fast`, shared by the f16 kernels (the GEMM's f16
// variants, the padded-NHWC cooperative-matrix kernel and its operand preparation) and the passes that take an
// operand's largest magnitude (shaders/common/absmax.wgsl, shaders/forward/gemm_weights.wgsl,
// shaders/forward/coop_nhwc_input.wgsl): put in the same module as them, no entry point of its own.

// What those passes take the maximum of, for a value v: |v| as f32 bits where v is finite, else 0. Non-finite
// values pass through the scaled kernels as themselves and must not decide the scale of the finite ones; as bits,
// the magnitudes of non-negative floats order as the floats do, so an atomicMax on u32 finds the largest.
fn finite_magnitude_bits(v: f32) -> u32 {
    let b = bitcast<u32>(v) & 0x7fffffffu;
    return select(0u, b, b < 0x7f800000u);
}

// The largest finite |value| of an operand, as f32 bits (shaders/common/absmax.wgsl; for the GEMM kernel's weight,
// of the values its packing reads, shaders/forward/gemm_weights.wgsl; for the padded-NHWC kernel's input,
// of the values its copy reads, shaders/forward/coop_nhwc_input.wgsl), to the exponent k that brings
// it into [2^14, 2^15): scaled by 2^k, every finite value of the tensor fits f16 (largest 65504) with room
// for rounding; values down to 2^-28 of the largest keep f16's relative precision, smaller ones (f16
// subnormals) err by at most 2^-39 of the largest. (The kernels cap k at 127, see SCALED_MODULE in
// src/gpu/forward/gemm.rs: only tensors whose largest magnitude is below 2^-113 reach the cap.)
fn scale_exponent(max_bits: u32) -> i32 {
    let e = i32(max_bits >> 23u);
    if (max_bits == 0u) {
        return 0;
    }
    if (e == 0) {
        // Subnormal: the value is mantissa * 2^-149.
        return 132 + i32(countLeadingZeros(max_bits));
    }
    return 141 - e;
}
