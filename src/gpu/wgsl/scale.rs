//! The power-of-two operand scales of precision `fast` (`shaders/common/scale.wgsl` and the module-scope code of
//! the kernels that stage f16 operands): f32 and bf16 tensors are scaled into f16's range by their largest finite
//! magnitude; f16 tensors need no scale (their maxima are left zero, which gives a scale of 1).

pub const SCALE_SHADER_NAME: &str = "common/scale.wgsl";
/// The scale functions (`finite_magnitude_bits`, `scale_exponent`): no entry point of their own.
pub(crate) const SCALE_FUNCTIONS: &str = include_str!("../../../shaders/common/scale.wgsl");

/// The module-scope code of the f16-operand variants (behind the maxima's binding, [`scaled_module`]): the
/// operand maxima (written by
/// shaders/common/absmax.wgsl, the GEMM's weight maximum by its packing, shaders/forward/gemm_weights.wgsl; the padded-NHWC
/// kernel's input maximum by its copy, shaders/forward/coop_nhwc_input.wgsl) and the scaling by powers of two. Each operand's
/// scale 2^k has k capped at 127, so it is one normal f32 and staging a value costs one exact multiplication (k
/// would exceed 127 only for a tensor whose largest magnitude is below 2^-113; with the cap, every normal f32 value
/// of it still lands in f16's normal range). The products' inverse scale can lie beyond f32's exponents; it is
/// applied once per output, by a multiplication where it is a normal f32 and by two `ldexp` halves otherwise. (Two
/// `ldexp` per staged value measured costlier than the tensor-core products; a branch between the two ways per
/// staged value measured markedly slower; a product of two factors per value could be reassociated by the driver
/// into one factor that overflows: docs/PERFORMANCE.md.)
pub(crate) const SCALED_MODULE: &str = concat!(
    include_str!("../../../shaders/common/scale.wgsl"),
    "
// The input's and the weight's scale factors, and the exponent of the products' inverse scale.
var<private> scale_x: f32;
var<private> scale_w: f32;
var<private> exp_out: i32;

// The f32 sum of scaled products back at the operands' scale: v * 2^exp_out, exactly. The branch is the same
// for every invocation. The halves are clamped to ldexp's defined range: a clamp acts only where |exp_out|
// exceeds 252, where the result is +-0 either way (the sums of scaled products lie below 2^62 in magnitude).
fn unscale(v: f32) -> f32 {
    if (exp_out >= -126 && exp_out <= 127) {
        return v * ldexp(1.0, exp_out);
    }
    let h = exp_out / 2;
    return ldexp(ldexp(v, clamp(h, -126, 127)), clamp(exp_out - h, -126, 127));
}

// unscale as two factors, for a cooperative matrix (which multiplies by a scalar, not by ldexp):
// v * f.x * f.y == unscale(v), both factors powers of two.
fn unscale_factors() -> vec2<f32> {
    if (exp_out >= -126 && exp_out <= 127) {
        return vec2(ldexp(1.0, exp_out), 1.0);
    }
    let h = exp_out / 2;
    return vec2(ldexp(1.0, clamp(h, -126, 127)), ldexp(1.0, clamp(exp_out - h, -126, 127)));
}
"
);

/// The maxima's binding of [`SCALED_MODULE`] in the forward kernels.
pub(crate) const MAXIMA_BINDING: u32 = 5;

/// [`SCALED_MODULE`] with the operand maxima declared at `binding` (5 in the forward kernels: [`MAXIMA_BINDING`]).
pub(crate) fn scaled_module(binding: u32) -> String {
    format!("@group(0) @binding({binding}) var<storage, read> op_max: array<u32>;\n{SCALED_MODULE}")
}

/// The prologue of the f16-operand variants: the scales from the operand maxima, the input's (x) in slot `slots[0]`
/// and the weight's (w) in slot `slots[1]` (WGSL expressions: a literal, or an override constant where a kernel
/// reads maxima another kernel's buffer holds).
pub(crate) fn scaled_prologue(slots: [&str; 2]) -> String {
    format!(
        "    let exp_x = min(scale_exponent(op_max[{}]), 127);
    let exp_w = min(scale_exponent(op_max[{}]), 127);
    scale_x = ldexp(1.0, exp_x);
    scale_w = ldexp(1.0, exp_w);
    exp_out = -(exp_x + exp_w);
",
        slots[0], slots[1]
    )
}

/// The slots of [`scaled_prologue`] in most kernels: the input's maximum in slot 0, the weight's in slot 1.
pub(crate) const SLOTS_01: [&str; 2] = ["0", "1"];
