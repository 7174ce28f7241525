// coop_winograd.wgsl: a stride-1 transposed convolution on tensor cores (precision `fast`) with fewer products:
// Winograd F(M_OUT, K_W) along W, one tensor-core GEMM per transform point.
//
// Why this form. At stride 1 the transposed convolution is a correlation of the zero-padded input with the flipped
// kernel: output (i, j) = sum over kernel rows a, taps b and input channels of xp[i + a*D_H][j + b] w'[a][b] (the
// padded input, src/gpu/forward/coop_winograd.rs). Along W that is, for each run of M_OUT outputs (a tile), the
// correlation F(M_OUT, K_W): the tile's P = M_OUT + K_W - 1 input pixels transformed by BT, the kernel row's taps
// by G, their products summed over the channels and kernel rows at each of the P points, and AT maps the P sums
// back to the M_OUT outputs. A tile then costs P products per channel and kernel row instead of M_OUT * K_W (F(3,
// 3): 5 instead of 9). The transforms are linear, so the sums over channels and kernel rows stay sums: at each
// point the work is a GEMM, M = tiles, N = output channels, K = input channels x kernel rows, on tensor cores.
// The host transforms the input once per call (shaders/forward/coop_winograd_input.wgsl: the padded f16 NHWC
// copy, BT in f32, rounded to f16: V[point][tile][channel]) and the weight once per weight
// (shaders/forward/coop_winograd_weights.wgsl: U[point][kernel row][ic][oc]); each transformed tensor is scaled
// down by 2^HX or 2^HW from its copy's scale, so that no transformed value leaves f16's range (the largest row
// sums of BT and G set them), and the epilogue applies AT to the f32 sums and unscales once.
//
// Tiles are counted over the padded images (mt = (n * H_V + i) * T + t, T tiles a row, H_V = OUT_H + (K_H - 1) *
// D_H rows a sample), so that kernel row a's A operand for tiles mt.. is V at tiles mt + a*D_H*T..: a row-major
// 16 x 16 matrix (16 consecutive tiles x 16 channels) at stride VS in the point's plane of V, and B (16 channels x
// 16 output channels of one point and kernel row) a row-major matrix at stride U_ROW: both load with `coopLoadT`
// from storage, as in shaders/forward/coop_nhwc.wgsl (strides of the channels plus 8 halves, against bank
// conflicts). Tiles of rows i >= OUT_H, past a row's outputs or past the dispatch are computed (from whatever rows
// they reach: padding, the next sample's rows, the zero tail) and never stored.
//
// Non-finite values. BT mixes a tile's input pixels into every point, so an Inf or NaN in the input can make any
// output of its tiles NaN, also those the definition leaves finite: unlike the other kernels' (see
// docs/RELIABILITY.md), and one reason these tiles run only where forced by name.
//
// Tiling. A workgroup of SG_M x SG_N subgroups computes BM = SG_M * WM tiles x BN = SG_N * WN output channels;
// each subgroup a WM x WN block at every point, as P x (WM/16) x (WN/16) named f32 accumulators (generated:
// ACC_DECL, PRODUCTS: one K loop over kernel rows and channels): the point's A fragments serve all its
// output-channel fragments. Point-major tiles (`_pm`) run one K loop per point instead, into one point's
// accumulators, and add them into M_OUT x (WM/16) x (WN/16) output accumulators with AT's coefficients after each
// (fewer matrices live at once: M_OUT + 1 blocks instead of P). The epilogue (EPILOGUE,
// generated) forms each output position q of the tiles as a sum of the points' accumulators with AT's
// coefficients (cooperative-matrix sums), and moves it through the subgroup's scratch in workgroup memory
// (src/gpu/wgsl/coop.rs) so that the lanes store the pixels, unscaled, with the bias added.

override C_IN: u32;
override C_OUT: u32;
override K_H: u32;
override D_H: u32;
override T: u32;      // tiles per padded row
override H_V: u32;    // padded rows per sample
override OUT_H: u32;
override OUT_W: u32;
override HAS_BIAS: bool;
override PLANE: u32;  // halves of one point's plane of V
override VS: u32;     // halves between V's tiles (C_IN + 8)
override U_ROW: u32;  // halves between U's rows (C_OUT + 8)
override HX: i32;     // V's and U's scales below their copies' (see above)
override HW: i32;

struct Dispatch {
    m_begin: u32,        // first tile of this dispatch (its first sample * H_V * T)
    m_end: u32,          // one past its last tile
    first_sample: u32,   // the output chunk's first sample
    dispatch_width: u32, // workgroups per grid row
    n_tiles: u32,        // output-channel tiles: C_OUT / BN
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> u: Dispatch;
@group(0) @binding(1) var<storage, read> vq: array<f16>;
@group(0) @binding(2) var<storage, read> uq: array<f16>;
// bias (binding 3) and out (4), in the call's dtype, read with bias_ld(i) and written with out_st(i, v) (declared by
// the host: src/gpu/wgsl/operands.rs).

//#MODULE

// Stores position q of tile mt, output channel oc: the sum unscaled, the bias added; nothing where the tile is
// padding, past its row's outputs or past the dispatch.
fn store_out(mt: u32, q: u32, oc: u32, v: f32) {
    let n = mt / (H_V * T);
    let rest = mt % (H_V * T);
    let i = rest / T;
    let j = (rest % T) * M_OUT + q;
    if (mt < u.m_end && i < OUT_H && j < OUT_W) {
        var r = unscale(v);
        if (HAS_BIAS) {
            r += bias_ld(oc);
        }
        out_st(((n - u.first_sample) * C_OUT + oc) * (OUT_H * OUT_W) + i * OUT_W + j, r);
    }
}

@compute @workgroup_size(THREADS)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
//#PROLOGUE
    exp_out += HX + HW;
    let n_tiles = u.n_tiles;
    let wg = wid.y * u.dispatch_width + wid.x;
    let m_tile = u.m_begin + (wg / n_tiles) * BM;
    if (m_tile >= u.m_end) {
        return; // the grid's last row: the whole workgroup leaves, before any barrier
    }
    let sg = lid / 32u;
    let lane = lid % 32u;
    let m0 = m_tile + (sg % SG_M) * WM;
    let n0 = (wg % n_tiles) * BN + (sg / SG_M) * WN;
//#ACC_DECL
//#PRODUCTS
//#EPILOGUE
}
