//! The grad_weight kernels. `shaders/backward/grad_weight.wgsl`: one GEMM per tap (input channels x output channels,
//! reduced over samples and pixels) in square workgroup tiles (64, or 32 or 16 for groups with fewer channels)
//! with the reduction split into chunks. `shaders/backward/grad_weight_rows.wgsl` ([`RowsKernel`]): for strided problems
//! with few input channels per group, a kernel row's taps from one pass over their grad_output rows. At precision
//! `fast`, `shaders/backward/grad_weight_half.wgsl` ([`super::grad_weight_half`]): the per-tap GEMM with f16
//! operands on tensor cores. The per-tap kernels share `shaders/backward/grad_weight_common.wgsl` and
//! `shaders/backward/tap_range.wgsl`. All write partial sums that `shaders/backward/grad_weight_reduce.wgsl` adds in
//! a fixed order: deterministic, no atomics.

use crate::error::{ConvtError, Result};
use crate::gpu::absmax;
use crate::gpu::backward::grad_weight_half::{self, HalfTile, HALF_TILES};
use crate::gpu::backward::grad_weight_nhwc::{self, NhwcGwTile, NHWC_GW_TILES};
use crate::gpu::backward::split_k::{self, encode_reduce, partial_cap, partial_sums};
use crate::gpu::context::GpuContext;
use crate::gpu::kernel::{check_index_range, dispatch_buffers, grid};
use crate::gpu::memory::{GpuTensor, InFlight};
use crate::gpu::nhwc_copy::SharedCopy;
use crate::gpu::slices::plan;
use crate::gpu::wgsl::operands::{declare, Access, Io};
use crate::gpu::wgsl::register::register_tile;
use crate::gpu::wgsl::{self, fill_markers, shape_constants, with_shape_prelude};
use crate::params::ConvShape;
use crate::precision::Precision;

pub const SHADER_NAME: &str = "backward/grad_weight.wgsl";
/// `shaders/backward/grad_weight.wgsl` behind the shape's constants: the template of every tile size.
pub const SHADER: &str = with_shape_prelude!("backward/grad_weight.wgsl");
/// Which input indices a tap reaches the output from: put in both kernels' modules.
pub const TAP_RANGE_SHADER_NAME: &str = "backward/tap_range.wgsl";
pub(crate) const TAP_RANGE: &str = include_str!("../../../shaders/backward/tap_range.wgsl");
pub const COMMON_SHADER_NAME: &str = "backward/grad_weight_common.wgsl";
/// What the per-tap GEMM kernels share (the slice uniform, the bindings, a K step's load context): put in both
/// kernels' modules.
pub(crate) const COMMON: &str = include_str!("../../../shaders/backward/grad_weight_common.wgsl");
pub const ROWS_SHADER_NAME: &str = "backward/grad_weight_rows.wgsl";
/// `shaders/backward/grad_weight_rows.wgsl` behind the shape's constants.
pub const ROWS_SHADER: &str = with_shape_prelude!("backward/grad_weight_rows.wgsl");

/// The tensors every grad_weight kernel reads, x (binding 1) and grad_output (2), in `io`'s input dtype.
pub(crate) fn operands(io: Io) -> String {
    declare(io.storage, &[io.operand("x", 1, Access::Read), io.operand("grad_out", 2, Access::Read)])
}

/// The tile sizes (channels per workgroup tile on each side, `TILE` in the shader), and pixels per K step (`BK`).
pub const TILES: [usize; 3] = [16, 32, 64];
const BK: usize = 16;
/// Invocations a dispatch should have to fill a large GPU (the split count is chosen to reach it): 4096
/// workgroups of the 64-wide tile, of 128 invocations each (written as an earlier tile's 2048 workgroups of 256).
const TARGET_INVOCATIONS: usize = 2048 * 256;

/// The uniform block `Slice` of the shader, field for field.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct SliceUniform {
    n_count: u32,
    x_offset: u32,
    go_offset: u32,
    go_first_channel: u32,
    ic_begin: u32,
    ic_end: u32,
    oc_begin: u32,
    oc_end: u32,
    splits: u32,
    chunk: u32,
    dispatch_width: u32,
    _pad: u32,
}

/// The uniform block `Params` of `shaders/backward/grad_weight_rows.wgsl`, field for field.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct RowsUniform {
    n_count: u32,
    dispatch_width: u32,
    _pad: [u32; 2],
}

/// A kernel that computes grad_weight: what [`crate::gpu::select::grad_weight`] picks and `convt tune --backward`
/// times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GradWeightKernel {
    /// One GEMM per tap with square workgroup tiles of this many channels a side (16, 32 or 64).
    Taps(usize),
    /// The rows kernel: a kernel row's taps from one pass over their grad_output rows (strided, small groups).
    Rows,
    /// One GEMM per tap with f16 operands scaled by powers of two and f32 sums (precision `fast`), on tensor cores
    /// or the FMA units as the tile says (`shaders/backward/grad_weight_half.wgsl`).
    Half(HalfTile),
    /// One tensor-core GEMM per tap on f16 NHWC copies of x and grad_output, a subgroup's A fragments serving
    /// several taps (precision `fast`; `shaders/backward/grad_weight_nhwc.wgsl`).
    Nhwc(NhwcGwTile),
}

impl GradWeightKernel {
    /// Its name, as the tuning cache and `convt bench` show it.
    pub fn name(&self) -> String {
        match self {
            GradWeightKernel::Taps(tile) => format!("grad_weight_{tile}"),
            GradWeightKernel::Rows => "grad_weight_rows".into(),
            GradWeightKernel::Half(t) => t.name(),
            GradWeightKernel::Nhwc(t) => t.name(),
        }
    }

    /// How it computes, in words (as [`crate::gpu::Strategy::arithmetic`] says it of the forward's kernels).
    pub fn arithmetic(&self) -> &'static str {
        match self {
            GradWeightKernel::Half(t) if t.units == grad_weight_half::Units::TensorCores => {
                "f16 operands on tensor cores (cooperative matrices), f32 accumulation"
            }
            GradWeightKernel::Nhwc(t) if t.units == grad_weight_half::Units::Fma => {
                "f16 operands on the FMA units (no cooperative matrices here), f32 accumulation"
            }
            GradWeightKernel::Nhwc(_) => "f16 operands on tensor cores (cooperative matrices), f32 accumulation",
            GradWeightKernel::Half(_) => {
                "f16 operands on the FMA units (no cooperative matrices here), f32 accumulation"
            }
            _ => "exact f32",
        }
    }

    /// The precision it computes at.
    pub fn precision(&self) -> Precision {
        match self {
            GradWeightKernel::Half(_) | GradWeightKernel::Nhwc(_) => Precision::Fast,
            _ => Precision::F32,
        }
    }

    /// The kernel a name stands for.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::all().into_iter().find(|k| k.name() == name)
    }

    /// Every grad_weight kernel of this build.
    pub fn all() -> Vec<Self> {
        TILES
            .iter()
            .map(|&t| GradWeightKernel::Taps(t))
            .chain([GradWeightKernel::Rows])
            .chain(HALF_TILES.iter().map(|&t| GradWeightKernel::Half(t)))
            .chain(NHWC_GW_TILES.iter().map(|&t| GradWeightKernel::Nhwc(t)))
            .collect()
    }

    /// Whether it computes grad_weight for `shape` on `ctx` with the input and grad_output in `chunks` bindings:
    /// the per-tap GEMM always, the rows kernel where `RowsKernel::for_shape` takes the shape, an f16 tile where
    /// this adapter runs it.
    pub fn computes(&self, ctx: &GpuContext, shape: &ConvShape, chunks: [usize; 2]) -> bool {
        match self {
            GradWeightKernel::Taps(tile) => TILES.contains(tile),
            GradWeightKernel::Rows => rows_kernel(ctx, shape, chunks).is_some(),
            GradWeightKernel::Half(t) => HALF_TILES.contains(t) && t.runs_on(ctx),
            GradWeightKernel::Nhwc(t) => NHWC_GW_TILES.contains(t) && t.check(ctx, shape).is_ok(),
        }
    }

    /// The kernels that compute `shape` here at `precision` (what `convt tune --backward` times): the exact ones,
    /// and for `fast` the f16 tiles this adapter runs too.
    pub fn candidates(ctx: &GpuContext, shape: &ConvShape, chunks: [usize; 2], precision: Precision) -> Vec<Self> {
        Self::all()
            .into_iter()
            .filter(|k| {
                (precision == Precision::Fast || k.precision() == Precision::F32) && k.computes(ctx, shape, chunks)
            })
            .collect()
    }
}

/// Whether `encode` adds to `grad_weight` (which must then start at zero) rather than writing it: when the
/// tensors are split into several slices.
pub(crate) fn accumulates(shape: &ConvShape, input: &GpuTensor, grad_output: &GpuTensor) -> bool {
    plan(shape, input, grad_output).len() > 1
}

/// Output channels per invocation for a tile size: 8 on the 64-wide tile (4 x 8 register tiles, as the forward
/// GEMM's best tiles), else 4.
fn per_invocation(tile: usize) -> usize {
    if tile >= 64 {
        8
    } else {
        4
    }
}

/// Invocations per workgroup of a tile size.
fn invocations(tile: usize) -> usize {
    (tile / 4) * (tile / per_invocation(tile))
}

/// The start of the per-tap GEMM kernels' entry point (`//#JOB` in shaders/backward/grad_weight.wgsl and
/// grad_weight_half.wgsl): the workgroup's job, a BM x BN (input channel x output channel) tile of one tap over one
/// chunk of K; past the last job the workgroup returns. Code of the entry point rather than a function, so that naga
/// sees the job's bounds (which the K loop and its barriers depend on) as uniform: a function's arguments are not.
/// The chunk (split) varies slowest: the workgroups of one chunk, every tap and channel tile, are neighbours in the
/// grid and run together, so the chunk's x and grad_output come from DRAM once and from L2 for the other taps (with
/// the chunk fastest, each tap's GEMM read the whole tensors again). Leaves in scope what the loads (`ctx`, `k_local`,
/// `row0`, `k_begin`, `k_end`) and the epilogue (`split`, `group`, `cig`, `cog`, `taps`, `tap`, `ic_lo`, `oc_lo`)
/// need.
pub(crate) const JOB: &str = "    let cig = C_IN / GROUPS;
    let cog = C_OUT / GROUPS;
    let taps = K_H * K_W;
    let ic_tiles = (cig + BM - 1u) / BM;
    let oc_tiles = (cog + BN - 1u) / BN;
    let wg = wid.y * slice.dispatch_width + wid.x;
    if (wg >= GROUPS * ic_tiles * oc_tiles * taps * slice.splits) {
        return;
    }
    let tap = wg % taps;
    let oct = (wg / taps) % oc_tiles;
    let ict = (wg / (taps * oc_tiles)) % ic_tiles;
    let group = (wg / (taps * oc_tiles * ic_tiles)) % GROUPS;
    let split = wg / (taps * oc_tiles * ic_tiles * GROUPS);
    let kh = tap / K_W;
    let kw = tap % K_W;
    // The tile's channels in global numbering, restricted to the group and the slice: [lo, hi).
    let ic_lo = group * cig + ict * BM;
    let ic_hi = min(min(ic_lo + BM, group * cig + cig), slice.ic_end);
    let oc_lo = group * cog + oct * BN;
    let oc_hi = min(min(oc_lo + BN, group * cog + cog), slice.oc_end);
    let rh = axis_range(kh, S_H, P_H, D_H, IN_H, OUT_H);
    let rw = axis_range(kw, S_W, P_W, D_W, IN_W, OUT_W);
    let nh = rh.y - rh.x;
    let nw = rw.y - rw.x;
    let count = slice.n_count * nh * nw;
    let k_begin = min(split * slice.chunk, count);
    let k_end = min(k_begin + slice.chunk, count);
    // Staging: invocation lid loads pixel k_local = lid % BK of a step for channel rows lid / BK + (THREADS / BK) j.
    let k_local = lid % BK;
    let row0 = lid / BK;
    let ctx = LoadCtx(rh, rw, nh, nw, k_end, k_local, row0, ic_lo, ic_hi, oc_lo, oc_hi, kh, kw);
";

/// The shader for a tile size and tensors of `io`: `shaders/backward/grad_weight.wgsl` with its `TILE` and `TN`
/// constants in front and the register tile's code (the kit's micro-kernel, [`register_tile`]) at its marker lines.
pub(crate) fn source(tile: usize, io: Io) -> String {
    let tn = per_invocation(tile) as u32;
    let (decl, math) = register_tile(
        4,
        tn,
        BK as u32,
        |k, _| format!("xs[{k}u * ROW + ty]"),
        |k, j| format!("gs[{k}u * ROW + tx + {j}u * WG_N]"),
    );
    let mut epilogue = String::new();
    for i in 0..4 {
        for j in 0..tn / 4 {
            epilogue += &format!("    store4(sc, {i}u, sc.oc_lo + ({j}u * WG_N + tx) * 4u, acc_{i}_{j});\n");
        }
    }
    let body = fill_markers(SHADER, &[("JOB", JOB), ("ACC_DECL", &decl), ("MATH", &math), ("EPILOGUE", &epilogue)]);
    let header = format!("const TILE: u32 = {tile}u;\nconst TN: u32 = {tn}u;\n");
    wgsl::module(&[&header, &operands(io), &body, COMMON, TAP_RANGE])
}

/// The layout of `shaders/backward/grad_weight_rows.wgsl` for a shape: vec4s of input channels per group (`cig4`),
/// output channels per workgroup (`ocb`), kernel rows per invocation (`khr`) and per workgroup (`khb`, a multiple
/// of `khr`; the workgroup has `khb / khr` x `ocb` x `kernel_w` invocations), input rows per partial-sum slot (`rb`)
/// and x columns staged at once (`xw`). The source depends on `cig4` and `khr` (the sizes of each invocation's
/// accumulator and load arrays, constants in front of it); the rest are override constants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowsKernel {
    pub cig4: usize,
    pub ocb: usize,
    pub khr: usize,
    pub khb: usize,
    pub kernel_w: usize,
    pub rb: usize,
    pub xw: usize,
}

/// The widest per-tap GEMM tile (`select::grad_weight_tile`) whose shapes the rows kernel takes with any number
/// of kernel rows per invocation: it measured faster than the 16-wide tile (groups of 8 x 16 channels, 16
/// invocations per workgroup).
const ROWS_MAX_TILE: usize = 16;
/// The most input channels per group the rows kernel takes where every kernel row fits one invocation
/// (`ROWS_MAX_ACC`): on groups of 32 x 64 channels with 3 kernel rows it measured faster than the 64-wide tile,
/// and slower with one or two kernel rows per invocation (docs/PERFORMANCE.md).
const ROWS_MAX_CIG: usize = 32;
/// The most invocations of a rows workgroup.
const ROWS_MAX_THREADS: usize = 256;
/// Input rows per partial-sum slot before the slots' size asks for more.
const ROWS_MIN_RB: usize = 4;
/// The most vec4 accumulators of a rows invocation (its kernel rows times the group's vec4s of input channels).
const ROWS_MAX_ACC: usize = 24;
/// The most kernel rows of a rows invocation (each holds UNROLL grad_output values in flight).
const ROWS_MAX_KHR: usize = 4;
/// The most invocations a rows workgroup has along the kernel rows.
const ROWS_KHT: usize = 8;

/// The most kernel rows a rows invocation keeps for groups of `cig4` vec4s of input channels: within
/// `ROWS_MAX_KHR` and `ROWS_MAX_ACC` accumulators, at least one.
fn max_khr(cig4: usize) -> usize {
    ROWS_MAX_KHR.min(ROWS_MAX_ACC / cig4).max(1)
}

impl RowsKernel {
    /// Where the rows kernel serves instead of the per-tap GEMM: a stride above 1 (where each tap's GEMM reads its
    /// own strided subset of grad_output) on groups small enough for the GEMM's 16-wide tile (`ROWS_MAX_TILE`: at
    /// most 16 input and output channels), or of at most `ROWS_MAX_CIG` input channels where every kernel row fits
    /// one invocation's accumulators; x and grad_output each in one binding (`chunks`: 1 each), and its workgroup
    /// and partial sums within `limits` and `partial_cap` bytes.
    pub fn for_shape(shape: &ConvShape, chunks: [usize; 2], limits: &wgpu::Limits, partial_cap: u64) -> Option<Self> {
        let (cig, cog, [k_h, k_w]) = (shape.in_per_group(), shape.out_per_group(), shape.kernel);
        let cig4 = cig.div_ceil(4);
        let small = crate::gpu::select::grad_weight_tile(shape) <= ROWS_MAX_TILE
            || (cig <= ROWS_MAX_CIG && k_h <= max_khr(cig4));
        if shape.stride == [1, 1] || !small || chunks != [1, 1] || shape.batch == 0 || k_w > ROWS_MAX_THREADS {
            return None;
        }
        let max_threads = ROWS_MAX_THREADS
            .min(limits.max_compute_invocations_per_workgroup as usize)
            .min(limits.max_compute_workgroup_size_x as usize);
        let ocb = cog.min(max_threads / k_w);
        let xw = shape.in_hw[1].min(256).min(limits.max_compute_workgroup_storage_size as usize / (16 * cig4));
        if ocb == 0 || xw == 0 {
            return None;
        }
        let khr = k_h.min(max_khr(cig4));
        let khb = khr * k_h.div_ceil(khr).min(max_threads / (ocb * k_w)).min(ROWS_KHT);
        let elems = (shape.in_channels * cog * k_h * k_w) as u64;
        let mut rb = ROWS_MIN_RB;
        while (shape.batch * shape.in_hw[0].div_ceil(rb)) as u64 * elems * 4 > partial_cap {
            if rb >= shape.in_hw[0] {
                return None;
            }
            rb *= 2;
        }
        Some(RowsKernel { cig4, ocb, khr, khb, kernel_w: k_w, rb, xw })
    }

    /// Partial-sum slots: one per sample and block of `rb` input rows.
    fn slots(&self, shape: &ConvShape) -> usize {
        shape.batch * shape.in_hw[0].div_ceil(self.rb)
    }

    /// Invocations of a workgroup: `khb / khr` along the kernel rows, `ocb` along the output channels, one per
    /// kernel column.
    fn threads(&self) -> usize {
        self.khb / self.khr * self.ocb * self.kernel_w
    }

    /// Workgroups of the dispatch.
    fn workgroups(&self, shape: &ConvShape) -> usize {
        self.slots(shape) * shape.groups * shape.out_per_group().div_ceil(self.ocb) * shape.kernel[0].div_ceil(self.khb)
    }

    /// The shader for tensors of `io`: `shaders/backward/grad_weight_rows.wgsl` with this layout's CIG4 and KHR in
    /// front.
    pub(crate) fn source(&self, io: Io) -> String {
        let header = format!("const CIG4: u32 = {}u;\nconst KHR: u32 = {}u;\n", self.cig4, self.khr);
        wgsl::module(&[&header, &operands(io), ROWS_SHADER, TAP_RANGE])
    }

    /// The shader module's name: what its source depends on.
    fn module_name(&self, io: Io) -> String {
        format!("grad_weight_rows cig4 {} khr {} {}", self.cig4, self.khr, io.key())
    }

    /// The layout's override constants of the shader.
    fn constants(&self) -> [(&'static str, f64); 5] {
        [("OCB", self.ocb), ("KHB", self.khb), ("RB", self.rb), ("XW", self.xw), ("THREADS", self.threads())]
            .map(|(k, v)| (k, v as f64))
    }
}

/// The rows kernel's layout where it computes grad_weight for `shape` on `ctx` with x and grad_output in `chunks`
/// bindings ([`RowsKernel::for_shape`]); `None` where the per-tap GEMM does.
pub fn rows_kernel(ctx: &GpuContext, shape: &ConvShape, chunks: [usize; 2]) -> Option<RowsKernel> {
    let elems = shape.weight_dims().iter().product();
    RowsKernel::for_shape(shape, chunks, &ctx.device.limits(), partial_cap(ctx.binding_limit(), elems))
}

/// (splits, pixels per split) for `pixels` pixels of reduction per tap over `tiles` workgroup tiles, with at
/// most `max_splits` slots of partial sums, aiming at `target_workgroups` workgroups; a split is a multiple of the
/// kernel's K step `bk`.
fn split_k(pixels: usize, tiles: usize, max_splits: usize, target_workgroups: usize, bk: usize) -> (usize, usize) {
    let wanted = target_workgroups.div_ceil(tiles.max(1)).clamp(1, pixels.div_ceil(bk).max(1)).min(max_splits.max(1));
    let chunk = pixels.div_ceil(wanted).div_ceil(bk) * bk;
    (pixels.div_ceil(chunk.max(bk)).max(1), chunk.max(bk))
}

/// Encodes the gradient of the weight given `input` and `grad_output` into `grad_weight` (the weight's size) with
/// `kernel`, which must compute the shape ([`GradWeightKernel::computes`]); the NHWC GEMM reads grad_output from
/// `shared` where that copy serves it ([`grad_weight_nhwc::encode`]), the other kernels read the tensor.
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode(
    ctx: &GpuContext,
    shape: &ConvShape,
    kernel: GradWeightKernel,
    input: &GpuTensor,
    grad_output: &GpuTensor,
    grad_weight: &GpuTensor,
    shared: Option<&SharedCopy>,
    pass: &mut wgpu::ComputePass<'_>,
    in_flight: &mut InFlight,
) -> Result<()> {
    check_index_range(shape)?;
    let consts = shape_constants(shape, false);
    let checks = ctx.options().shader_checks;
    let elems = grad_weight.numel();
    let partial_cap = partial_cap(ctx.binding_limit(), elems);
    // x and grad_output of one dtype; grad_weight of it or f32 (a master copy's, or a sum over several slices).
    let io = Io::new(ctx, input.dtype(), input.dtype());
    let chunks = [input.chunks().len(), grad_output.chunks().len()];
    let tile = match kernel {
        GradWeightKernel::Taps(tile) => Tile::Exact(tile),
        GradWeightKernel::Half(t) => Tile::Half(t),
        GradWeightKernel::Nhwc(t) => {
            return grad_weight_nhwc::encode(ctx, shape, &t, input, grad_output, grad_weight, shared, pass, in_flight);
        }
        GradWeightKernel::Rows => {
            let rows = rows_kernel(ctx, shape, chunks).ok_or_else(|| {
                ConvtError::InvalidArgument(format!("{} does not compute this shape here", kernel.name()))
            })?;
            return ctx.scoped(|| {
                let name = rows.module_name(io);
                let module = ctx.module_with(&name, || rows.source(io))?;
                let consts: Vec<_> = consts.iter().copied().chain(rows.constants()).collect();
                let pipeline = ctx.pipeline(format!("{name} {checks:?} {consts:?}"), &module, &consts)?;
                let slots = rows.slots(shape);
                let partial = partial_sums(ctx, in_flight, slots * elems);
                let g = grid(ctx, rows.workgroups(shape));
                let u = RowsUniform { n_count: shape.batch as u32, dispatch_width: g.0, _pad: [0; 2] };
                let (x, go) = (&input.chunks()[0], &grad_output.chunks()[0]);
                dispatch_buffers(ctx, pass, &pipeline, bytemuck::bytes_of(&u), &[x, go, &partial], g);
                encode_reduce(ctx, pass, &partial, grad_weight, elems, slots, false, 1)
            });
        }
    };
    let slices = plan(shape, input, grad_output);
    let accumulate = slices.len() > 1;
    // The per-tap GEMMs: (BM, BN) channels per workgroup tile, K steps of `bk` pixels, and for the f16 tiles the
    // operand maxima (slot 0 x's, slot 1 grad_output's) their scales come from.
    let (name, source, (bm, bn), bk, threads): (String, Box<dyn FnOnce() -> String>, _, _, _) = match tile {
        Tile::Exact(t) => {
            (format!("grad_weight_{t} {}", io.key()), Box::new(move || source(t, io)), (t, t), BK, invocations(t))
        }
        Tile::Half(t) => {
            let size = (t.bm as usize, t.bn as usize);
            (
                format!("{} {}", t.name(), io.key()),
                Box::new(move || t.source(&shared_source(io))),
                size,
                t.bk as usize,
                t.threads() as usize,
            )
        }
    };
    let maxima = match tile {
        Tile::Half(_) => Some(absmax::encode_slots(ctx, &[(0, input), (1, grad_output)], &[], pass)?),
        Tile::Exact(_) => None,
    };
    let module = ctx.module_with(&name, source)?;
    let gemm = ctx.pipeline(format!("{name} {checks:?} {consts:?}"), &module, &consts)?;

    let taps = shape.kernel[0] * shape.kernel[1];
    let tiles = shape.groups * shape.in_per_group().div_ceil(bm) * shape.out_per_group().div_ceil(bn) * taps;
    let target_workgroups = TARGET_INVOCATIONS / threads;
    let max_splits = (partial_cap / (elems as u64 * 4)) as usize;
    ctx.scoped(|| {
        for s in &slices {
            // Every tap's pixels lie in the slice's samples x the input plane.
            let pixels = s.samples.len() * shape.in_hw[0] * shape.in_hw[1];
            let (splits, chunk) = split_k(pixels, tiles, max_splits, target_workgroups, bk);
            let partial = partial_sums(ctx, in_flight, splits * elems);
            let g = grid(ctx, tiles * splits);
            let u = SliceUniform {
                n_count: s.samples.len() as u32,
                x_offset: s.in_offset as u32,
                go_offset: s.out_offset as u32,
                go_first_channel: s.out_first_channel as u32,
                ic_begin: s.ic.start as u32,
                ic_end: s.ic.end as u32,
                oc_begin: s.oc.start as u32,
                oc_end: s.oc.end as u32,
                splits: splits as u32,
                chunk: chunk as u32,
                dispatch_width: g.0,
                _pad: 0,
            };
            let x = &input.chunks()[s.in_chunk];
            let go = &grad_output.chunks()[s.out_chunk];
            let mut buffers: Vec<&dyn crate::gpu::kernel::Bindable> = vec![x, go, &partial];
            if let Some(m) = maxima.as_ref() {
                buffers.push(m);
            }
            dispatch_buffers(ctx, pass, &gemm, bytemuck::bytes_of(&u), &buffers, g);
            encode_reduce(ctx, pass, &partial, grad_weight, elems, splits, accumulate, taps)?;
        }
        Ok(())
    })
}

/// What the f16 tiles share with the exact ones: the operands, the load context and the tap bounds.
pub(crate) fn shared_source(io: Io) -> String {
    format!("{}\n{COMMON}\n{TAP_RANGE}", operands(io))
}

/// The per-tap GEMM's tile: exact (square, this many channels a side) or f16.
#[derive(Clone, Copy)]
enum Tile {
    Exact(usize),
    Half(HalfTile),
}

/// This kernel's shaders for validation (`gpu::shader_sources`): every per-tap GEMM tile, exact and f16 (with the
/// declarations and tap bounds they share), the rows kernel at every CIG4 `RowsKernel::for_shape` makes (groups of up
/// to 32 input channels) with its most kernel rows an invocation (the constants its source depends on; the rest of
/// its layout are override constants), and the reduction.
pub(crate) fn shader_variants() -> Vec<crate::gpu::ShaderVariant> {
    let mut v: Vec<crate::gpu::ShaderVariant> = Vec::new();
    // Tensors of one dtype read (the variants with an f32 output are the reduction's).
    for io in Io::variants().into_iter().filter(|io| io.input == io.output) {
        let key = io.key();
        v.extend(TILES.iter().map(|&t| (SHADER_NAME, format!("grad_weight_{t} {key}"), source(t, io))));
        v.extend((1..=ROWS_MAX_CIG / 4).map(|cig4| {
            let khr = max_khr(cig4);
            let k = RowsKernel { cig4, ocb: 16, khr, khb: khr, kernel_w: 5, rb: 4, xw: 256 };
            (ROWS_SHADER_NAME, k.module_name(io), k.source(io))
        }));
        let shared = shared_source(io);
        v.extend(
            HALF_TILES
                .iter()
                .map(|t| (grad_weight_half::SHADER_NAME, format!("{} {key}", t.name()), t.source(&shared))),
        );
    }
    v.push((COMMON_SHADER_NAME, format!("{COMMON_SHADER_NAME} in {SHADER_NAME}"), source(TILES[0], Io::F32)));
    v.push((TAP_RANGE_SHADER_NAME, format!("{TAP_RANGE_SHADER_NAME} in {SHADER_NAME}"), source(TILES[0], Io::F32)));
    v.extend(split_k::shader_variants());
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_kernel_takes_strided_small_groups_within_the_limits() {
        let shape = |stride: i64, cin: usize, cout: usize, groups: i64, in_hw: [usize; 2], kernel: [usize; 2]| {
            let params = crate::ConvTranspose2dOptions::default().stride(stride).groups(groups);
            let weight = [cin, cout / groups as usize, kernel[0], kernel[1]];
            params.resolve(&[2, cin, in_hw[0], in_hw[1]], &weight, None).unwrap()
        };
        let limits = wgpu::Limits::default(); // 256 invocations, 16 KiB of workgroup memory
        let cap = split_k::MAX_PARTIAL_BYTES;
        // The suite's groups of 8 x 16 channels: two vec4s of input channels, every output channel in one workgroup.
        let kb75 = shape(2, 32, 64, 4, [128, 256], [3, 5]);
        let k = RowsKernel::for_shape(&kb75, [1, 1], &limits, cap).unwrap();
        assert_eq!(k, RowsKernel { cig4: 2, ocb: 16, khr: 3, khb: 3, kernel_w: 5, rb: ROWS_MIN_RB, xw: 256 });
        // kb81's groups of 32 x 64 channels: every kernel row in one invocation (8 vec4s x 3 rows of accumulators).
        let kb81 = shape(5, 32, 64, 1, [64, 128], [3, 3]);
        let k = RowsKernel::for_shape(&kb81, [1, 1], &limits, cap).unwrap();
        assert_eq!(k, RowsKernel { cig4: 8, ocb: 64, khr: 3, khb: 3, kernel_w: 3, rb: ROWS_MIN_RB, xw: 128 });
        // Stride 1, groups wider than the 16-wide tile whose kernel rows do not fit one invocation (more than 32
        // input channels, or 32 and 4 kernel rows), or tensors in several bindings: the per-tap GEMM.
        assert_eq!(RowsKernel::for_shape(&shape(1, 16, 16, 1, [8, 8], [3, 3]), [1, 1], &limits, cap), None);
        assert_eq!(RowsKernel::for_shape(&shape(2, 64, 32, 1, [8, 8], [3, 3]), [1, 1], &limits, cap), None);
        assert_eq!(RowsKernel::for_shape(&shape(2, 32, 32, 1, [8, 8], [4, 3]), [1, 1], &limits, cap), None);
        assert_eq!(RowsKernel::for_shape(&kb75, [2, 1], &limits, cap), None);
        // Kernel rows in blocks: at most 4 an invocation, invocations along the kernel rows as the 256 allow.
        let tall = shape(2, 8, 16, 1, [5, 12], [5, 7]);
        let k = RowsKernel::for_shape(&tall, [1, 1], &limits, cap).unwrap();
        assert_eq!((k.khr, k.khb, k.threads()), (4, 8, 224));
        let k = RowsKernel::for_shape(&shape(2, 4, 16, 1, [6, 20], [5, 9]), [1, 1], &limits, cap).unwrap();
        assert_eq!((k.khr, k.khb, k.threads()), (4, 4, 144));
        // A wide kernel: output channels per workgroup so that it keeps at most 256 invocations; the staged columns
        // within the workgroup memory (16 channels: 64 bytes per column).
        let wide = shape(2, 16, 16, 1, [4, 600], [2, 20]);
        let k = RowsKernel::for_shape(&wide, [1, 1], &limits, cap).unwrap();
        assert_eq!((k.ocb, k.ocb * k.kernel_w, k.xw), (12, 240, 256));
        let small = wgpu::Limits { max_compute_workgroup_storage_size: 4096, ..limits.clone() };
        assert_eq!(RowsKernel::for_shape(&wide, [1, 1], &small, cap).unwrap().xw, 64);
        // Partial sums: more input rows per slot until the slots fit the cap, none where even one slot per sample
        // does not.
        let elems = (kb75.in_channels * 16 * 15 * 4) as u64;
        let slots = |rb: usize| (2 * 128usize.div_ceil(rb)) as u64;
        let k = RowsKernel::for_shape(&kb75, [1, 1], &limits, slots(16) * elems).unwrap();
        assert_eq!(k.rb, 16);
        assert_eq!(RowsKernel::for_shape(&kb75, [1, 1], &limits, elems), None);
    }

    #[test]
    fn split_k_covers_every_pixel_once_within_the_limits() {
        for pixels in [1, 15, 16, 17, 1000, 8 << 20] {
            for tiles in [1, 9, 512, 5000] {
                for max_splits in [1, 3, 100, 10_000] {
                    let (splits, chunk) = split_k(pixels, tiles, max_splits, 2048, BK);
                    assert!(splits >= 1 && splits <= max_splits, "{pixels} {tiles} {max_splits}: {splits}");
                    assert_eq!(chunk % BK, 0);
                    assert!(splits * chunk >= pixels && (splits - 1) * chunk < pixels, "{pixels}: {splits} x {chunk}");
                }
            }
        }
    }
}
