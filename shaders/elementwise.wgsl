// elementwise.wgsl: y = a*x + b*y over whole buffers, one invocation per element: the elementwise step of an
// optimizer update (w = w - lr*g: a = -lr, b = 1) and of a loss gradient (g = 2/n*(pred - target) after
// copying pred into g: a = -2/n, b = 2/n). Neither is convolution; they let a training loop stay on the GPU.

struct Params {
    a: f32,
    b: f32,
    len: u32,
    dispatch_width: u32,
}

override WORKGROUP_SIZE: u32 = 256u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * params.dispatch_width + wid.x) * WORKGROUP_SIZE + lid;
    if (i < params.len) {
        y[i] = params.a * x[i] + params.b * y[i];
    }
}
