// gather.wgsl: what the gather kernels share (shaders/forward/direct.wgsl, shaders/forward/rows.wgsl; the host puts
// this file in front of each, behind the shape's constants, shaders/common/shape.wgsl): the tap enumeration's
// override constants, the Slice uniform of one dispatch and the bindings, and the enumeration of the taps that reach
// an output coordinate.
//
// Taps: for q = o + pad, the valid k satisfy k*d = q (mod s). With g = gcd(s, d) that needs g | (q mod s), and then
// k runs through an arithmetic progression of step s/g starting at ((q mod s)/g * inv) mod (s/g), inv being the
// inverse of d/g modulo s/g (host computed). Along it i = (q - k*d)/s falls by d/g per step, so the loop bounds
// are exact, every operation is on non-negative u32 values, and no division happens inside the kernels' loops.
//
// Large tensors arrive in slices (src/gpu/slices.rs): one dispatch covers samples [0, n_count) of the bound chunks,
// input channels [ic_begin, ic_end) and output channel blocks [block_begin, block_begin + block_count). When a
// sample's input channels are split over several dispatches, the later ones add to the output (accumulate = 1)
// instead of starting from the bias.

// gcd(S, D), the inverse of D/gcd modulo S/gcd (0 when S/gcd is 1); computed on the host.
override G_H: u32;
override G_W: u32;
override INV_H: u32;
override INV_W: u32;

struct Slice {
    n_count: u32,
    in_offset: u32,      // element offset of (sample 0 of the slice, channel ic_begin) in the input binding
    out_offset: u32,     // element offset of (sample 0 of the slice, channel of block_begin's group start) in the output binding
    out_first_channel: u32, // the output channel stored at out_offset
    ic_begin: u32,
    ic_end: u32,
    block_begin: u32,
    block_count: u32,
    oc_begin: u32,       // output channels outside [oc_begin, oc_end) belong to another slice
    oc_end: u32,
    accumulate: u32,
    dispatch_width: u32, // workgroups per row of the dispatch grid
}

@group(0) @binding(0) var<uniform> slice: Slice;
// The tensors: x (binding 1), w (2), bias (3) and out (4, written), read with x_ld(i) and the like and written
// with out_st(i, v) in the call's dtype (declared by the host: src/gpu/wgsl/operands.rs).

// The first kernel index of the progression of output coordinate o, with q = o + pad (the same for every o of
// one stride phase), when there is one: ok is false where no kernel index k < k_size has k*d = q (mod s).
struct FirstTap {
    ok: bool,
    k: u32,
}

fn first_tap(q: u32, s: u32, d: u32, g: u32, inv: u32, k_size: u32) -> FirstTap {
    let r = q % s;
    let k0 = ((r / g) * inv) % (s / g);
    return FirstTap(r % g == 0u && k0 < k_size, k0);
}

// First tap and tap count along one axis for output coordinate o.
struct Taps {
    k: u32,   // first kernel index
    i: u32,   // its input index
    count: u32,
}

fn axis_taps(o: u32, pad: u32, s: u32, d: u32, g: u32, inv: u32, k_size: u32, in_size: u32) -> Taps {
    var t = Taps(0u, 0u, 0u);
    let q = o + pad;
    let first = first_tap(q, s, d, g, inv, k_size);
    if (!first.ok || first.k * d > q) {
        return t;
    }
    let k_step = s / g;
    let i_step = d / g;
    var k = first.k;
    var i = (q - k * d) / s;
    if (i >= in_size) {
        // Skip the taps whose input index lies past the end.
        let skip = (i - (in_size - 1u) + i_step - 1u) / i_step;
        k += skip * k_step;
        if (k >= k_size || skip * i_step > i) {
            return t;
        }
        i -= skip * i_step;
    }
    t.k = k;
    t.i = i;
    t.count = min((k_size - 1u - k) / k_step + 1u, i / i_step + 1u);
    return t;
}
