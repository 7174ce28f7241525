// grad_weight_gather.wgsl: grad_output gathered per tap for grad_weight's NHWC GEMM in its gathered form
// (shaders/backward/grad_weight_nhwc.wgsl): from its padded f16 NHWC copy (src/gpu/nhwc_copy.rs: GH rows of GW
// pixels an image, the padding written out as zeros, pixels SRC_Q quads apart), for each tap (kh, kw) a region of
// TAP_PIXELS pixels, DST_Q quads apart, whose pixel p is the one x pixel p (n, i, j in x's [n][i][j] order) meets
// under that tap: copy row i * S_H + kh * D_H, column j * S_W + kw * D_W. Then 16 consecutive x pixels of any rows
// meet 16 consecutive pixels of each tap's region, which one cooperative-matrix load reads. Pixels past x's
// (REAL) are written as zeros: the blocks past the end read them. One invocation per quad of 4 channels: copied
// as stored, already at grad_output's scale.
//
// The host puts the shape's override constants (shaders/common/shape.wgsl) in front of this file.

override GH: u32;
override GW: u32;
override SRC_Q: u32;      // quads between the copy's pixels
override DST_Q: u32;      // quads between the gathered pixels
override REAL: u32;       // x's pixels: samples * IN_H * IN_W
override TAP_PIXELS: u32; // pixels of a tap's region

struct Params {
    dispatch_width: u32, // workgroups per grid row
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> u: Params;
@group(0) @binding(1) var<storage, read> gq: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read_write> gathered: array<vec4<f16>>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * u.dispatch_width + wid.x) * 256u + lid;
    if (i >= K_H * K_W * TAP_PIXELS * DST_Q) {
        return;
    }
    let q = i % DST_Q;
    let p = (i / DST_Q) % TAP_PIXELS;
    let tap = i / (DST_Q * TAP_PIXELS);
    if (p >= REAL || q >= SRC_Q) {
        gathered[i] = vec4<f16>();
        return;
    }
    let j = p % IN_W;
    let row = (p / IN_W) % IN_H;
    let n = p / (IN_W * IN_H);
    let src = (n * GH + row * S_H + (tap / K_W) * D_H) * GW + j * S_W + (tap % K_W) * D_W;
    gathered[i] = gq[src * SRC_Q + q];
}
