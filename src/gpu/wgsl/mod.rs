//! The shader kit: the WGSL every kernel composes its source from, in one place, so that no algorithm module
//! borrows another's shader code. What it holds:
//! - the shape's override constants (`shaders/common/shape.wgsl`, [`with_shape_prelude!`], [`shape_constants`]) and
//!   the filling of a generated shader's marker lines ([`fill_markers`], [`without_section`]);
//! - [`operands`]: the bindings of tensors and their load and store functions per dtype (f32, f16, bf16), how every
//!   kernel reads and writes a tensor;
//! - [`scale`]: the power-of-two scales that bring f32 and bf16 operands into f16's range for precision `fast`;
//! - [`register`]: the register micro-kernel of the register-tile GEMMs;
//! - [`coop`]: cooperative-matrix accumulators, products and the epilogue through workgroup scratch;
//! - [`winograd`]: the Winograd transforms F(m, r) and their generated WGSL.
//!
//! [`module`] assembles a kernel's parts into one source with its `enable` directives first, as WGSL wants them.

pub(crate) mod coop;
pub(crate) mod operands;
pub(crate) mod register;
pub(crate) mod scale;
pub(crate) mod winograd;

use crate::params::ConvShape;

/// The shape's override constants (`shaders/common/shape.wgsl`: no entry point of its own, validated in the kernels
/// that read them).
pub(crate) const SHAPE_SHADER_NAME: &str = "common/shape.wgsl";

/// The WGSL of the shader files named (paths below `shaders/`, one after the other) behind the shape's override
/// constants, `shaders/common/shape.wgsl`: the source of a kernel that reads the shape. (A file with an `enable`
/// directive leaves it to the host, in front of the whole: WGSL wants directives before every declaration.)
macro_rules! with_shape_prelude {
    ($($file:literal),+) => {
        concat!(
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/shaders/common/shape.wgsl")),
            $(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/shaders/", $file))),+
        )
    };
}
pub(crate) use with_shape_prelude;

/// The values of `shaders/common/shape.wgsl` for a shape: the problem's sizes, all of them (a kernel that does not
/// read one compiles the same whatever its value).
pub(crate) fn shape_constants(shape: &ConvShape, has_bias: bool) -> Vec<(&'static str, f64)> {
    [
        ("C_IN", shape.in_channels),
        ("C_OUT", shape.out_channels),
        ("GROUPS", shape.groups),
        ("IN_H", shape.in_hw[0]),
        ("IN_W", shape.in_hw[1]),
        ("OUT_H", shape.out_hw[0]),
        ("OUT_W", shape.out_hw[1]),
        ("K_H", shape.kernel[0]),
        ("K_W", shape.kernel[1]),
        ("S_H", shape.stride[0]),
        ("S_W", shape.stride[1]),
        ("P_H", shape.padding[0]),
        ("P_W", shape.padding[1]),
        ("D_H", shape.dilation[0]),
        ("D_W", shape.dilation[1]),
        ("HAS_BIAS", has_bias as usize),
    ]
    .into_iter()
    .map(|(k, v)| (k, v as f64))
    .collect()
}

/// `template` with each marker line `//#NAME` of `parts` (`(NAME, code)`) replaced by the code (lines ending in a
/// newline, or nothing): how every generated kernel fills its template. A marker named that the template lacks is
/// a bug in the generator (checked in debug builds); that no marker line is left in any variant, the tests check
/// (tests/shaders.rs), and a shader left incomplete fails naga's validation as a typed error, never a wrong answer.
pub(crate) fn fill_markers(template: &str, parts: &[(&str, &str)]) -> String {
    parts.iter().fold(template.to_string(), |text, (name, code)| {
        let line = format!("//#{name}\n");
        debug_assert!(text.contains(&line), "no marker line {name} in the template");
        text.replace(&line, code)
    })
}

/// `text` without the lines from `//#<name>_BEGIN` to `//#<name>_END`.
pub(crate) fn without_section(text: &str, name: &str) -> String {
    let (begin, end) = (format!("//#{name}_BEGIN\n"), format!("//#{name}_END\n"));
    match (text.find(&begin), text.find(&end)) {
        (Some(b), Some(e)) if b < e => format!("{}{}", &text[..b], &text[e + end.len()..]),
        _ => text.to_string(),
    }
}

/// One shader source of `parts` (in order), every `enable` directive of any part moved to the front once: the
/// operand declarations, the kit's code and a kernel's own may each need `f16`, `wgpu_int16` or cooperative
/// matrices, and WGSL wants directives before every declaration.
pub(crate) fn module(parts: &[&str]) -> String {
    let mut directives: Vec<&str> = Vec::new();
    let mut body = String::new();
    for part in parts {
        for line in part.split_inclusive('\n') {
            let t = line.trim();
            if t.starts_with("enable ") && t.ends_with(';') {
                if !directives.contains(&t) {
                    directives.push(t);
                }
            } else {
                body.push_str(line);
            }
        }
        if !body.ends_with('\n') {
            body.push('\n');
        }
    }
    directives.iter().map(|d| format!("{d}\n")).collect::<String>() + &body
}
