// coop_winograd_input.wgsl: the input of the Winograd tensor-core kernel (shaders/forward/coop_winograd.wgsl):
// from the padded f16 NHWC copy of the input (src/gpu/nhwc_copy.rs: H_V rows of WIDTH pixels a sample, pixels
// C_IN halves apart, at the copy's scale), each tile's P = M_OUT + K_W - 1 pixels transformed by BT in f32, scaled
// by 2^-HX and rounded to f16: V[point][tile][channel], tiles VS halves apart (C_IN + 8: the pad is written as
// zeros), one plane of PLANE_Q quads per point. Tiles past the input's (the rows after the last sample that the
// last tiles' kernel rows read) are written as zeros. One invocation per tile and quad of 4 channels: neighbouring
// invocations read and write neighbouring channels of a pixel (contiguous in both layouts).
//
// The host puts the tile's constants (M_OUT, the transform: TRANSFORM) into this file.

override C4: u32;          // quads of channels per pixel of the copy (C_IN / 4)
override VQ: u32;          // quads per tile of V (VS / 4)
override WIDTH: u32;       // the copy's pixels per row
override T: u32;           // tiles per row
override REAL_TILES: u32;  // tiles of the input's samples (samples * H_V * T)
override ALL_TILES: u32;   // tiles of a plane, the zero tail included
override PLANE_Q: u32;     // quads of a plane (ALL_TILES * VQ)
override HEAD: f32;        // 2^-HX

struct Params {
    dispatch_width: u32, // workgroups per grid row
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> u: Params;
@group(0) @binding(1) var<storage, read> xp: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read_write> vq: array<vec4<f16>>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * u.dispatch_width + wid.x) * 256u + lid;
    if (i >= ALL_TILES * VQ) {
        return;
    }
    let tile = i / VQ;
    let q = i % VQ;
    if (tile >= REAL_TILES || q >= C4) {
        for (var p = 0u; p < P; p++) {
            vq[p * PLANE_Q + i] = vec4<f16>();
        }
        return;
    }
    // The tile's first pixel: row tile / T of the copy (sample-major), column (tile % T) * M_OUT.
    let first = (tile / T) * WIDTH + (tile % T) * M_OUT;
//#TRANSFORM
}
