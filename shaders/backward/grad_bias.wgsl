// grad_bias.wgsl: the gradient of conv_transpose2d with respect to its bias, SPLITS workgroups per output channel.
//
// What it computes: grad_bias[co] = the sum of grad_output[n, co, oh, ow] over samples and output pixels.
//
// Mapping: grad_output arrives one chunk at a time (a run of planes, a plane being one (sample, channel)
// image); the SPLITS workgroups of channel co each walk a consecutive share of the chunk's planes of that
// channel, their invocations on consecutive pixels (coalesced reads), then add the invocations' partial sums in a
// fixed tree in workgroup memory. With one split that sum is the channel's; with more (few channels, each many
// pixels: one workgroup per channel left most of the GPU idle), each split stores its sum and its gathered error
// to `partial_sums`, and a second dispatch of this shader with COMBINE set adds a channel's splits in split order. No
// atomics: the result is the same bit for bit on every run. With accumulate set, a chunk's sums are added to
// what earlier chunks stored, in chunk order (the host clears grad_bias first).
//
// Accuracy: every addition is compensated (Knuth's two-sum carries each rounding error along), so the result
// errs by about one rounding of the sum itself, not by the rounding of the largest partial sums: a gradient
// whose terms nearly cancel (a sum far smaller than the sum of its terms' magnitudes) stays exact to f32.
// (A grad_output split over several bindings adds one rounding per chunk.)
//
// The host puts the shape's override constants (shaders/common/shape.wgsl) in front of this file.

const WG: u32 = 256u;
override SPLITS: u32 = 1u;
override COMBINE: bool = false;

struct Chunk {
    first_plane: u32,   // plane index (n * C_OUT + co) of the chunk's first plane
    planes: u32,
    accumulate: u32,
    dispatch_width: u32,
    one: f32,       // 1.0 (see two_sum)
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> chunk: Chunk;
// grad_out (binding 1) and grad_b (2), read with grad_out_ld(i) and written with grad_b_st(i, v) in their dtypes
// (declared by the host: src/gpu/wgsl/operands.rs).
// Each split's (sum, error), [channel][split], with more than one split.
@group(0) @binding(3) var<storage, read_write> partial_sums: array<vec2<f32>>;

// Each invocation's sum and the rounding errors it has gathered.
var<workgroup> partial: array<vec2<f32>, WG>;

// a + b as (rounded sum, its exact rounding error) (Knuth's two-sum: exact in round-to-nearest). Shader
// compilers may simplify floating-point algebra (Mesa turns (a + b) - a into b), which would drop the error;
// multiplying by chunk.one, a 1.0 they cannot see, keeps every step as written (and exact: x * 1.0 = x, so
// fusing a product into an add changes nothing either).
fn two_sum(a: f32, b: f32) -> vec2<f32> {
    let s = (a + b) * chunk.one;
    let bb = (s - a) * chunk.one;
    return vec2<f32>(s, (a - (s - bb)) + (b - bb));
}

// Whether x is neither Inf nor NaN (its exponent bits not all set).
fn is_finite(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7f800000u) != 0x7f800000u;
}

// Adds v to the compensated sum acc (sum, error).
fn add(acc: vec2<f32>, v: f32) -> vec2<f32> {
    let t = two_sum(acc.x, v);
    return vec2<f32>(t.x, acc.y + t.y);
}

// Stores channel co's total (sum, error), added to what earlier chunks stored where accumulating.
fn store(co: u32, sum: vec2<f32>) {
    var total = sum;
    if (chunk.accumulate != 0u) {
        total = add(total, grad_b_ld(co));
    }
    // A non-finite sum (an Inf or NaN term, or overflow) is the plain sum itself: its error term is then
    // NaN (Inf - Inf) and must not replace the definition's Inf.
    grad_b_st(co, select(total.x, total.x + total.y, is_finite(total.x)));
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let w = wid.y * chunk.dispatch_width + wid.x;
    if (COMBINE) {
        // One invocation per channel: its splits' sums in split order, their errors carried along.
        let co = w * WG + lid;
        if (co < C_OUT) {
            var total = vec2<f32>(0.0);
            for (var s = 0u; s < SPLITS; s++) {
                let v = partial_sums[co * SPLITS + s];
                let t = add(total, v.x);
                total = vec2<f32>(t.x, t.y + v.y);
            }
            store(co, total);
        }
        return;
    }
    let co = w / SPLITS;
    let split = w % SPLITS;
    if (co >= C_OUT) {
        return;
    }
    let pixels = OUT_H * OUT_W;
    // The chunk's first plane of channel co, then every C_OUT-th plane: `count` of them, this split's share
    // [k0, k1) of them.
    let first = (co + C_OUT - chunk.first_plane % C_OUT) % C_OUT;
    let count = select(0u, (chunk.planes - first + C_OUT - 1u) / C_OUT, first < chunk.planes);
    let share = (count + SPLITS - 1u) / SPLITS;
    let k0 = min(split * share, count);
    let k1 = min(k0 + share, count);
    var sum = vec2<f32>(0.0);
    for (var k = k0; k < k1; k++) {
        let base = (first + k * C_OUT) * pixels;
        for (var i = lid; i < pixels; i += WG) {
            sum = add(sum, grad_out_ld(base + i));
        }
    }
    partial[lid] = sum;
    workgroupBarrier();
    for (var half = WG / 2u; half > 0u; half /= 2u) {
        if (lid < half) {
            let other = partial[lid + half];
            let t = add(partial[lid], other.x);
            partial[lid] = vec2<f32>(t.x, t.y + other.y);
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        if (SPLITS == 1u) {
            store(co, partial[0]);
        } else {
            partial_sums[co * SPLITS + split] = partial[0];
        }
    }
}
