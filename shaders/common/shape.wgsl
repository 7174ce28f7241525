// shape.wgsl: the sizes of a transposed convolution as override constants, put in front of every kernel that
// reads them (src/gpu/kernel.rs, `with_shape_prelude!`): input [N, C_IN, IN_H, IN_W], weight [C_IN,
// C_OUT / GROUPS, K_H, K_W], output [N, C_OUT, OUT_H, OUT_W], stride, padding and dilation along H and W, and
// whether a bias is bound. A kernel's pipeline sets those it reads (`shape_constants` in src/gpu/kernel.rs sets
// all of them; a preparation kernel sets the few it reads, beside constants of its own); one it does not read
// needs no value.

override C_IN: u32;
override C_OUT: u32;
override GROUPS: u32;
override IN_H: u32;
override IN_W: u32;
override OUT_H: u32;
override OUT_W: u32;
override K_H: u32;
override K_W: u32;
override S_H: u32;
override S_W: u32;
override P_H: u32;
override P_W: u32;
override D_H: u32;
override D_W: u32;
override HAS_BIAS: bool;
