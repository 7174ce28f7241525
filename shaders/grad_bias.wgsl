// grad_bias.wgsl: the gradient of conv_transpose2d with respect to its bias, one workgroup per output channel.
//
// What it computes: grad_bias[co] = the sum of grad_output[n, co, oh, ow] over samples and output pixels.
//
// Mapping: grad_output arrives one chunk at a time (a run of planes, a plane being one (sample, channel)
// image); the workgroup of channel co walks the chunk's planes of that channel, its invocations on
// consecutive pixels (coalesced reads), then adds the invocations' partial sums in a fixed tree in workgroup
// memory. No atomics: the result is the same bit for bit on every run. With accumulate set, a chunk's sums
// are added to what earlier chunks stored, in chunk order (the host clears grad_bias first).

override C_OUT: u32;
override OUT_H: u32;
override OUT_W: u32;

const WG: u32 = 256u;

struct Chunk {
    first_plane: u32,   // plane index (n * C_OUT + co) of the chunk's first plane
    planes: u32,
    accumulate: u32,
    dispatch_width: u32,
}

@group(0) @binding(0) var<uniform> chunk: Chunk;
@group(0) @binding(1) var<storage, read> grad_out: array<f32>;
@group(0) @binding(2) var<storage, read_write> grad_b: array<f32>;

var<workgroup> partial: array<f32, WG>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let co = wid.y * chunk.dispatch_width + wid.x;
    if (co >= C_OUT) {
        return;
    }
    let pixels = OUT_H * OUT_W;
    // The chunk's first plane of channel co, then every C_OUT-th plane.
    let first = (co + C_OUT - chunk.first_plane % C_OUT) % C_OUT;
    var sum = 0.0;
    for (var p = first; p < chunk.planes; p += C_OUT) {
        let base = p * pixels;
        for (var i = lid; i < pixels; i += WG) {
            sum += grad_out[base + i];
        }
    }
    partial[lid] = sum;
    workgroupBarrier();
    for (var half = WG / 2u; half > 0u; half /= 2u) {
        if (lid < half) {
            partial[lid] += partial[lid + half];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        var v = partial[0];
        if (chunk.accumulate != 0u) {
            v += grad_b[co];
        }
        grad_b[co] = v;
    }
}
