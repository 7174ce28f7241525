// ceiling_fma.wgsl: the adapter's fp32 FMA rate, for `convt bench --ceilings`. Each invocation runs
// ITERATIONS rounds of 8 independent vec4 FMA chains (32 FMAs, 64 FLOP per round): enough independent work
// to hide FMA latency, no memory traffic but one store per invocation (which keeps the loop alive).

override ITERATIONS: u32 = 2048u;
override WORKGROUP_SIZE: u32 = 256u;

@group(0) @binding(0) var<storage, read_write> sink: array<vec4<f32>>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = gid.y * nwg.x * WORKGROUP_SIZE + gid.x;
    let seed = f32(id & 1023u) * 1e-3;
    let m = vec4<f32>(0.999, 0.998, 0.997, 0.996);
    let c = vec4<f32>(1e-3, 2e-3, 3e-3, 4e-3);
    var a0 = vec4<f32>(seed); var a1 = a0 + 0.1; var a2 = a0 + 0.2; var a3 = a0 + 0.3;
    var a4 = a0 + 0.4; var a5 = a0 + 0.5; var a6 = a0 + 0.6; var a7 = a0 + 0.7;
    for (var i = 0u; i < ITERATIONS; i++) {
        a0 = fma(a0, m, c); a1 = fma(a1, m, c); a2 = fma(a2, m, c); a3 = fma(a3, m, c);
        a4 = fma(a4, m, c); a5 = fma(a5, m, c); a6 = fma(a6, m, c); a7 = fma(a7, m, c);
    }
    sink[id] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}
