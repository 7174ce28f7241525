// dtype.wgsl: the bits of half-precision values (src/dtype.rs): f16 and bf16 tensors hold two values per u32 word,
// element e in the low half of word e / 2 where e is even, the high half where it is odd (little-endian, as the
// host and safetensors store them). The operand functions of src/gpu/wgsl/operands.rs put these in the modules
// whose loads decode f16 bits or whose stores round to f16 or bf16; no entry point of its own.
//
// The conversions are written in integer arithmetic rather than with WGSL's `pack2x16float` and
// `unpack2x16float`: WGSL leaves their rounding, their result beyond f16's range and their subnormals to the
// implementation, and these round to nearest even, give infinities beyond the range and keep subnormals, as
// PyTorch's conversions do.

// The f32 value of f16 bits h (exact: every f16 value is an f32).
fn f16_value(h: u32) -> f32 {
    let sign = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0x1fu) {
        return bitcast<f32>(sign | 0x7f800000u | (m << 13u)); // infinity, NaN
    }
    if (e == 0u) {
        let v = f32(m) * 5.9604644775390625e-8; // a subnormal: m * 2^-24
        return select(v, -v, sign != 0u);
    }
    return bitcast<f32>(sign | ((e + 112u) << 23u) | (m << 13u));
}

// v rounded to f16 (nearest, ties to even; infinity from 65520 up; subnormals kept), as bits.
fn f16_bits(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    let sign = (b >> 16u) & 0x8000u;
    let a = b & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return sign | 0x7e00u; // NaN, quiet
    }
    if (a >= 0x477ff000u) {
        return sign | 0x7c00u; // 65520 and up: infinity
    }
    if (a >= 0x38800000u) {
        // A normal f16 (from 2^-14): the exponent rebiased, 13 bits rounded off.
        let r = a - 0x38000000u;
        return sign | ((r + 0xfffu + ((r >> 13u) & 1u)) >> 13u);
    }
    if (a < 0x33000000u) {
        return sign; // below 2^-25: zero
    }
    // A subnormal f16: the value in units of 2^-24, rounded.
    let m = (a & 0x7fffffu) | 0x800000u;
    let shift = 126u - (a >> 23u);
    let rest = m & ((1u << shift) - 1u);
    let halfway = 1u << (shift - 1u);
    var q = m >> shift;
    if (rest > halfway || (rest == halfway && (q & 1u) == 1u)) {
        q += 1u;
    }
    return sign | q;
}

// v rounded to bf16 (nearest, ties to even), as bits.
fn bf16_bits(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        return (b >> 16u) | 0x40u; // NaN, quiet
    }
    return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}
