//! The Winograd tensor-core kernel for stride-1 transposed convolutions at precision `fast`,
//! `shaders/forward/coop_winograd.wgsl` (its opening comment explains the form and the tiling): F(m, K_W) along W,
//! one GEMM on cooperative matrices per transform point, the kernel's rows in K. Its operands, prepared on the
//! GPU: the input as the padded f16 NHWC copy of the shared kit (src/gpu/nhwc_copy.rs) transformed by
//! `shaders/forward/coop_winograd_input.wgsl`, the weight transformed once per weight by
//! `shaders/forward/coop_winograd_weights.wgsl`. The transforms come from the shared Toom-Cook construction
//! (src/gpu/wgsl/winograd.rs), generated into the shaders as straight-line code.
//!
//! Which transforms: those whose f16 rounding stays within precision `fast`'s tolerance with margin in the
//! simulation of docs/PERFORMANCE.md ("Winograd on f16 products"): F(2, 3) and F(3, 3) for 3-wide kernels,
//! F(2, 2), F(3, 2), F(4, 2) for 2-wide ones, F(2, 4) for 4-wide ones ([`takes_transform`]).

use crate::error::{ConvtError, Result};
use crate::gpu::absmax;
use crate::gpu::context::GpuContext;
use crate::gpu::kernel::{check_index_range, dispatch_buffers, grid, GridParams, Operands, Weight};
use crate::gpu::memory::{GpuTensor, InFlight, PooledBuffer, STORAGE};
use crate::gpu::nhwc_copy::{self, CopyLayout};
use crate::gpu::wgsl::coop::{self, SUBGROUP};
use crate::gpu::wgsl::operands::{declare, Access, Io};
use crate::gpu::wgsl::scale::{scaled_module, scaled_prologue, MAXIMA_BINDING, SCALE_FUNCTIONS, SLOTS_01};
use crate::gpu::wgsl::winograd::{combination, lit, Transform1d};
use crate::gpu::wgsl::{self, fill_markers, with_shape_prelude};
use crate::params::ConvShape;

pub const SHADER_NAME: &str = "forward/coop_winograd.wgsl";
const SHADER: &str = include_str!("../../../shaders/forward/coop_winograd.wgsl");
pub const INPUT_SHADER_NAME: &str = "forward/coop_winograd_input.wgsl";
const INPUT_SHADER: &str = include_str!("../../../shaders/forward/coop_winograd_input.wgsl");
pub const WEIGHT_SHADER_NAME: &str = "forward/coop_winograd_weights.wgsl";
/// `shaders/forward/coop_winograd_weights.wgsl` behind the shape's constants (and the f16 it enables).
const WEIGHT_SHADER: &str = concat!("enable f16;\n", with_shape_prelude!("forward/coop_winograd_weights.wgsl"));
/// Workgroup size of the two transform shaders.
const PREP_WORKGROUP_SIZE: usize = 256;
/// Halves after each row that fragments load from (V's tiles, U's rows): against bank conflicts, as in
/// shaders/forward/coop_nhwc.wgsl.
const ROW_PAD: usize = 8;

/// A workgroup of SG_M x SG_N subgroups, each computing WM tiles of M outputs along W x WN output channels at
/// every transform point: all points in one K loop, each with its accumulators, or (`point_major`) one point after
/// another, each point's sums added into the outputs' accumulators with AT's coefficients before the next point
/// (M + 1 accumulator blocks live instead of P).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CoopWinoTile {
    pub m: u32,
    pub wm: u32,
    pub wn: u32,
    pub sg_m: u32,
    pub sg_n: u32,
    pub point_major: bool,
}

const fn tile(m: u32, wm: u32, wn: u32, sg_m: u32, sg_n: u32) -> CoopWinoTile {
    CoopWinoTile { m, wm, wn, sg_m, sg_n, point_major: false }
}

const fn point_major(t: CoopWinoTile) -> CoopWinoTile {
    CoopWinoTile { point_major: true, ..t }
}

/// Every tile of this build, each run only where forced by name (`Strategy::forced_only`: each measured slower than
/// the padded-NHWC kernel, docs/PERFORMANCE.md, and an Inf or NaN input can turn its tile's other outputs NaN): F(3, K_W) and F(2, K_W), subgroups of
/// 32 x 32 or 16 x 32, 64 or 32 output channels a workgroup, every point's accumulators live or point-major (which
/// measured 1.1-1.9x faster than every point's).
pub const TILES: &[CoopWinoTile] = &[
    tile(3, 32, 32, 2, 2),
    tile(3, 16, 32, 4, 2),
    tile(3, 32, 32, 4, 1),
    tile(2, 32, 32, 2, 2),
    tile(2, 32, 32, 4, 1),
    point_major(tile(3, 32, 32, 2, 2)),
    point_major(tile(3, 32, 32, 4, 1)),
    point_major(tile(2, 32, 32, 2, 2)),
    point_major(tile(2, 32, 32, 4, 1)),
    point_major(tile(3, 16, 32, 4, 2)),
];

/// Whether F(m, r) is one this kernel takes (the module's comment).
pub fn takes_transform(m: usize, r: usize) -> bool {
    matches!((m, r), (2, 3) | (3, 3) | (2, 2) | (3, 2) | (4, 2) | (2, 4))
}

impl CoopWinoTile {
    pub fn bm(&self) -> u32 {
        self.sg_m * self.wm
    }
    pub fn bn(&self) -> u32 {
        self.sg_n * self.wn
    }
    pub fn threads(&self) -> u32 {
        SUBGROUP * self.sg_m * self.sg_n
    }
    pub fn name(&self) -> String {
        let pm = if self.point_major { "_pm" } else { "" };
        format!("coopwino_f{}_{}x{}_{}x{}{pm}", self.m, self.bm(), self.bn(), self.wm, self.wn)
    }

    /// The epilogue's run: two fragment rows where the subgroup has an even number of them.
    fn run(&self) -> u32 {
        if (self.wm / 16).is_multiple_of(2) {
            coop::FULL_RUN
        } else {
            coop::SHORT_RUN
        }
    }

    /// Whether its sizes are whole fragments.
    pub fn is_consistent(&self) -> bool {
        self.m >= 2 && self.wm.is_multiple_of(16) && self.wn.is_multiple_of(16) && self.sg_m * self.sg_n > 0
    }

    /// Whether the adapter's limits hold its workgroup (its size and the epilogue's scratch).
    pub fn fits(&self, limits: &wgpu::Limits) -> bool {
        self.is_consistent()
            && self.threads() <= limits.max_compute_invocations_per_workgroup
            && self.threads() <= limits.max_compute_workgroup_size_x
            && coop::scratch_bytes(self.sg_m * self.sg_n, self.run()) <= limits.max_compute_workgroup_storage_size
    }

    /// The transform for `shape`'s kernel width, where this tile takes it.
    fn transform(&self, shape: &ConvShape) -> Result<Transform1d> {
        let r = shape.kernel[1];
        takes_transform(self.m as usize, r).then(|| Transform1d::new(self.m as usize, r)).flatten().ok_or_else(|| {
            let taken: Vec<String> =
                (2..=4).filter(|&r| takes_transform(self.m as usize, r)).map(|r| r.to_string()).collect();
            self.unfit(format!("a kernel {r} wide (it takes F({}, r) for r in {})", self.m, taken.join(", ")))
        })
    }

    fn unfit(&self, why: String) -> ConvtError {
        ConvtError::InvalidArgument(format!("{} does not take this shape: {why}", self.name()))
    }

    /// Whether this tile computes `shape` here: stride 1, no dilation along W, padding within the kernel's reach,
    /// one group, input channels a multiple of 16 and output channels of the tile's width, a transform it takes,
    /// whole samples per binding, the copy, the transformed input and the transformed weight each within one
    /// binding and 32-bit indices.
    pub fn check(&self, ctx: &GpuContext, shape: &ConvShape) -> Result<()> {
        self.check_sizes(shape, ctx.binding_limit())
    }

    fn check_sizes(&self, shape: &ConvShape, binding_limit: u64) -> Result<()> {
        if shape.groups != 1 {
            return Err(self.unfit(format!("{} groups (it needs one group)", shape.groups)));
        }
        if shape.stride != [1, 1] || shape.dilation[1] != 1 {
            return Err(self.unfit(format!(
                "stride {:?} and dilation {:?} (it needs stride 1 and no dilation along W)",
                shape.stride, shape.dilation
            )));
        }
        if (0..2).any(|a| shape.padding[a] > (shape.kernel[a] - 1) * shape.dilation[a]) {
            return Err(self.unfit(format!("padding {:?} beyond the kernel's reach", shape.padding)));
        }
        check_index_range(shape)?;
        if !shape.in_channels.is_multiple_of(16) || !shape.out_channels.is_multiple_of(self.bn() as usize) {
            return Err(self.unfit(format!(
                "{} input and {} output channels (it needs multiples of 16 and {})",
                shape.in_channels,
                shape.out_channels,
                self.bn()
            )));
        }
        let g = Geometry::of(shape, self, self.transform(shape)?);
        let limit = binding_limit as u128;
        let sample_bytes = |channels: usize, hw: [usize; 2]| channels as u128 * hw[0] as u128 * hw[1] as u128 * 4;
        for (what, bytes) in [
            ("one sample of the input", sample_bytes(shape.in_channels, shape.in_hw)),
            ("one sample of the output", sample_bytes(shape.out_channels, shape.out_hw)),
            ("the input's f16 copy", g.copy_bytes(shape)),
            ("the transformed input", g.v_bytes(shape)),
            ("the transformed weight", g.u_bytes(shape)),
        ] {
            // (The transformed tensors' halves are indexed in 32 bits.)
            if bytes > limit || bytes / 2 >= 1 << 31 {
                return Err(self.unfit(format!("{what} takes {bytes} bytes, more than one binding's {binding_limit}")));
            }
        }
        Ok(())
    }

    /// The kernel's shader for tensors of `io` (bias read, output written in their dtype) on `shape`'s transform.
    pub(crate) fn source(&self, io: Io, t: &Transform1d) -> String {
        let (mi, nj, p) = (self.wm / 16, self.wn / 16, t.alpha);
        // One K loop (kernel rows, then channels in steps of 16) around `math`.
        let k_loop = |math: &str| {
            format!(
                "    for (var a = 0u; a < K_H; a++) {{\n        let a_base = (m0 + a * D_H * T) * VS;\n        let b_base = a * C_IN * U_ROW + n0;\n        for (var c0 = 0u; c0 < C_IN; c0 += 16u) {{\n{math}        }}\n    }}\n"
            )
        };
        // Point pt's loads and products into the accumulators named `acc(pt, i, j)`.
        let point_math = |pt: usize, acc: &dyn Fn(usize, u32, u32) -> String| {
            let mut math = String::new();
            for i in 0..mi {
                math += &format!(
                    "            let a{pt}_{i} = coopLoadT<coop_mat16x16<f16, A>>(&vq[{pt}u * PLANE + a_base + {}u * VS + c0], VS);\n",
                    16 * i
                );
            }
            for j in 0..nj {
                math += &format!(
                    "            let b{pt}_{j} = coopLoadT<coop_mat16x16<f16, B>>(&uq[{pt}u * K_H * C_IN * U_ROW + b_base + c0 * U_ROW + {}u], U_ROW);\n",
                    16 * j
                );
            }
            for i in 0..mi {
                for j in 0..nj {
                    let c = acc(pt, i, j);
                    math += &format!("            {c} = coopMultiplyAdd(a{pt}_{i}, b{pt}_{j}, {c});\n");
                }
            }
            math
        };
        let mut decl = String::new();
        let mut products = String::new();
        if self.point_major {
            // The outputs' accumulators y<q>_<i>_<j>, and one point's: each point's K loop, then its sums added
            // into the outputs' with AT's column of the point.
            for i in 0..mi {
                for j in 0..nj {
                    decl += &format!("    var acc_{i}_{j} = coop_mat16x16<f32, C>();\n");
                    for q in 0..t.m {
                        decl += &format!("    var y{q}_{i}_{j} = coop_mat16x16<f32, C>();\n");
                    }
                }
            }
            for pt in 0..p {
                for i in 0..mi {
                    for j in 0..nj {
                        products += &format!("    acc_{i}_{j} = coop_mat16x16<f32, C>();\n");
                    }
                }
                products += &k_loop(&point_math(pt, &|_, i, j| format!("acc_{i}_{j}")));
                for q in 0..t.m {
                    let c = t.at[q * p + pt];
                    for i in 0..mi {
                        for j in 0..nj {
                            let term = matrix_combination([c].into_iter(), |_| format!("acc_{i}_{j}"));
                            if c != 0.0 {
                                products += &format!("    y{q}_{i}_{j} = y{q}_{i}_{j} + {term};\n");
                            }
                        }
                    }
                }
            }
        } else {
            let mut math = String::new();
            for pt in 0..p {
                math += &point_math(pt, &|pt, i, j| format!("pt{pt}_{i}_{j}"));
                for i in 0..mi {
                    for j in 0..nj {
                        decl += &format!("    var pt{pt}_{i}_{j} = coop_mat16x16<f32, C>();\n");
                    }
                }
            }
            products = k_loop(&math);
        }
        let header = format!(
            "enable f16;\nenable wgpu_cooperative_matrix;\nconst M_OUT: u32 = {}u;\nconst WM: u32 = {}u;\nconst WN: u32 = {}u;\nconst SG_M: u32 = {}u;\nconst SG_N: u32 = {}u;\nconst BM: u32 = SG_M * WM;\nconst BN: u32 = SG_N * WN;\nconst THREADS: u32 = {SUBGROUP}u * SG_M * SG_N;\n{}",
            self.m,
            self.wm,
            self.wn,
            self.sg_m,
            self.sg_n,
            coop::scratch(self.run())
        );
        let body = fill_markers(
            SHADER,
            &[
                ("MODULE", &scaled_module(MAXIMA_BINDING)),
                ("PROLOGUE", &scaled_prologue(SLOTS_01)),
                ("ACC_DECL", &decl),
                ("PRODUCTS", &products),
                ("EPILOGUE", &self.epilogue(t)),
            ],
        );
        let operands =
            declare(io.storage, &[io.operand("bias", 3, Access::Read), io.operand("out", 4, Access::ReadWrite)]);
        wgsl::module(&[&header, &operands, &body])
    }

    /// The epilogue: for each output position q of the tiles, each (WM/16) x (WN/16) block's sum of the points'
    /// accumulators with AT's row q (as `acc_<i>_<j>`, in a block of its own), moved through the subgroup's
    /// scratch (`coop::scratch_round`) and stored by `store_out`.
    fn epilogue(&self, t: &Transform1d) -> String {
        let (mi, nj, run) = (self.wm / 16, self.wn / 16, self.run());
        let mut e = format!(
            "    let scratch = sg * C_LD * 16u;\n    let run_pixel = lane % {run}u;\n    let run_channel = lane / {run}u;\n"
        );
        for q in 0..t.m {
            e += "    {\n";
            for i in 0..mi {
                for j in 0..nj {
                    let sum = match self.point_major {
                        true => format!("y{q}_{i}_{j}"),
                        false => matrix_combination(t.at[q * t.alpha..(q + 1) * t.alpha].iter().copied(), |pt| {
                            format!("pt{pt}_{i}_{j}")
                        }),
                    };
                    e += &format!("        let acc_{i}_{j} = {sum};\n");
                }
            }
            for r in 0..self.wm / run {
                let rows: Vec<u32> = (r * run / 16..(r + 1) * run / 16).collect();
                for j in 0..nj {
                    let store = format!(
                        "store_out(m0 + {}u + run_pixel, {q}u, n0 + {}u + c, c_tile[scratch + c * C_LD + run_pixel]);",
                        16 * rows[0],
                        16 * j
                    );
                    e += &coop::scratch_round(&rows, j, &store, "        ");
                }
            }
            e += "    }\n";
        }
        e
    }
}

/// `sum_k c[k] * terms[k]` over the nonzero coefficients for cooperative matrices, which take a scalar factor,
/// sums and differences but no negation: a first term with a negative coefficient keeps it as its factor.
fn matrix_combination(coeffs: impl Iterator<Item = f64>, term: impl Fn(usize) -> String) -> String {
    let mut s = String::new();
    for (k, c) in coeffs.enumerate().filter(|(_, c)| *c != 0.0) {
        let t = term(k);
        let part = |c: f64| if c == 1.0 { t.clone() } else { format!("{} * {t}", lit(c)) };
        s = match (s.is_empty(), c < 0.0) {
            (true, _) => part(c),
            (false, true) => format!("{s} - {}", part(-c)),
            (false, false) => format!("{s} + {}", part(c)),
        };
    }
    s
}

/// The input transform's shader: `shaders/forward/coop_winograd_input.wgsl` with the tile's constants and BT as
/// straight-line code (the tile's pixels read once, every point written).
fn input_source(m: u32, t: &Transform1d) -> String {
    let a = t.alpha;
    let mut transform = String::new();
    for e in 0..a {
        transform += &format!("    let d{e} = vec4<f32>(xp[(first + {e}u) * C4 + q]);\n");
    }
    for p in 0..a {
        let sum = combination(t.bt[p * a..(p + 1) * a].iter().copied(), |e| format!("d{e}"));
        transform += &format!("    vq[{p}u * PLANE_Q + i] = vec4<f16>(({sum}) * HEAD);\n");
    }
    let header = format!("enable f16;\nconst M_OUT: u32 = {m}u;\nconst P: u32 = {a}u;\n");
    wgsl::module(&[&header, &fill_markers(INPUT_SHADER, &[("TRANSFORM", &transform)])])
}

/// The weight transform's shader for a weight of `io`'s dtype: G as straight-line code over a kernel row's taps.
fn weight_source(io: Io, t: &Transform1d) -> String {
    let mut transform = String::new();
    for b in 0..t.r {
        transform += &format!("    let g{b} = w_ld(row - {b}u) * scale;\n");
    }
    for p in 0..t.alpha {
        let sum = combination(t.g[p * t.r..(p + 1) * t.r].iter().copied(), |b| format!("g{b}"));
        transform += &format!("    uq[{p}u * plane + at] = f16({sum});\n");
    }
    let operands = declare(io.storage, &[io.operand("w", 1, Access::Read)]);
    wgsl::module(&[&operands, &fill_markers(WEIGHT_SHADER, &[("TRANSFORM", &transform)]), SCALE_FUNCTIONS])
}

/// The power of two by which a transform's rows can grow a tensor's largest magnitude: 2^h at least the largest
/// sum of a row's absolute coefficients (a transformed tensor scaled down by 2^h stays within its copy's range).
fn headroom(matrix: &[f64], cols: usize) -> i32 {
    let largest = matrix.chunks(cols).map(|row| row.iter().map(|v| v.abs()).sum::<f64>()).fold(1.0, f64::max);
    largest.log2().ceil() as i32
}

/// The layout of the operands for a shape: the margins of the padded input before it (the flipped kernel's reach
/// less the padding), H_V padded rows a sample (every row an output's kernel rows read), T tiles of M outputs a
/// row and the copy's WIDTH pixels a row (every pixel a row's last tile reads), and the zero tiles after the last
/// sample that its last workgroups' kernel rows read.
#[derive(Debug, Clone)]
struct Geometry {
    before: [usize; 2],
    rows: usize,
    tiles: usize,
    width: usize,
    tail_tiles: usize,
    t: Transform1d,
}

impl Geometry {
    fn of(shape: &ConvShape, tile: &CoopWinoTile, t: Transform1d) -> Geometry {
        let before = [0, 1].map(|a| (shape.kernel[a] - 1) * shape.dilation[a] - shape.padding[a]);
        let rows = shape.out_hw[0] + (shape.kernel[0] - 1) * shape.dilation[0];
        let tiles = shape.out_hw[1].div_ceil(t.m);
        let width = tiles * t.m + t.r - 1;
        let tail_tiles = (shape.kernel[0] - 1) * shape.dilation[0] * tiles + tile.bm() as usize;
        Geometry { before, rows, tiles, width, tail_tiles, t }
    }

    /// The input's f16 copy (src/gpu/nhwc_copy.rs): pixels C_IN halves apart (the transform reads whole quads).
    fn copy_layout(&self, shape: &ConvShape) -> CopyLayout {
        CopyLayout {
            channels: shape.in_channels,
            hw: shape.in_hw,
            before: self.before,
            padded: [self.rows, self.width],
            copied: [0..shape.in_hw[0], 0..shape.in_hw[1]],
            pixel_stride: shape.in_channels,
            tail_rows: 0,
        }
    }
    fn copy_bytes(&self, shape: &ConvShape) -> u128 {
        self.copy_layout(shape).pixels(shape.batch) * shape.in_channels as u128 * 2
    }
    fn real_tiles(&self, shape: &ConvShape) -> usize {
        shape.batch * self.rows * self.tiles
    }
    fn all_tiles(&self, shape: &ConvShape) -> u128 {
        (shape.batch as u128 * self.rows as u128 * self.tiles as u128) + self.tail_tiles as u128
    }
    fn vs(shape: &ConvShape) -> usize {
        shape.in_channels + ROW_PAD
    }
    /// Halves of one point's plane of V.
    fn plane(&self, shape: &ConvShape) -> u128 {
        self.all_tiles(shape) * Self::vs(shape) as u128
    }
    fn v_bytes(&self, shape: &ConvShape) -> u128 {
        self.plane(shape) * self.t.alpha as u128 * 2
    }
    fn u_row(shape: &ConvShape) -> usize {
        shape.out_channels + ROW_PAD
    }
    fn u_bytes(&self, shape: &ConvShape) -> u128 {
        (self.t.alpha * shape.kernel[0] * shape.in_channels * Self::u_row(shape)) as u128 * 2
    }
}

/// Bytes of the transformed weight for `tile` on `shape` (saturating: a budget asks for more, never less), or
/// `None` for a shape the tile does not take.
pub(crate) fn transformed_weight_bytes(tile: &CoopWinoTile, shape: &ConvShape) -> Option<u64> {
    let t = tile.transform(shape).ok()?;
    Some(Geometry::of(shape, tile, t).u_bytes(shape).min(u64::MAX as u128) as u64)
}

/// The kernel's uniform block `Dispatch`, field for field.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Dispatch {
    m_begin: u32,
    m_end: u32,
    first_sample: u32,
    dispatch_width: u32,
    n_tiles: u32,
    _pad: [u32; 3],
}

/// The GEMM's override constants for a shape.
fn constants(shape: &ConvShape, g: &Geometry, has_bias: bool) -> Vec<(&'static str, f64)> {
    let values: [(&str, f64); 14] = [
        ("C_IN", shape.in_channels as f64),
        ("C_OUT", shape.out_channels as f64),
        ("K_H", shape.kernel[0] as f64),
        ("D_H", shape.dilation[0] as f64),
        ("T", g.tiles as f64),
        ("H_V", g.rows as f64),
        ("OUT_H", shape.out_hw[0] as f64),
        ("OUT_W", shape.out_hw[1] as f64),
        ("HAS_BIAS", has_bias as u8 as f64),
        ("PLANE", g.plane(shape) as f64),
        ("VS", Geometry::vs(shape) as f64),
        ("U_ROW", Geometry::u_row(shape) as f64),
        ("HX", headroom(&g.t.bt, g.t.alpha) as f64),
        ("HW", headroom(&g.t.g, g.t.r) as f64),
    ];
    values.to_vec()
}

/// The kernel's shader and override constants for `shape` (for inspection: `Strategy::shader`).
pub(crate) fn shader(
    tile: &CoopWinoTile,
    shape: &ConvShape,
    has_bias: bool,
) -> Result<(String, Vec<(&'static str, f64)>)> {
    let t = tile.transform(shape)?;
    let g = Geometry::of(shape, tile, t.clone());
    Ok((tile.source(Io::F32, &t), constants(shape, &g, has_bias)))
}

/// Encodes the weight's transform for `tile` on `shape` into a new buffer: U at the scale slot 1 of `maxima` sets.
fn encode_weight(
    ctx: &GpuContext,
    shape: &ConvShape,
    g: &Geometry,
    weight: &GpuTensor,
    maxima: &wgpu::Buffer,
    pass: &mut wgpu::ComputePass<'_>,
) -> Result<PooledBuffer> {
    ctx.scoped(|| {
        let upk = ctx.pool.get(&ctx.device, g.u_bytes(shape).next_multiple_of(4) as u64, STORAGE);
        let io = Io::of(ctx, weight.dtype());
        let t = &g.t;
        let name = format!("{WEIGHT_SHADER_NAME} {} F({}, {})", io.key(), t.m, t.r);
        let module = ctx.module_with(&name, || weight_source(io, t))?;
        let consts = [
            ("C_IN", shape.in_channels as f64),
            ("C_OUT", shape.out_channels as f64),
            ("K_H", shape.kernel[0] as f64),
            ("K_W", shape.kernel[1] as f64),
            ("U_ROW", Geometry::u_row(shape) as f64),
            ("HW", headroom(&t.g, t.r) as f64),
        ];
        let pipeline =
            ctx.pipeline(format!("{name} {:?} {consts:?}", ctx.options().shader_checks), &module, &consts)?;
        let values = shape.kernel[0] * shape.in_channels * shape.out_channels;
        let wgrid = grid(ctx, values.div_ceil(PREP_WORKGROUP_SIZE));
        let w = weight.single_buffer("weight", ctx)?;
        dispatch_buffers(ctx, pass, &pipeline, bytemuck::bytes_of(&GridParams::of(wgrid)), &[w, &upk, maxima], wgrid);
        Ok(upk)
    })
}

/// Encodes the preparation of the weight for `tile` on `shape` into `pass` ([`crate::gpu::plan`]): the transformed
/// f16 weight, and the maxima buffer whose slot 1 holds its largest magnitude.
pub(crate) fn prepare_weight(
    ctx: &GpuContext,
    shape: &ConvShape,
    tile: &CoopWinoTile,
    weight: &GpuTensor,
    pass: &mut wgpu::ComputePass<'_>,
) -> Result<(PooledBuffer, Option<wgpu::Buffer>)> {
    tile.check(ctx, shape)?;
    let g = Geometry::of(shape, tile, tile.transform(shape)?);
    let maxima = absmax::encode_slots(ctx, &[(1, weight)], &[], pass)?;
    Ok((encode_weight(ctx, shape, &g, weight, &maxima, pass)?, Some(maxima)))
}

/// The kernel's operands, prepared on the GPU: the maxima (slot 0 the input's largest magnitude, slot 1 the
/// weight's), the transformed input V and the transformed weight U.
struct Prepared {
    maxima: wgpu::Buffer,
    v: wgpu::Buffer,
    u: wgpu::Buffer,
}

/// Encodes the input's copy and transform and, where `weight` has no prepared one, the weight's transform into
/// `pass`; the scratch buffers go into `in_flight`.
#[allow(clippy::too_many_arguments)]
fn encode_operands(
    ctx: &GpuContext,
    shape: &ConvShape,
    g: &Geometry,
    tile: &CoopWinoTile,
    input: &GpuTensor,
    weight: Weight<'_>,
    pass: &mut wgpu::ComputePass<'_>,
    in_flight: &mut InFlight,
) -> Result<Prepared> {
    let t = &g.t;
    // Slot 0: the input's largest magnitude (its copy's scale); slot 1: the weight's (found when it was prepared,
    // or here).
    let maxima = match weight.prepared {
        Some(p) => absmax::encode_slots(ctx, &[(0, input)], &[(1, p.maxima(&tile.name())?)], pass)?,
        None => absmax::encode_slots(ctx, &[(0, input), (1, weight.tensor)], &[], pass)?,
    };
    let layout = g.copy_layout(shape);
    let xp =
        nhwc_copy::encode_at_maximum(ctx, input, &layout, g.copy_bytes(shape) as u64, &maxima, 0, pass, in_flight)?;
    let v = ctx.scoped(|| {
        // The input's transform: every tile of every point's plane.
        let vq = in_flight.keep(ctx.pool.get(&ctx.device, g.v_bytes(shape) as u64, STORAGE));
        let name = format!("{INPUT_SHADER_NAME} F({}, {})", t.m, t.r);
        let module = ctx.module_with(&name, || input_source(tile.m, t))?;
        let vq_quads = Geometry::vs(shape) / 4;
        let consts = [
            ("C4", (shape.in_channels / 4) as f64),
            ("VQ", vq_quads as f64),
            ("WIDTH", g.width as f64),
            ("T", g.tiles as f64),
            ("REAL_TILES", g.real_tiles(shape) as f64),
            ("ALL_TILES", g.all_tiles(shape) as f64),
            ("PLANE_Q", (g.plane(shape) / 4) as f64),
            ("HEAD", (-headroom(&t.bt, t.alpha) as f64).exp2()),
        ];
        let key = format!("{name} {:?} {consts:?}", ctx.options().shader_checks);
        let pipeline = ctx.pipeline(key, &module, &consts)?;
        let quads = g.all_tiles(shape) as usize * vq_quads;
        let vgrid = grid(ctx, quads.div_ceil(PREP_WORKGROUP_SIZE));
        dispatch_buffers(ctx, pass, &pipeline, bytemuck::bytes_of(&GridParams::of(vgrid)), &[&xp, &vq], vgrid);
        Ok(vq)
    })?;
    let u = match weight.prepared {
        Some(p) => (*p.buffer).clone(),
        None => in_flight.keep(encode_weight(ctx, shape, g, weight.tensor, &maxima, pass)?),
    };
    Ok(Prepared { maxima, v, u })
}

/// Encodes the operands' preparation ([`encode_operands`]) and the kernel over every output chunk into `pass`;
/// the scratch buffers go into `in_flight`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode(
    ctx: &GpuContext,
    shape: &ConvShape,
    tile: &CoopWinoTile,
    input: &GpuTensor,
    weight: Weight<'_>,
    bias: Option<&GpuTensor>,
    output: &GpuTensor,
    pass: &mut wgpu::ComputePass<'_>,
    in_flight: &mut InFlight,
) -> Result<()> {
    if !tile.fits(&ctx.device.limits()) || !ctx.has_coop_f16() {
        return Err(ConvtError::InvalidArgument(format!("kernel {} does not run on this adapter", tile.name())));
    }
    tile.check(ctx, shape)?;
    if shape.batch == 0 || shape.out_hw[0] * shape.out_hw[1] == 0 {
        return Ok(());
    }
    let g = Geometry::of(shape, tile, tile.transform(shape)?);
    let t = &g.t;
    let Prepared { maxima, v: vq, u: upk } = encode_operands(ctx, shape, &g, tile, input, weight, pass, in_flight)?;
    ctx.scoped(|| {
        let io = Io::new(ctx, input.dtype(), output.dtype());
        let name = format!("{} {} F({}, {})", tile.name(), io.key(), t.m, t.r);
        let module = ctx.module_with(&name, || tile.source(io, t))?;
        let consts = constants(shape, &g, bias.is_some());
        let key = format!("{name} {:?} {consts:?}", ctx.options().shader_checks);
        let pipeline = ctx.pipeline(key, &module, &consts)?;
        let ops = Operands::new(ctx, &upk, bias)?;
        let cout = shape.out_channels;
        let n_tiles = cout / tile.bn() as usize;
        let sample_tiles = g.rows * g.tiles;
        for c in output.chunks() {
            let (first, samples) = (c.first_plane / cout, c.planes / cout);
            let (begin, end) = (first * sample_tiles, (first + samples) * sample_tiles);
            let m_tiles = (end - begin).div_ceil(tile.bm() as usize);
            let mgrid = grid(ctx, m_tiles * n_tiles);
            let u = Dispatch {
                m_begin: begin as u32,
                m_end: end as u32,
                first_sample: first as u32,
                dispatch_width: mgrid.0,
                n_tiles: n_tiles as u32,
                _pad: [0; 3],
            };
            let mut buffers = ops.buffers(&vq, &c);
            buffers.push(&maxima);
            dispatch_buffers(ctx, pass, &pipeline, bytemuck::bytes_of(&u), &buffers, mgrid);
        }
        Ok(())
    })
}

/// This kernel's shaders for validation (`gpu::shader_sources`): every tile on every transform it takes, in every
/// dtype, and both transforms' shaders.
pub(crate) fn shader_variants() -> Vec<crate::gpu::ShaderVariant> {
    let mut v: Vec<crate::gpu::ShaderVariant> = Vec::new();
    let transforms: Vec<Transform1d> = (2..=4)
        .flat_map(|m| (2..=4).map(move |r| (m, r)))
        .filter(|&(m, r)| takes_transform(m, r))
        .filter_map(|(m, r)| Transform1d::new(m, r))
        .collect();
    for t in &transforms {
        let f = format!("F({}, {})", t.m, t.r);
        for io in Io::variants() {
            for tile in TILES.iter().filter(|tile| tile.m as usize == t.m) {
                v.push((SHADER_NAME, format!("{} {} {f}", tile.name(), io.key()), tile.source(io, t)));
            }
            v.push((WEIGHT_SHADER_NAME, format!("{WEIGHT_SHADER_NAME} {} {f}", io.key()), weight_source(io, t)));
        }
        v.push((INPUT_SHADER_NAME, format!("{INPUT_SHADER_NAME} {f}"), input_source(t.m as u32, t)));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::gpu::memory::read_back;
    use crate::ConvTranspose2dOptions;
    use rand::{Rng, SeedableRng};

    /// The transformed operands as the copy and the transform shaders lay them out, unscaled, in f64: V[p][tile][c]
    /// (zeros past the real tiles; the pad halves left out) and U[p][a][ic][oc] (rows of C_OUT), each with the sum
    /// of its terms' magnitudes (what rounding the terms can cost it). The copy of the input is checked against its
    /// byte count and the transformed values against their headroom.
    #[allow(clippy::type_complexity)]
    fn transformed(g: &Geometry, shape: &ConvShape, x: &[f64], w: &[f64]) -> ([Vec<f64>; 2], [Vec<f64>; 2]) {
        let t = &g.t;
        let (cin, cout, [kh_n, kw_n]) = (shape.in_channels, shape.out_channels, shape.kernel);
        let (width, tiles, a) = (g.width, g.tiles, t.alpha);
        // The copy: [n][row][col][c], zeros around the input.
        let xp = nhwc_copy::emulate(&g.copy_layout(shape), shape.batch, x);
        assert_eq!(xp.len() as u128 * 2, g.copy_bytes(shape));
        let largest = |v: &[f64]| v.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        let all = g.all_tiles(shape) as usize;
        let (mut v, mut v_terms) = (vec![0.0; a * all * cin], vec![0.0; a * all * cin]);
        for tl in 0..g.real_tiles(shape) {
            let first = (tl / tiles) * width + (tl % tiles) * t.m;
            for c in 0..cin {
                for p in 0..a {
                    let term = |e: usize| t.bt[p * a + e] * xp[(first + e) * cin + c];
                    v[(p * all + tl) * cin + c] = (0..a).map(term).sum();
                    v_terms[(p * all + tl) * cin + c] = (0..a).map(|e| term(e).abs()).sum();
                }
            }
        }
        assert!(largest(&v) <= largest(x) * f64::from(headroom(&t.bt, a)).exp2() * (1.0 + 1e-12));
        let (mut u, mut u_terms) = (vec![0.0; a * kh_n * cin * cout], vec![0.0; a * kh_n * cin * cout]);
        for p in 0..a {
            for row in 0..kh_n {
                for ic in 0..cin {
                    for oc in 0..cout {
                        let term = |b: usize| {
                            let (kh, kw) = (kh_n - 1 - row, kw_n - 1 - b);
                            t.g[p * t.r + b] * w[((ic * cout + oc) * kh_n + kh) * kw_n + kw]
                        };
                        u[((p * kh_n + row) * cin + ic) * cout + oc] = (0..t.r).map(term).sum();
                        u_terms[((p * kh_n + row) * cin + ic) * cout + oc] = (0..t.r).map(|b| term(b).abs()).sum();
                    }
                }
            }
        }
        assert!(largest(&u) <= largest(w) * f64::from(headroom(&t.g, t.r)).exp2() * (1.0 + 1e-12));
        ([v, v_terms], [u, u_terms])
    }

    /// What the copy, the two transforms and the kernel compute, in f64, index for index: the operands as
    /// [`transformed`] lays them out, each tile's products at every point over the kernel rows and channels (every
    /// read of V checked against its planes' tiles), AT applied and `store_out`'s index and bounds. Each output
    /// element must be stored exactly once. Unscaled (the powers of two cancel).
    fn emulate(tile: &CoopWinoTile, shape: &ConvShape, x: &[f64], w: &[f64], bias: &[f64]) -> Vec<f64> {
        let g = Geometry::of(shape, tile, tile.transform(shape).unwrap());
        let t = &g.t;
        let (cin, cout, kh_n) = (shape.in_channels, shape.out_channels, shape.kernel[0]);
        let ([v, _], [u, _]) = transformed(&g, shape, x, w);
        let (rows, tiles, a) = (g.rows, g.tiles, t.alpha);
        let (all, real) = (g.all_tiles(shape) as usize, g.real_tiles(shape));
        // The kernel: one dispatch over every sample, blocks of BM tiles; every tile of a block computed.
        let [oh_n, ow_n] = shape.out_hw;
        let mut out = vec![f64::NAN; shape.batch * cout * oh_n * ow_n];
        let bm = tile.bm() as usize;
        for mt in 0..real.div_ceil(bm) * bm {
            for oc in 0..cout {
                let mut acc = vec![0.0; a];
                for (p, sum) in acc.iter_mut().enumerate() {
                    for row in 0..kh_n {
                        let at = mt + row * shape.dilation[0] * tiles;
                        assert!(at < all, "tile {mt}, kernel row {row}: reads tile {at} of {all}");
                        for ic in 0..cin {
                            *sum += v[(p * all + at) * cin + ic] * u[((p * kh_n + row) * cin + ic) * cout + oc];
                        }
                    }
                }
                for q in 0..t.m {
                    let y: f64 = (0..a).map(|p| t.at[q * a + p] * acc[p]).sum();
                    // store_out
                    let (n, rest) = (mt / (rows * tiles), mt % (rows * tiles));
                    let (i, j) = (rest / tiles, (rest % tiles) * t.m + q);
                    if mt < real && i < oh_n && j < ow_n {
                        let o = ((n * cout + oc) * oh_n + i) * ow_n + j;
                        assert!(out[o].is_nan(), "output {o} stored twice");
                        out[o] = y + bias[oc];
                    }
                }
            }
        }
        assert!(out.iter().all(|o| !o.is_nan()), "an output never stored");
        out
    }

    /// The scale exponent shaders/common/scale.wgsl finds for a largest magnitude's f32 bits (capped at 127 as the
    /// kernels cap it).
    fn scale_exponent(bits: u32) -> i32 {
        let e = (bits >> 23) as i32;
        let k = match (bits, e) {
            (0, _) => 0,
            (_, 0) => 132 + bits.leading_zeros() as i32,
            _ => 141 - e,
        };
        k.min(127)
    }

    #[test]
    fn the_transform_shaders_lay_out_the_operands() {
        // The copy and the two transform shaders run wherever the adapter has f16 (Mesa's software driver too),
        // unlike the kernel, which needs tensor cores. V and U read back against `transformed` (which the
        // emulation checks against the float64 reference), unscaled by the powers of two the maxima and the
        // headroom set: within the f16 rounding of the copy and of the transformed value, over the terms'
        // magnitudes; the pad and tail tiles zero. The pool hands the shaders buffers filled with NaN first, so a
        // value not written shows.
        let ctx = GpuContext::new().expect("the GPU tests need an adapter");
        if !ctx.has_f16() {
            eprintln!("{}: no SHADER_F16, so the transform shaders cannot run here", ctx.adapter_info().name);
            return;
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(46);
        // in_hw, kernel, padding, dilation (stride 1); the tile (its transform and its block of tiles); the input's
        // magnitude and dtype.
        type Case = ([[usize; 2]; 4], usize, f32, DType);
        let cases: &[Case] = &[
            ([[5, 7], [3, 3], [1, 1], [1, 1]], 0, 1e3, DType::F32),
            ([[4, 11], [3, 3], [0, 2], [2, 1]], 3, 0.5, DType::F16),
            ([[3, 9], [2, 2], [1, 0], [1, 1]], 1, 2e-5, DType::BF16),
            ([[4, 10], [1, 4], [0, 3], [1, 1]], 4, 7.0, DType::F32),
        ];
        for &([in_hw, kernel, padding, dilation], tile, magnitude, dtype) in cases {
            let tile = &TILES[tile];
            let hw2 = |v: [usize; 2]| [v[0] as i64, v[1] as i64];
            let params = ConvTranspose2dOptions::default().padding(hw2(padding)).dilation(hw2(dilation));
            let (batch, cin, cout) = (2, 32, 64);
            let shape =
                params.resolve(&[batch, cin, in_hw[0], in_hw[1]], &[cin, cout, kernel[0], kernel[1]], None).unwrap();
            let g = Geometry::of(&shape, tile, tile.transform(&shape).unwrap());
            let mut draw = |n: usize, m: f32| (0..n).map(|_| m * rng.random_range(-1.0f32..1.0)).collect::<Vec<_>>();
            let (mut x, w) =
                (draw(batch * cin * in_hw[0] * in_hw[1], magnitude), draw(cin * cout * kernel[0] * kernel[1], 0.1));
            x.iter_mut().for_each(|v| *v = dtype.round(*v));
            let upload = |dims: Vec<usize>, data: &[f32], dtype: DType| {
                GpuTensor::upload(&ctx, &crate::Tensor::new(dims, data.to_vec()).unwrap().to_dtype(dtype)).unwrap()
            };
            let (xg, wg) = (upload(shape.input_dims(), &x, dtype), upload(shape.weight_dims(), &w, DType::F32));
            for size in [g.v_bytes(&shape) as u64, g.u_bytes(&shape).next_multiple_of(4) as u64] {
                let b = ctx.pool.get(&ctx.device, size, STORAGE);
                ctx.queue.write_buffer(&b, 0, &vec![0xff; size as usize]); // 0xffff is an f16 NaN
            }
            let mut encoder = ctx.device.create_command_encoder(&Default::default());
            let mut in_flight = InFlight::default();
            let prepared = {
                let mut pass = encoder.begin_compute_pass(&Default::default());
                let weight = Weight { tensor: &wg, prepared: None };
                encode_operands(&ctx, &shape, &g, tile, &xg, weight, &mut pass, &mut in_flight).unwrap()
            };
            in_flight.submit(&ctx, encoder).unwrap();
            let read = |b: &wgpu::Buffer| read_back(&ctx, (b, 0, b.size()), <[u8]>::to_vec).unwrap();
            let halves = |bytes: Vec<u8>| -> Vec<f64> {
                bytes.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f64()).collect()
            };
            let maxima: Vec<u32> = bytemuck::cast_slice(&read(&prepared.maxima)).to_vec();
            let (got_v, got_u) = (halves(read(&prepared.v)), halves(read(&prepared.u)));
            let f64s = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
            let ([want_v, v_terms], [want_u, u_terms]) = transformed(&g, &shape, &f64s(&x), &f64s(&w));
            let t = &g.t;
            let what = format!("{} {dtype} {shape:?}", tile.name());
            // The scales: the copy's exponent (none for an f16 input), less the headroom.
            let kx = if dtype == DType::F16 { 0 } else { scale_exponent(maxima[0]) } - headroom(&t.bt, t.alpha);
            let kw = scale_exponent(maxima[1]) - headroom(&t.g, t.r);
            let (cin_v, all) = (cin + ROW_PAD, g.all_tiles(&shape) as usize);
            // Rounding: the copy's (2^-11 of each term) and the transformed value's (2^-11 of it), and f16's
            // subnormal spacing.
            let bound = |terms: f64, value: f64, k: i32| {
                terms * 2f64.powi(-11) * 1.01 + value.abs() * 2f64.powi(-11) + 2f64.powi(-24 - k)
            };
            for p in 0..t.alpha {
                for tl in 0..all {
                    for c in 0..cin_v {
                        let got = got_v[(p * all + tl) * cin_v + c] * 2f64.powi(-kx);
                        let (want, terms) = match c < cin {
                            true => (want_v[(p * all + tl) * cin + c], v_terms[(p * all + tl) * cin + c]),
                            false => (0.0, 0.0),
                        };
                        assert!(
                            (got - want).abs() <= bound(terms, want, kx),
                            "{what}: V[{p}][{tl}][{c}] {got} against {want}"
                        );
                    }
                }
            }
            let u_row = cout + ROW_PAD;
            for (i, (&want, &terms)) in want_u.iter().zip(&u_terms).enumerate() {
                let (oc, rest) = (i % cout, i / cout);
                let got = got_u[rest * u_row + oc] * 2f64.powi(-kw);
                // The weight is f32: rounded once, to f16, after its transform.
                assert!(
                    (got - want).abs() <= bound(0.0, want, kw) + terms * 2f64.powi(-24),
                    "{what}: U[{i}] {got} against {want}"
                );
            }
        }
    }

    #[test]
    fn the_emulated_kernel_computes_the_transposed_convolution() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(45);
        // in_hw, kernel, padding, dilation (stride 1): padding none, partial and full, dilation along H, rows that
        // are not whole tiles, kernels 2, 3 and 4 wide, one row and several.
        let cases: &[[[usize; 2]; 4]] = &[
            [[5, 7], [3, 3], [0, 0], [1, 1]],
            [[4, 10], [3, 3], [1, 1], [1, 1]],
            [[6, 8], [3, 3], [4, 2], [2, 1]],
            [[3, 9], [2, 2], [1, 1], [1, 1]],
            [[4, 11], [1, 4], [0, 3], [1, 1]],
            [[2, 13], [3, 2], [0, 0], [3, 1]],
        ];
        let mut checked = 0;
        for &[in_hw, kernel, padding, dilation] in cases {
            let hw2 = |v: [usize; 2]| [v[0] as i64, v[1] as i64];
            let params = ConvTranspose2dOptions::default().padding(hw2(padding)).dilation(hw2(dilation));
            let (batch, cin, cout) = (2, 16, 64);
            let shape = params
                .resolve(&[batch, cin, in_hw[0], in_hw[1]], &[cin, cout, kernel[0], kernel[1]], Some(&[cout]))
                .unwrap();
            let mut draw = |n: usize| (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect::<Vec<_>>();
            let (x, w, b) =
                (draw(batch * cin * in_hw[0] * in_hw[1]), draw(cin * cout * kernel[0] * kernel[1]), draw(cout));
            let want = crate::cpu::conv_transpose2d_f64(&shape, &x, &w, Some(&b)).unwrap();
            let f64s = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
            for tile in TILES.iter().filter(|t| t.check_sizes(&shape, 1 << 30).is_ok()) {
                let got = emulate(tile, &shape, &f64s(&x), &f64s(&w), &f64s(&b));
                for (i, (g, r)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (g - r).abs() <= 1e-9 * (1.0 + r.abs()),
                        "{}, {shape:?}: output {i}: {g} against {r}",
                        tile.name()
                    );
                }
                checked += 1;
            }
        }
        assert!(checked >= 4 * cases.len(), "{checked} tile and case pairs");
    }

    #[test]
    fn shapes_it_cannot_take_are_refused_with_the_reason() {
        let tile = &TILES[0];
        let refused = |params: ConvTranspose2dOptions, weight: [usize; 4], what: &str| {
            let shape = params.resolve(&[1, weight[0], 6, 6], &weight, None).unwrap();
            let e = tile.check_sizes(&shape, 1 << 30).expect_err(what).to_string();
            assert!(e.contains(what), "{e}");
        };
        let p = ConvTranspose2dOptions::default();
        refused(p.stride(2), [16, 64, 3, 3], "stride");
        refused(p.dilation([1, 2]), [16, 64, 3, 3], "dilation");
        refused(p.padding(3), [16, 64, 3, 3], "padding");
        refused(p, [16, 64, 3, 5], "kernel 5 wide");
        refused(p, [24, 64, 3, 3], "24 input");
        refused(p, [16, 32, 3, 3], "32 output");
        refused(p.groups(2), [32, 64, 3, 3], "groups");
        let shape = p.resolve(&[64, 64, 128, 128], &[64, 64, 3, 3], None).unwrap();
        let e = tile.check_sizes(&shape, 1 << 20).expect_err("a small binding").to_string();
        assert!(e.contains("more than one binding"), "{e}");
    }

    #[test]
    fn the_transforms_taken_have_headroom_and_every_tile_a_transform() {
        for tile in TILES {
            assert!(tile.is_consistent() && (2..=4).any(|r| takes_transform(tile.m as usize, r)), "{tile:?}");
        }
        // F(3, 3): BT's rows sum to at most 6 in magnitude (room of 2^3), G's to at most 1.5 (2^1).
        let t = Transform1d::new(3, 3).unwrap();
        assert_eq!((headroom(&t.bt, t.alpha), headroom(&t.g, t.r)), (3, 1), "{t:?}");
        assert_eq!(
            matrix_combination([0.0, -1.0, 2.0, 1.0].into_iter(), |k| format!("m{k}")),
            "-1.0 * m1 + 2.0 * m2 + m3"
        );
    }
}
