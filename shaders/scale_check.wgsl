// scale_check.wgsl: settles the padded f16 input's scale between the two passes of shaders/nhwc_f16.wgsl (precision
// `fast`, the padded-NHWC cooperative-matrix kernel). The first pass scaled by 2^GUESS and left the input's largest
// finite magnitude in op_max[0]. One invocation:
// - keeps 2^GUESS when GUESS lies within SLACK below the exponent k that shaders/scale.wgsl asks for (largest
//   magnitude scaled into [2^14, 2^15)), or when the input has no finite nonzero value: then every value fits f16
//   (GUESS <= k), and the largest scaled lies in [2^(14 - SLACK), 2^15), so values down to 2^-(28 - SLACK) of it
//   keep f16's relative precision and smaller ones (f16 subnormals) err by at most 2^-(25 + 14 - SLACK) of it. It
//   writes op_max[0] as a magnitude whose exponent is GUESS (2^(14 - GUESS)), which the kernel's prologue reads as
//   the input's scale, and zeroes the fix-up's workgroup counts, so the fix-up dispatches nothing;
// - otherwise leaves op_max[0] and the counts (the first pass's grid per input chunk) as they are: the fix-up pass
//   rewrites the input at scale 2^k.

override GUESS: i32;
override SLACK: i32;

struct Params {
    chunks: u32, // input chunks: one indirect dispatch (x, y, z workgroup counts) each in `fixup`
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> u: Params;
@group(0) @binding(1) var<storage, read_write> op_max: array<u32>;
@group(0) @binding(2) var<storage, read_write> fixup: array<u32>;

@compute @workgroup_size(1)
fn main() {
    let k = scale_exponent(op_max[0]);
    if (op_max[0] == 0u || (GUESS <= k && GUESS >= k - SLACK)) {
        op_max[0] = bitcast<u32>(ldexp(1.0, 14 - GUESS));
        for (var c = 0u; c < u.chunks; c++) {
            fixup[3u * c] = 0u;
        }
    }
}
