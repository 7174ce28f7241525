// winograd_weights.wgsl: the filter transform run before the Winograd kernel (shaders/forward/winograd.wgsl).
//
// U[point][ic][oc] (rows of COG4 values, the last ones zero) = sum over (j, k) of GH[ph][j] * GW[pw][k] *
// w[ic][oc][K_H-1-j][K_W-1-k], point = ph*AW + pw: the kernel flipped (at stride 1 a transposed convolution is a
// correlation with the flipped kernel) and transformed along both axes. One invocation per value of U; consecutive
// invocations write consecutive output channels. The host puts AH, AW and the filter transforms GH (AH x K_H) and
// GW (AW x K_W) in front of this file (src/gpu/forward/winograd.rs), and behind them the shape's override constants
// (shaders/common/shape.wgsl).

override COG: u32;
override COG4: u32; // COG rounded up to a multiple of 4: U's row length (the padding is zero)
override WORKGROUP_SIZE: u32;

// w (binding 0), the weight in its dtype, is read with w_ld(i) (declared by the host: src/gpu/wgsl/operands.rs).
@group(0) @binding(1) var<storage, read_write> wu: array<f32>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.y * nwg.x * WORKGROUP_SIZE + gid.x;
    if (i >= AH * AW * C_IN * COG4) {
        return;
    }
    let oc = i % COG4;
    let ic = (i / COG4) % C_IN;
    let p = i / (COG4 * C_IN);
    if (oc >= COG) {
        wu[i] = 0.0;
        return;
    }
    let ph = p / AW;
    let pw = p % AW;
    // Function-local copies: indexed at run time.
    var gh = GH;
    var gw = GW;
    var sum = 0.0;
    for (var j = 0u; j < K_H; j++) {
        for (var k = 0u; k < K_W; k++) {
            let tap = ((ic * COG + oc) * K_H + K_H - 1u - j) * K_W + K_W - 1u - k;
            sum += gh[ph * K_H + j] * gw[pw * K_W + k] * w_ld(tap);
        }
    }
    wu[i] = sum;
}
