// convert.wgsl: a tensor chunk's values from dtype SRC to dtype DST (shaders/common/dtype.wgsl, which the host
// appends), one destination word per invocation: one value into f32, two into f16 or bf16 (the second zero past
// the chunk's last element, so the padding of an odd-length chunk is defined).

override SRC: u32;
override DST: u32;

struct Params {
    count: u32,          // elements in the chunk
    dispatch_width: u32, // workgroups per grid row
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> u: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;

fn value(e: u32) -> f32 {
    return dtype_value(SRC, src[dtype_word(SRC, e)], e);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * u.dispatch_width + wid.x) * 256u + lid;
    if (DST == 0u) {
        if (i < u.count) {
            dst[i] = bitcast<u32>(value(i));
        }
    } else if (2u * i < u.count) {
        let second = select(0.0, value(2u * i + 1u), 2u * i + 1u < u.count);
        dst[i] = dtype_pack(DST, value(2u * i), second);
    }
}
