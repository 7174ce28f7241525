//! The fused Winograd kernel for stride-1, undilated transposed convolutions, `shaders/forward/winograd.wgsl` (its
//! opening comment explains the tiling). The transforms F(m, r) per axis are built here (Toom-Cook on the
//! points 0, 1, -1, 2, -2, 1/2, -1/2, 3/4, -3/4 and infinity) and generated into the shader as straight-line code with
//! their coefficients as literals; the weight transform runs first (`shaders/forward/winograd_weights.wgsl`).
//!
//! Why: at stride 1 every output pixel takes every tap, and F(m, r) computes m outputs of an r-tap correlation
//! with m + r - 1 multiplications instead of m * r. F(2x4, 3x5) does 32 where the GEMM does 120 per 8 outputs
//! and input channel: 3.75x fewer. The tiles the heuristic takes transform along W only and put the kernel's rows
//! into K ([`WinoTile::rows_in_k`]; F(4, 5) on a 3x5 kernel: 2.5x fewer): fewer points held in registers leave
//! room for larger tiles, which measured faster (docs/PERFORMANCE.md). The transforms add rounding error (the
//! larger the tile, the more: the tests hold every tile to the f32 tolerance, 1e-5 relative L2, on random data).

use crate::error::{ConvtError, Result};
use crate::gpu::context::GpuContext;
use crate::gpu::kernel::{check_index_range, dispatch_buffers, dispatch_weight_prep, grid, Operands, Weight};
use crate::gpu::memory::{GpuTensor, InFlight, PooledBuffer, STORAGE};
use crate::gpu::slices::{plan, SliceFields};
use crate::gpu::wgsl::operands::{declare, Access, Io};
use crate::gpu::wgsl::register::register_tile;
use crate::gpu::wgsl::winograd::{combination, lit, Transform1d, MAX_ALPHA};
use crate::gpu::wgsl::{self, fill_markers, shape_constants, with_shape_prelude};
use crate::params::ConvShape;

pub const SHADER_NAME: &str = "forward/winograd.wgsl";
/// `shaders/forward/winograd.wgsl` behind the shape's constants: the template of every tile.
pub const SHADER: &str = with_shape_prelude!("forward/winograd.wgsl");
pub const WEIGHTS_SHADER_NAME: &str = "forward/winograd_weights.wgsl";
/// `shaders/forward/winograd_weights.wgsl` behind the shape's constants.
pub const WEIGHTS_SHADER: &str = with_shape_prelude!("forward/winograd_weights.wgsl");
const WEIGHTS_WORKGROUP_SIZE: u32 = 256;

/// A workgroup of the Winograd kernel: output tiles of MH x MW pixels, TB tiles x CB output channels per
/// workgroup, TM tiles x TN channels per invocation and transform point, K steps of BK (input channels; with
/// the rows in K, (input channel, kernel row) pairs).
///
/// Named `wino_<MH>x<MW>_<TB>x<CB>x<BK>_<TM>x<TN>`, or `wino_w<MW>_...` with the rows in K.
///
/// With `rows_in_k`, only the W axis is transformed (MH = 1): the kernel's rows join the input channels in K
/// (K = Cin x K_H, kernel row r reading the input r rows further down), so the accumulators hold AW points
/// instead of K_H x AW, and a workgroup covers K_H times more tiles for the same registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WinoTile {
    pub mh: u32,
    pub mw: u32,
    pub tb: u32,
    pub cb: u32,
    pub tm: u32,
    pub tn: u32,
    pub bk: u32,
    pub rows_in_k: bool,
    /// Tile rows per band (1: none). In bands (with the rows in K only) a block is `band` tile rows x tb / band
    /// columns, whose rows share their transformed input rows, and a K step is `bk` input channels with all
    /// their kernel rows (bk x K_H K indices); see the shader's `tile_pos`.
    pub band: u32,
}

const fn wino(mh: u32, mw: u32, tb: u32, cb: u32, bk: u32) -> WinoTile {
    WinoTile { mh, mw, tb, cb, tm: 8, tn: 8, bk, rows_in_k: false, band: 1 }
}

/// A tile that transforms along W only, F(MW, K_W), the kernel's rows in K.
const fn wino_w(mw: u32, tb: u32, cb: u32, bk: u32) -> WinoTile {
    WinoTile { mh: 1, mw, tb, cb, tm: 8, tn: 8, bk, rows_in_k: true, band: 1 }
}

/// A tile along W in bands of `band` tile rows, K steps of `channels` input channels (all their kernel rows).
const fn wino_wb(mw: u32, band: u32, tb: u32, cb: u32, channels: u32) -> WinoTile {
    WinoTile { mh: 1, mw, tb, cb, tm: 8, tn: 8, bk: channels, rows_in_k: true, band }
}

/// The tiles along W without bands: F(MW, K_W) with the kernel rows in K, K steps of 8 (the heuristic's before
/// the bands, and its choice where an adapter's workgroup memory is too small for them). Each measured faster
/// than the GEMM on the kernels it was made for (docs/PERFORMANCE.md):
/// - 64 tiles x 64 channels (512 invocations with 8 points, 32 KiB): 3x5 kernels with F(4, 5) (also faster there
///   than the 2-D tile F(2x4, 3x5));
/// - 48 tiles x 64 channels for the 10-point F(4, 7) (480 invocations, 35 KiB) on 3x7 kernels (faster than
///   F(2, 7) on 64 x 64); 32 x 64 (30 KiB, within 32 KiB) where that does not fit;
/// - for groups of 32 output channels, 128 tiles x 32 channels (F(4, 3)) and 64 x 32 (F(4, 7), 10 points,
///   30 KiB).
pub const WINO_W4: WinoTile = wino_w(4, 64, 64, 8);
pub const WINO_W4_48: WinoTile = wino_w(4, 48, 64, 8);
pub const WINO_W4_32: WinoTile = wino_w(4, 32, 64, 8);
pub const WINO_W4_NARROW: WinoTile = wino_w(4, 128, 32, 8);
pub const WINO_W4_NARROW_64: WinoTile = wino_w(4, 64, 32, 8);

/// The same tiles in bands, K steps of 4 input channels with all their kernel rows: tiles of several output rows
/// share their transformed input rows, which measured faster than the tiles without bands (docs/PERFORMANCE.md).
/// The first and the last need 36-40 KiB of workgroup memory at their kernels (3x3, 3x5, 3x7): where the
/// adapter has less, the selector takes the tile without bands.
pub const WINO_W4_BANDS: WinoTile = wino_wb(4, 2, 64, 64, 4);
pub const WINO_W4_NARROW_BANDS: WinoTile = wino_wb(4, 4, 128, 32, 4);
pub const WINO_W4_NARROW_64_BANDS: WinoTile = wino_wb(4, 8, 64, 32, 4);

/// Every Winograd tile the selector may choose (each tested on the software driver on every kernel size it
/// applies to): the heuristic's eight along W ([`crate::gpu::select`]), and one 2-D tile, F(2x2, K_HxK_W), whose
/// transforms take both axes. F(6, K_W) tiles, with and without bands, never won on the suite
/// (docs/PERFORMANCE.md) and were removed.
pub const WINO_TILES: &[WinoTile] = &[
    WINO_W4_BANDS,
    WINO_W4,
    WINO_W4_48,
    WINO_W4_32,
    WINO_W4_NARROW_BANDS,
    WINO_W4_NARROW,
    WINO_W4_NARROW_64_BANDS,
    WINO_W4_NARROW_64,
    wino(2, 2, 16, 32, 8),
];

/// The transforms of both axes and their sizes for one shape.
#[derive(Debug)]
pub struct Transforms {
    pub h: Transform1d,
    pub w: Transform1d,
}

impl Transforms {
    pub fn points(&self) -> u32 {
        (self.h.alpha * self.w.alpha) as u32
    }
}

impl WinoTile {
    pub fn name(&self) -> String {
        let f = match (self.rows_in_k, self.band) {
            (false, _) => format!("{}x{}", self.mh, self.mw),
            (true, 1) => format!("w{}", self.mw),
            (true, b) => format!("w{}b{b}", self.mw),
        };
        let step = if self.band > 1 { "c" } else { "" };
        format!("wino_{f}_{}x{}x{}{step}_{}x{}", self.tb, self.cb, self.bk, self.tm, self.tn)
    }

    /// The transform points the accumulators hold for `shape` (AH x AW, or AW with the rows in K), or why the
    /// tile cannot compute it.
    pub fn points(&self, shape: &ConvShape) -> std::result::Result<u32, String> {
        let (ah, aw) = self.alphas(shape)?;
        Ok(if self.rows_in_k { aw } else { ah * aw })
    }

    /// The transform sizes (AH, AW) for `shape` (AH = K_H with the rows in K), or why the tile cannot compute
    /// it: sizes only, the transforms themselves are built by [`WinoTile::transforms`] when the kernel is encoded.
    pub fn alphas(&self, shape: &ConvShape) -> std::result::Result<(u32, u32), String> {
        if self.rows_in_k && self.mh != 1 {
            return Err(format!("{}: a tile with the kernel rows in K has MH = 1", self.name()));
        }
        if shape.stride != [1, 1] || shape.dilation != [1, 1] {
            return Err(format!(
                "{} computes stride 1 without dilation only (stride {:?}, dilation {:?})",
                self.name(),
                shape.stride,
                shape.dilation
            ));
        }
        let axis = |m: u32, r: usize| {
            Transform1d::alpha(m as usize, r).ok_or_else(|| {
                format!(
                    "{} cannot take a {r}-tap kernel axis: F({m}, {r}) needs more than {MAX_ALPHA} points",
                    self.name()
                )
            })
        };
        Ok((axis(self.mh, shape.kernel[0])? as u32, axis(self.mw, shape.kernel[1])? as u32))
    }

    /// The transforms for `shape`, or why this tile cannot compute it.
    pub fn transforms(&self, shape: &ConvShape) -> std::result::Result<Transforms, String> {
        self.points(shape)?;
        let axis = |m: u32, r: usize| {
            Transform1d::new(m as usize, r).ok_or_else(|| format!("{}: F({m}, {r}) has no transform", self.name()))
        };
        Ok(Transforms { h: axis(self.mh, shape.kernel[0])?, w: axis(self.mw, shape.kernel[1])? })
    }

    /// Invocations per workgroup for `points` transform points: one point, TM tiles and TN channels each.
    pub fn threads(&self, points: u32) -> u32 {
        points * (self.tb / self.tm) * (self.cb / self.tn)
    }

    /// K indices per step: BK channels, or in bands `bk` channels x `k_rows` kernel rows.
    pub fn k_step(&self, k_rows: u32) -> u32 {
        if self.band > 1 {
            self.bk * k_rows
        } else {
            self.bk
        }
    }

    /// The transformed input values of one K step in workgroup memory: BK x points x TB, or in bands the bk
    /// channels' band + k_rows - 1 transformed rows of tb / band columns.
    fn v_values(&self, points: u32, k_rows: u32) -> u32 {
        if self.band > 1 {
            self.bk * (self.band + k_rows - 1) * self.band_row_stride(points)
        } else {
            self.bk * points * self.tb
        }
    }

    /// The staged K step (transformed input and weights), or the accumulator exchange of the epilogue if larger,
    /// in bytes, for `points` points and `k_rows` kernel rows in K (1 without the rows in K).
    pub fn workgroup_bytes(&self, points: u32, k_rows: u32) -> u32 {
        let staged = self.v_values(points, k_rows) + self.k_step(k_rows) * points * self.cb;
        let exchange = 16 * self.threads(points);
        4 * staged.max(exchange)
    }

    /// In bands, the floats from one transformed row to the next in workgroup memory: AW x TC, plus a skew
    /// where a subgroup's tile runs span several band rows, so that their reads fall on distinct banks (row
    /// strides of TC/4 quads modulo the 32 banks' 32 quads; a subgroup reads 8 runs of 4 tiles).
    fn band_row_stride(&self, aw: u32) -> u32 {
        let tc_quads = self.tb / self.band / 4;
        let skew = if tc_quads >= 8 { 0 } else { (tc_quads * (32 * aw - aw + 1)) % 32 };
        4 * (aw * tc_quads + skew)
    }

    /// The kernel rows the K index takes for `shape`: K_H with the rows in K, else 1.
    fn k_rows(&self, shape: &ConvShape) -> u32 {
        if self.rows_in_k {
            shape.kernel[0] as u32
        } else {
            1
        }
    }

    /// The layout rules of the shader (independent of the shape).
    pub fn is_consistent(&self) -> bool {
        self.tm > 0
            && self.tn > 0
            && self.tm.is_multiple_of(4)
            && self.tn.is_multiple_of(4)
            && self.tb.is_multiple_of(self.tm)
            && self.cb.is_multiple_of(self.tn)
            && self.bk > 0
            && self.band > 0
            && (self.band == 1
                || (self.rows_in_k && self.tb.is_multiple_of(self.band) && (self.tb / self.band).is_multiple_of(4)))
    }

    /// Whether this tile computes `shape` within `limits`: stride 1, no dilation, transforms of at most
    /// [`MAX_ALPHA`] points per axis, and a workgroup the adapter can run. Returns the points the accumulators
    /// hold ([`WinoTile::points`]).
    pub fn check(&self, shape: &ConvShape, limits: &wgpu::Limits) -> std::result::Result<u32, String> {
        let p = self.points(shape)?;
        if !self.is_consistent() {
            return Err(format!("{}: {self:?} breaks the shader's layout rules", self.name()));
        }
        // After the layout rules: a band of 0 would divide by zero here.
        let bytes = self.workgroup_bytes(p, self.k_rows(shape));
        if self.threads(p) > limits.max_compute_invocations_per_workgroup
            || self.threads(p) > limits.max_compute_workgroup_size_x
            || bytes > limits.max_compute_workgroup_storage_size
        {
            return Err(format!(
                "{} with a {}x{} kernel needs {} invocations and {} bytes of workgroup memory; this adapter has {} and {}",
                self.name(),
                shape.kernel[0],
                shape.kernel[1],
                self.threads(p),
                bytes,
                limits.max_compute_invocations_per_workgroup,
                limits.max_compute_workgroup_storage_size
            ));
        }
        Ok(p)
    }

    /// Bytes of the transformed weight: AH x AW x Cin x Cog (rounded up to whole vec4s) f32 values.
    pub(crate) fn transformed_bytes(&self, shape: &ConvShape) -> std::result::Result<u64, String> {
        let (ah, aw) = self.alphas(shape)?;
        Ok((ah * aw) as u64 * shape.in_channels as u64 * cog4(shape) as u64 * 4)
    }

    /// [`WinoTile::check`] on `ctx`'s adapter, and the transformed weight (AH x AW x Cin x Cog values,
    /// AH x AW / (kH*kW) times the weight) within one binding. What the selector asks on every call: sizes only.
    pub fn check_on(&self, ctx: &GpuContext, shape: &ConvShape) -> std::result::Result<(), String> {
        self.check(shape, &ctx.device.limits())?;
        let bytes = self.transformed_bytes(shape)?;
        let values = bytes / 4;
        if bytes > ctx.binding_limit() || values >= 1 << 31 {
            return Err(format!("{}: the transformed weight ({values} values) exceeds one binding", self.name()));
        }
        Ok(())
    }

    /// The shader for a shape's transforms and tensors of `io`: `shaders/forward/winograd.wgsl` with the tile
    /// constants and the generated transforms and register code in place of its marker lines.
    pub(crate) fn source(&self, t: &Transforms, io: Io) -> String {
        // AH: the points along H the accumulators hold; PH_K: the kernel rows in K (one of them: none).
        // With the rows in K the output side sees the plain sum over them, F(1, 1).
        let (out_h, ph_k) = match self.rows_in_k {
            true => (Transform1d::new(1, 1).expect("F(1, 1) exists"), t.h.alpha as u32),
            false => (t.h.clone(), 1),
        };
        let (ah, aw) = (out_h.alpha as u32, t.w.alpha as u32);
        let p = ah * aw;
        let bk = self.k_step(ph_k);
        let tc = self.tb / self.band;
        // Bands: the transformed rows of a step, band + K_H - 1 per channel.
        let rr = self.band + ph_k - 1;
        let rs = self.band_row_stride(aw);
        let v_jobs = if self.band > 1 { self.bk * rr * tc } else { bk * self.tb * ah };
        let header = format!(
            "const MH: u32 = {}u;\nconst MW: u32 = {}u;\nconst AH: u32 = {ah}u;\nconst AW: u32 = {aw}u;\nconst P: u32 = {p}u;\n\
             const PH_K: u32 = {ph_k}u;\n\
             const TB: u32 = {}u;\nconst CB: u32 = {}u;\nconst TM: u32 = {}u;\nconst TN: u32 = {}u;\nconst BK: u32 = {bk}u;\n\
             const BAND: u32 = {}u;\nconst TC: u32 = TB / BAND;\nconst RR: u32 = BAND + PH_K - 1u;\nconst RS: u32 = {}u;\n\
             const WG_T: u32 = TB / TM;\nconst WG_C: u32 = CB / TN;\nconst THREADS: u32 = P * WG_T * WG_C;\n\
             const V_JOBS: u32 = {v_jobs}u;\nconst V_QUADS: u32 = {}u;\nconst SMEM_QUADS: u32 = {}u;\n",
            self.mh,
            self.mw,
            self.tb,
            self.cb,
            self.tm,
            self.tn,
            self.band,
            rs,
            self.v_values(p, ph_k) / 4,
            self.workgroup_bytes(p, ph_k) / 16
        );
        let (quads_m, quads_n) = (self.tm / 4, self.tn / 4);
        // The GEMM of the invocation's point: tile run q at V's quad v_at + q * WG_T, channel run j at U's quad
        // u_at + j * WG_C, channel k of the step P * TB / 4 (V) or P * CB / 4 (U) quads further.
        // In bands, tile run q of the invocation starts at V's quad vb<q> (its band row and column at the
        // invocation's point), and K index k (channel k / K_H, kernel row k % K_H) reads the transformed row
        // k % K_H further down, in channel k / K_H's rows.
        let banded = self.band > 1;
        let v_at: String = match banded {
            true => (0..quads_m)
                .map(|q| {
                    format!("    let vt{q} = ti * 4u + {q}u * WG_T * 4u;\n    let vb{q} = (vt{q} / TC * RS + point * TC + vt{q} % TC) / 4u;\n")
                })
                .collect(),
            false => "    let v_at = point * (TB / 4u) + ti;\n".into(),
        };
        let (decl, math) = register_tile(
            self.tm,
            self.tn,
            bk,
            |k, q| match banded {
                true => format!("smem[vb{q} + {}u]", ((k / ph_k) * rr + k % ph_k) * rs / 4),
                false => format!("smem[v_at + {}u]", k * p * self.tb / 4 + q * (self.tb / self.tm)),
            },
            |k, j| format!("smem[u_at + {}u]", k * p * self.cb / 4 + j * (self.cb / self.tn)),
        );
        let acc = |i: u32, j: u32| format!("acc_{i}_{j}");
        // The epilogue: one exchange per (tile run q, channel run j) of the invocation's accumulators.
        let mut epilogue = String::new();
        for q in 0..quads_m {
            for j in 0..quads_n {
                epilogue += "    workgroupBarrier();\n";
                for f in 0..4 {
                    let c = ["x", "y", "z", "w"][f];
                    let v = (0..4).map(|e| format!("{}.{c}", acc(q * 4 + e, j))).collect::<Vec<_>>().join(", ");
                    epilogue += &format!("    smem[x_at + {}u * WG_T] = vec4<f32>({v});\n", f);
                }
                epilogue += &format!("    workgroupBarrier();\n    output_pass(oc_ctx, {q}u, {j}u);\n");
            }
        }
        let v_per = v_jobs.div_ceil(self.threads(p));
        let (loads, stages) = match banded {
            true => (load_v_band(&t.w, v_per), stage_v_band(&t.w, v_per)),
            false => (load_v(&t.h, &t.w, v_per), stage_v(&t.h, &t.w, v_per)),
        };
        let body = fill_markers(
            SHADER,
            &[
                ("INPUT_TRANSFORM", &input_transform(&t.h)),
                ("LOAD_V", &loads),
                ("STAGE_V", &stages),
                ("V_AT", &v_at),
                ("OUTPUT_TRANSFORM", &output_transform(&out_h)),
                ("OUTPUT_ROW", &output_row(&out_h, &t.w)),
                ("ACC_DECL", &decl),
                ("MATH", &math),
                ("EPILOGUE", &epilogue),
            ],
        );
        let operands = declare(
            io.storage,
            &[
                io.operand("x", 1, Access::Read),
                io.operand("bias", 3, Access::Read),
                io.operand("out", 4, Access::ReadWrite),
                io.operand("w_raw", 5, Access::Read),
            ],
        );
        wgsl::module(&[&header, &operands, &body])
    }
}

/// The patch rows row ph of BT_h combines (those with a nonzero coefficient).
fn rows_of(h: &Transform1d, ph: usize) -> Vec<usize> {
    (0..h.alpha).filter(|&t| h.bt[ph * h.alpha + t] != 0.0).collect()
}

/// The most patch rows one row of BT_h combines.
fn nrows(h: &Transform1d) -> usize {
    (0..h.alpha).map(|p| rows_of(h, p).len()).max().unwrap_or(1).max(1)
}

/// `const NROWS`, `const ROWS`, `struct RowSel` and `fn row_sel(ph) -> RowSel`: for row ph of the transformed
/// patch, the patch rows it combines (t0, t1, ..) and their coefficients (c0, c1, ..; 0 in unused slots).
/// Selected by value at run time, so that the load and combine code is the same straight-line code for every
/// row (a subgroup's jobs share ph, but a switch over code kept the loaded rows in arrays the driver did not
/// keep in registers).
fn input_transform(h: &Transform1d) -> String {
    let n = nrows(h);
    let mut s = format!("const NROWS: u32 = {n}u;\nconst ROWS: u32 = NROWS * AW;\n\nstruct RowSel {{\n");
    for r in 0..n {
        s += &format!("    t{r}: u32,\n    c{r}: f32,\n");
    }
    s += "}\n\nfn row_sel(ph: u32) -> RowSel {\n    switch ph {\n";
    for p in 0..h.alpha {
        let rows = rows_of(h, p);
        let fields: Vec<String> = (0..n)
            .map(|r| match rows.get(r) {
                Some(&t) => format!("{t}u, {}", lit(h.bt[p * h.alpha + t])),
                None => "0u, 0.0".into(),
            })
            .collect();
        s += &format!("        case {p}u: {{ return RowSel({}); }}\n", fields.join(", "));
    }
    s += &format!("        default: {{ return RowSel({}); }}\n    }}\n}}\n", vec!["0u, 0.0"; n].join(", "));
    s
}

/// The V loads of `load_step`: per job slot i, the NROWS selected patch rows (AW values each, zero outside the
/// input or in an unused slot) into r.v[i * ROWS ..].
fn load_v(h: &Transform1d, w: &Transform1d, v_per: u32) -> String {
    let (n, aw) = (nrows(h), w.alpha);
    let mut s = String::new();
    for i in 0..v_per as usize {
        s += &format!(
            "    {{
        let job = c.lid + {i}u * THREADS;
        let pos = tile_pos(c.t_block, job_tile(job));
        let kap = k0 + job_k(job);
        let ic = k_channel(c.ic_lo, kap);
        let ok = job < V_JOBS && pos.ok && ic < c.ic_hi;
        let plane = u.in_offset + pos.n * C_IN * in_plane + (ic - u.ic_begin) * in_plane;
        let top = i32(pos.y * MH) + BASE_H;
        let left = i32(pos.x * MW) + BASE_W;
        let sel = row_sel(job_ph(job) + k_row(kap));
"
        );
        for c in 0..aw {
            s += &format!("        let col{c} = left + {c};\n        let in{c} = col{c} >= 0 && col{c} < i32(IN_W);\n");
        }
        for r in 0..n {
            s += &format!(
                "        let ih{r} = top + i32(sel.t{r});\n        let row{r} = plane + u32(ih{r}) * IN_W; // wraps where unused\n        let ok{r} = ok && sel.c{r} != 0.0 && ih{r} >= 0 && ih{r} < i32(IN_H);\n"
            );
            for c in 0..aw {
                s += &format!(
                    "        if (ok{r} && in{c}) {{ r.v[{}u] = x_raw(row{r} + u32(col{c})); }}\n",
                    i * n * aw + r * aw + c
                );
            }
        }
        s += "    }\n";
    }
    s
}

/// The V part of `stage`: per job slot i, the rows combined with the job's coefficients (along H), then BT_w
/// (constants), and the AW values stored at [k][ph * AW + pw][tile].
fn stage_v(h: &Transform1d, w: &Transform1d, v_per: u32) -> String {
    let (n, aw) = (nrows(h), w.alpha);
    let mut s = String::new();
    for i in 0..v_per as usize {
        s += &format!("    {{\n        let job = lid + {i}u * THREADS;\n        if (job < V_JOBS) {{\n");
        if !is_identity(h) {
            s += "            let sel = row_sel(job_ph(job) + k_row(k0 + job_k(job)));\n";
        }
        for c in 0..aw {
            // An identity BT_h (the kernel rows in K) selects one row with coefficient 1: no products.
            let terms: Vec<String> = match is_identity(h) {
                true => vec![format!("x_value(r.v[{}u])", i * aw + c)],
                false => (0..n).map(|r| format!("sel.c{r} * x_value(r.v[{}u])", i * n * aw + r * aw + c)).collect(),
            };
            s += &format!("            let h{c} = {};\n", terms.join(" + "));
        }
        s += "            let at = (job_k(job) * P + job_ph(job) * AW) * TB + job_tile(job);\n";
        s += &store_transformed_row(w, "TB");
        s += "        }\n    }\n";
    }
    s
}

/// The V loads of `load_step` in bands: per job slot i, one input row of one band column for one channel of the
/// step (AW values, zero outside the input) into r.v[i * AW ..]. Job = (channel, band row, column), column
/// fastest.
fn load_v_band(w: &Transform1d, v_per: u32) -> String {
    let aw = w.alpha;
    let mut s = String::new();
    for i in 0..v_per as usize {
        s += &format!(
            "    {{
        let job = c.lid + {i}u * THREADS;
        let row = (job / TC) % RR;
        let ic = c.ic_lo + k0 / PH_K + job / (TC * RR);
        let pos = band_column(c.t_block, job % TC);
        let plane = u.in_offset + pos.n * C_IN * in_plane + (ic - u.ic_begin) * in_plane;
        let ih = i32(pos.y + row) + BASE_H;
        let ok = job < V_JOBS && pos.ok && ic < c.ic_hi && ih >= 0 && ih < i32(IN_H);
        let row_at = plane + u32(ih) * IN_W; // wraps where not ok
        let left = i32(pos.x * MW) + BASE_W;
"
        );
        for c in 0..aw {
            s += &format!(
                "        if (ok && left + {c} >= 0 && left + {c} < i32(IN_W)) {{ r.v[{}u] = x_raw(row_at + u32(left + {c})); }}\n",
                i * aw + c
            );
        }
        s += "    }\n";
    }
    s
}

/// The V part of `stage` in bands: per job slot i, BT_w (constants) of the row, stored at
/// [channel][band row][pw][column] (band rows RS floats apart).
fn stage_v_band(w: &Transform1d, v_per: u32) -> String {
    let aw = w.alpha;
    let mut s = String::new();
    for i in 0..v_per as usize {
        s += &format!("    {{\n        let job = lid + {i}u * THREADS;\n        if (job < V_JOBS) {{\n");
        for c in 0..aw {
            s += &format!("            let h{c} = x_value(r.v[{}u]);\n", i * aw + c);
        }
        s += "            let at = (job / TC) * RS + job % TC;\n";
        s += &store_transformed_row(w, "TC");
        s += "        }\n    }\n";
    }
    s
}

/// BT_w applied to the row h0 .. h<AW-1> and each point stored at `at + point * stride` in workgroup memory.
fn store_transformed_row(w: &Transform1d, stride: &str) -> String {
    let (mut s, rows) = paired_rows(&w.bt, w.alpha, |c| format!("h{c}"));
    for (q, e) in rows.iter().enumerate() {
        s += &format!("            smem_store(at + {q}u * {stride}, {e});\n");
    }
    s
}

/// Whether a transform's BT is the identity (F(1, r): the plain correlation).
fn is_identity(t: &Transform1d) -> bool {
    t.bt.iter().enumerate().all(|(i, &v)| v == if i / t.alpha == i % t.alpha { 1.0 } else { 0.0 })
}

/// The rows of the square matrix `m` (n x n) applied to `term(0..n)`: `let` statements and one expression per
/// row. Rows of a pair of points +a and -a share their even columns and negate their odd ones, so such a pair is
/// computed as e + o and e - o from its even part e and odd part o, one sum each (F(6, 3)'s BT: 32 terms
/// instead of 44).
fn paired_rows(m: &[f64], n: usize, term: impl Fn(usize) -> String) -> (String, Vec<String>) {
    let row = |q: usize| &m[q * n..(q + 1) * n];
    let mirrors = |a: &[f64], b: &[f64]| {
        (0..n).all(|c| b[c] == if c % 2 == 0 { a[c] } else { -a[c] }) && (1..n).step_by(2).any(|c| a[c] != 0.0)
    };
    let mut lets = String::new();
    let mut exprs: Vec<Option<String>> = vec![None; n];
    for q in 0..n {
        if exprs[q].is_some() {
            continue;
        }
        match (q + 1..n).find(|&q2| exprs[q2].is_none() && mirrors(row(q), row(q2))) {
            Some(q2) => {
                let part =
                    |odd: bool| combination((0..n).map(|c| if (c % 2 == 1) == odd { row(q)[c] } else { 0.0 }), &term);
                lets += &format!("            let e{q} = {};\n            let o{q} = {};\n", part(false), part(true));
                exprs[q] = Some(format!("e{q} + o{q}"));
                exprs[q2] = Some(format!("e{q} - o{q}"));
            }
            None => exprs[q] = Some(combination(row(q).iter().copied(), &term)),
        }
    }
    (lets, exprs.into_iter().flatten().collect())
}

/// `struct OutSel` and `fn out_sel(oy) -> OutSel`: row oy of AT_h (a0 .. a<AH-1>), selected by value at run time.
fn output_transform(h: &Transform1d) -> String {
    let ah = h.alpha;
    let mut s = String::from("struct OutSel {\n");
    for p in 0..ah {
        s += &format!("    a{p}: f32,\n");
    }
    s += "}\n\nfn out_sel(oy: u32) -> OutSel {\n    switch oy {\n";
    for o in 0..h.m {
        let a: Vec<String> = (0..ah).map(|p| lit(h.at[o * ah + p])).collect();
        s += &format!("        case {o}u: {{ return OutSel({}); }}\n", a.join(", "));
    }
    s += &format!("        default: {{ return OutSel({}); }}\n    }}\n}}\n", vec!["0.0"; ah].join(", "));
    s
}

/// The output job's row: the exchanged points combined along H with AT_h's row (`sel`), then AT_w (constants);
/// each pixel inside the output stored.
fn output_row(h: &Transform1d, w: &Transform1d) -> String {
    let (ah, aw) = (h.alpha, w.alpha);
    let mut s = String::new();
    for c in 0..aw {
        let terms: Vec<String> = (0..ah).map(|p| format!("sel.a{p} * m_at(m_base, {}u)", p * aw + c)).collect();
        s += &format!("        let h{c} = {};\n", terms.join(" + "));
    }
    for x in 0..w.m {
        let e = combination((0..aw).map(|c| w.at[x * aw + c]), |c| format!("h{c}"));
        s += &format!(
            "        if (ow0 + {x}u < OUT_W) {{ store_px(at + {x}u, exact_px(c, {e}, n, oc, oh, ow0 + {x}u), b); }}\n"
        );
    }
    s
}

/// The weight transform's source for a weight of `io`: the filter transforms G as constant arrays in front of
/// `shaders/forward/winograd_weights.wgsl` (the transformed weight is f32).
fn weights_source(t: &Transforms, io: Io) -> String {
    let arr = |m: &[f64]| m.iter().map(|&v| lit(v)).collect::<Vec<_>>().join(", ");
    let operands = declare(io.storage, &[io.operand("w", 0, Access::Read)]);
    let header = format!(
        "const AH: u32 = {}u;\nconst AW: u32 = {}u;\nconst GH = array<f32, {}>({});\nconst GW = array<f32, {}>({});\n",
        t.h.alpha,
        t.w.alpha,
        t.h.g.len(),
        arr(&t.h.g),
        t.w.g.len(),
        arr(&t.w.g)
    );
    wgsl::module(&[&header, &operands, WEIGHTS_SHADER])
}

/// Encodes the transform of `weight` for `tile` on `shape` into `pass` ([`crate::gpu::plan`]).
pub(crate) fn prepare_weight(
    ctx: &GpuContext,
    shape: &ConvShape,
    tile: &WinoTile,
    weight: &GpuTensor,
    pass: &mut wgpu::ComputePass<'_>,
) -> Result<PooledBuffer> {
    tile.check_on(ctx, shape).map_err(ConvtError::InvalidArgument)?;
    let t = tile.transforms(shape).map_err(ConvtError::InvalidArgument)?;
    transform_weights(ctx, shape, &t, weight, pass)
}

/// Encodes the weight transform: `weight` [Cin, Cog, kH, kW] to U [point][Cin][Cog4] (rows padded with zeros to
/// whole vec4s), the kernel flipped (the transposed convolution at stride 1 is a correlation with the flipped
/// kernel).
fn transform_weights(
    ctx: &GpuContext,
    shape: &ConvShape,
    t: &Transforms,
    weight: &GpuTensor,
    pass: &mut wgpu::ComputePass<'_>,
) -> Result<PooledBuffer> {
    let src = weight.single_buffer("weight", ctx)?;
    let elems = t.points() as usize * shape.in_channels * cog4(shape);
    let transformed = ctx.pool.get(&ctx.device, (elems * 4).max(4) as u64, STORAGE);
    let io = Io::of(ctx, weight.dtype());
    let name = format!("{WEIGHTS_SHADER_NAME} r{}x{} m{}x{} {}", t.h.r, t.w.r, t.h.m, t.w.m, io.key());
    let module = ctx.module_with(&name, || weights_source(t, io))?;
    let consts = [
        ("C_IN", shape.in_channels as f64),
        ("COG", shape.out_per_group() as f64),
        ("COG4", cog4(shape) as f64),
        ("K_H", shape.kernel[0] as f64),
        ("K_W", shape.kernel[1] as f64),
        ("WORKGROUP_SIZE", WEIGHTS_WORKGROUP_SIZE as f64),
    ];
    let pipeline = ctx.pipeline(format!("{name} {consts:?}"), &module, &consts)?;
    dispatch_weight_prep(ctx, pass, &pipeline, src, &transformed, elems, WEIGHTS_WORKGROUP_SIZE)?;
    Ok(transformed)
}

/// A group's output channels rounded up to whole vec4s: the transformed weight's row length.
fn cog4(shape: &ConvShape) -> usize {
    shape.out_per_group().div_ceil(4) * 4
}

/// The uniform block `Dispatch` of the shader, field for field.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct DispatchUniform {
    slice: SliceFields,
    dispatch_width: u32,
    tile_blocks: u32,
    channel_blocks_per_group: u32,
    group_begin: u32,
    group_count: u32,
    _pad: [u32; 2],
}

/// The shader and its constants for `shape` (for inspection tools), or why the tile cannot compute it.
pub(crate) fn shader(tile: &WinoTile, shape: &ConvShape, has_bias: bool) -> Result<(String, Vec<(&'static str, f64)>)> {
    let t = tile.transforms(shape).map_err(ConvtError::InvalidArgument)?;
    Ok((tile.source(&t, Io::F32), shape_constants(shape, has_bias)))
}

/// Encodes the weight transform and the Winograd kernel over every slice of the plan into `pass`; the
/// transformed weight goes into `in_flight`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode(
    ctx: &GpuContext,
    shape: &ConvShape,
    tile: &WinoTile,
    input: &GpuTensor,
    weight: Weight<'_>,
    bias: Option<&GpuTensor>,
    output: &GpuTensor,
    pass: &mut wgpu::ComputePass<'_>,
    in_flight: &mut InFlight,
) -> Result<()> {
    tile.check_on(ctx, shape).map_err(ConvtError::InvalidArgument)?;
    check_index_range(shape)?;
    let slices = plan(shape, input, output);
    if slices.is_empty() {
        return Ok(());
    }
    let t = tile.transforms(shape).map_err(ConvtError::InvalidArgument)?;
    let transformed = match weight.prepared {
        Some(p) => (*p.buffer).clone(),
        None => in_flight.keep(transform_weights(ctx, shape, &t, weight.tensor, pass)?),
    };
    let ops = Operands::new(ctx, &transformed, bias)?;
    // Bound too: the kernel recomputes a non-finite output from it by the definition.
    let raw_weight = weight.tensor.single_buffer("weight", ctx)?;
    let io = Io::new(ctx, input.dtype(), output.dtype());
    let name = format!("{} r{}x{} {}", tile.name(), t.h.r, t.w.r, io.key());
    let module = ctx.module_with(&name, || tile.source(&t, io))?;
    let consts = shape_constants(shape, bias.is_some());
    let key = format!("{name} {:?} {:?}", ctx.options().shader_checks, consts);
    let pipeline = ctx.pipeline(key, &module, &consts)?;
    let cog = shape.out_per_group();
    let channel_blocks_per_group = cog.div_ceil(tile.cb as usize);
    let (tiles_h, tiles_w) = (shape.out_hw[0].div_ceil(tile.mh as usize), shape.out_hw[1].div_ceil(tile.mw as usize));
    // Blocks of TB consecutive tiles, or in bands of tb / band columns of (sample, band, column).
    let (band, block) = (tile.band as usize, (tile.tb / tile.band) as usize);
    let positions_per_sample = tiles_h.div_ceil(band) * tiles_w;
    ctx.scoped(|| {
        for s in &slices {
            let (g0, g1) = (s.oc.start / cog, (s.oc.end - 1) / cog + 1);
            let tile_blocks = (s.samples.len() * positions_per_sample).div_ceil(block);
            let grid = grid(ctx, tile_blocks * channel_blocks_per_group * (g1 - g0));
            let u = DispatchUniform {
                slice: SliceFields::from(s),
                dispatch_width: grid.0,
                tile_blocks: tile_blocks as u32,
                channel_blocks_per_group: channel_blocks_per_group as u32,
                group_begin: g0 as u32,
                group_count: (g1 - g0) as u32,
                _pad: [0; 2],
            };
            let input = &input.chunks()[s.in_chunk];
            let out = &output.chunks()[s.out_chunk];
            let mut buffers = ops.buffers(input, out);
            buffers.push(raw_weight);
            dispatch_buffers(ctx, pass, &pipeline, bytemuck::bytes_of(&u), &buffers, grid);
        }
        Ok(())
    })
}

/// Every generated source for validation: each tile on each kernel size up to MAX_ALPHA x MAX_ALPHA its
/// transforms take, and the weight transforms.
pub(crate) fn shader_variants() -> Vec<(&'static str, String, String)> {
    let mut v = Vec::new();
    for tile in WINO_TILES {
        for kh in 1..=MAX_ALPHA {
            for kw in 1..=MAX_ALPHA {
                let t = match (Transform1d::new(tile.mh as usize, kh), Transform1d::new(tile.mw as usize, kw)) {
                    (Some(h), Some(w)) => Transforms { h, w },
                    _ => continue,
                };
                let name = format!("{} r{kh}x{kw}", tile.name());
                v.push((WEIGHTS_SHADER_NAME, format!("weights {name}"), weights_source(&t, Io::F32)));
                v.push((SHADER_NAME, name.clone(), tile.source(&t, Io::F32)));
                // The half-precision I/O on the 3x5 kernel of the suite: the operand code is the same on every size.
                if (kh, kw) == (3, 5) {
                    for io in Io::variants().into_iter().skip(1) {
                        let key = io.key();
                        v.push((WEIGHTS_SHADER_NAME, format!("weights {name} {key}"), weights_source(&t, io)));
                        v.push((SHADER_NAME, format!("{name} {key}"), tile.source(&t, io)));
                    }
                }
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_transform_computes_the_correlation_exactly_in_f64() {
        for r in 1..=MAX_ALPHA {
            for m in 1..=MAX_ALPHA {
                if let Some(t) = Transform1d::new(m, r) {
                    assert!(t.identity_error() < 1e-9, "F({m}, {r}): {}", t.identity_error());
                }
            }
        }
        assert!(Transform1d::new(4, 8).is_none());
    }

    #[test]
    fn every_transform_rounds_like_the_f32_tolerance_allows() {
        // Each transform simulated in f32 as the kernel computes it (U = G g and V = BT d rounded, products
        // summed over 192 K indices as 64 channels x 3 kernel rows of the suite's 3x5 kernel, then AT), against
        // the f64 correlation, with nn.ConvTranspose2d-like weights and two kinds of input: torch.rand-like
        // U(0, 1) (the benchmark's) and U(-1, 1) (the tests' and `convt verify`'s, whose sums cancel more). The
        // 8-point transforms measure up to about 1e-6, the 9- and 10-point ones (points +-3/4 added) up to about
        // 5e-6: a margin of 2x to the tests' 1e-5, which the budgets below keep.
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        for low in [0.0f32, -1.0] {
            for r in 2..=MAX_ALPHA {
                for m in 2..=MAX_ALPHA {
                    let Some(t) = Transform1d::new(m, r) else { continue };
                    let a = t.alpha;
                    let (mut num, mut den) = (0.0f64, 0.0f64);
                    let b = 1.0 / ((64 * 15) as f64).sqrt();
                    for _ in 0..100 {
                        let mut acc = vec![0f32; a];
                        let mut exact = vec![0f64; m];
                        for _ in 0..192 {
                            let d: Vec<f32> = (0..a).map(|_| rng.random_range(low..1.0)).collect();
                            let g: Vec<f32> = (0..r).map(|_| rng.random_range(-b..b) as f32).collect();
                            for (i, e) in exact.iter_mut().enumerate() {
                                *e += (0..r).map(|j| d[i + j] as f64 * g[j] as f64).sum::<f64>();
                            }
                            for (p, acc) in acc.iter_mut().enumerate() {
                                let u: f32 = (0..r).map(|j| t.g[p * r + j] as f32 * g[j]).sum();
                                let v: f32 = (0..a).map(|q| t.bt[p * a + q] as f32 * d[q]).sum();
                                *acc += u * v;
                            }
                        }
                        for (i, e) in exact.iter().enumerate() {
                            let y: f32 = (0..a).map(|p| t.at[i * a + p] as f32 * acc[p]).sum();
                            num += (y as f64 - e).powi(2);
                            den += e.powi(2);
                        }
                    }
                    let err = (num / den).sqrt();
                    let budget = if a <= 8 { 2e-6 } else { 6e-6 };
                    assert!(err < budget, "F({m}, {r}), {a} points, inputs U({low}, 1): rel L2 {err:.2e}");
                }
            }
        }
    }

    #[test]
    fn f2_3_has_the_textbook_input_transform() {
        // Lavin and Gray's F(2, 3) up to the sign of the first point's row (which G carries here).
        let t = Transform1d::new(2, 3).unwrap();
        let bt: Vec<f64> = t.bt.iter().map(|v| v.abs()).collect();
        assert_eq!(bt, vec![1., 0., 1., 0., 0., 1., 1., 0., 0., 1., 1., 0., 0., 1., 0., 1.]);
    }

    #[test]
    fn every_tile_meets_the_layout_rules_and_runs_on_the_software_driver() {
        // 32 KiB of workgroup memory and 1024 invocations: what the software driver (Vulkan) offers, where CI runs
        // every tile (tests/winograd.rs) on a 2x3 kernel at least; the suite's 3x5 kernel needs up to 40 KiB (the
        // 128 x 32 tile), within 48 KiB (`h100`: the adapter the tiles were measured on). And the heuristic's tiles
        // for the suite's stride-1 cases: its first choice fits 48 KiB (what it was measured with) and its last the
        // software driver.
        let adapter = |bytes: u32| wgpu::Limits {
            max_compute_workgroup_storage_size: bytes,
            max_compute_invocations_per_workgroup: 1024,
            max_compute_workgroup_size_x: 1024,
            ..wgpu::Limits::default()
        };
        let (software, h100) = (adapter(32768), adapter(49152));
        let shape = |k: [usize; 2]| {
            crate::ConvTranspose2dOptions::default().resolve(&[1, 8, 9, 7], &[8, 8, k[0], k[1]], None).unwrap()
        };
        for tile in WINO_TILES {
            assert!(tile.is_consistent(), "{tile:?}");
            tile.check(&shape([2, 3]), &software).unwrap_or_else(|e| panic!("{e}"));
            // A suite kernel every tile takes with 48 KiB.
            tile.check(&shape([3, 3]), &h100).unwrap_or_else(|e| panic!("{e}"));
            let src = tile.source(&tile.transforms(&shape([3, 3])).unwrap(), Io::F32);
            assert!(!src.contains("//#"), "{tile:?}");
        }
        for case in crate::suite::CASES {
            let shape = case.params.resolve(&case.input_dims(), &case.weight_dims(), None).unwrap();
            let picked = crate::gpu::select::winograd_tiles(&shape);
            if shape.stride != [1, 1] {
                assert!(picked.iter().all(|t| t.check(&shape, &h100).is_err()), "{}", case.name);
                continue;
            }
            let (first, last) = (picked.first().unwrap(), picked.last().unwrap());
            first.check(&shape, &h100).unwrap_or_else(|e| panic!("{}: {e}", case.name));
            last.check(&shape, &software).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        }
    }

    #[test]
    fn strided_or_dilated_shapes_are_refused_by_name() {
        let shape =
            crate::ConvTranspose2dOptions::default().stride(2).resolve(&[1, 8, 9, 7], &[8, 8, 3, 3], None).unwrap();
        let e = WINO_TILES[0].check(&shape, &wgpu::Limits::default()).unwrap_err();
        assert!(e.contains("stride 1 without dilation only (stride [2, 2]"), "{e}");
    }
}
