//! grad_weight at precision `fast` as a tensor-core GEMM on f16 NHWC copies of x and grad_output
//! (`shaders/backward/grad_weight_nhwc.wgsl`, whose opening comment says how the work is tiled and why): the
//! copies first (src/gpu/nhwc_copy.rs, at the power-of-two scales of the tensors' largest magnitudes; an f16
//! tensor as it is), then one dispatch of the GEMM for all taps, and the deterministic split-K reduction every
//! grad_weight kernel shares ([`super::split_k`]). Groups of one, channels a multiple of the tile's.

use crate::error::{ConvtError, Result};
use crate::gpu::absmax;
use crate::gpu::backward::grad_weight_half::Units;
use crate::gpu::backward::split_k;
use crate::gpu::context::GpuContext;
use crate::gpu::kernel::{check_index_range, dispatch_buffers, grid};
use crate::gpu::memory::{GpuTensor, InFlight, STORAGE};
use crate::gpu::nhwc_copy::{self, CopyLayout, CopyNeeds, PrepBlock, SharedCopy};
use crate::gpu::wgsl::coop::SUBGROUP;
use crate::gpu::wgsl::scale::{scaled_module, scaled_prologue};
use crate::gpu::wgsl::{self, fill_markers, shape_constants, with_shape_prelude};
use crate::params::ConvShape;

pub const SHADER_NAME: &str = "backward/grad_weight_nhwc.wgsl";
const SHADER: &str = include_str!("../../../shaders/backward/grad_weight_nhwc.wgsl");
pub const GATHER_SHADER_NAME: &str = "backward/grad_weight_gather.wgsl";
/// `shaders/backward/grad_weight_gather.wgsl` behind the shape's constants (and the f16 it enables).
const GATHER_SHADER: &str = concat!("enable f16;\n", with_shape_prelude!("backward/grad_weight_gather.wgsl"));
const GATHER_WORKGROUP_SIZE: usize = 256;
/// The binding of the operand maxima (after x's copy, grad_output's copy and the partial sums).
const MAXIMA_BINDING: u32 = 4;
/// The slot of x's largest magnitude in the maxima of a shared grad_output copy (whose kernel holds grad_output's
/// in slot 0 and its weight's in slot 1).
const SHARED_X_SLOT: usize = 2;
/// Halves after each pixel's channels in the copies: rows of a fragment load 16 bytes apart from the bank they
/// would share (shaders/forward/coop_nhwc.wgsl).
const PIXEL_PAD: usize = 8;
/// Subgroups a dispatch should have to keep a large GPU busy: the splits of the blocks are chosen to reach it. Sized
/// as the per-tap kernels' target (`grad_weight::TARGET_INVOCATIONS`, 2^19 invocations) over 64: a subgroup's job
/// holds 4-16 accumulator matrices, so few subgroups fit a multiprocessor at once, and every further split costs
/// the reduction a slot (docs/PERFORMANCE.md: where the weight is small the reduction already takes a quarter of
/// grad_weight's time).
const TARGET_SUBGROUPS: usize = 8192;

/// A subgroup's job: `wm` input channels x `wn` output channels of `taps` taps; `subs` jobs per workgroup; the
/// products on tensor cores or, in the variant for adapters without cooperative matrices, on the FMA units;
/// `gathered`: blocks of 16 consecutive x pixels across rows, with grad_output gathered per tap (the shader's
/// opening comment), instead of blocks within rows rounded up to 16 pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NhwcGwTile {
    pub wm: u32,
    pub wn: u32,
    pub taps: u32,
    pub subs: u32,
    pub units: Units,
    pub gathered: bool,
}

const fn tile(wm: u32, wn: u32, taps: u32, subs: u32) -> NhwcGwTile {
    NhwcGwTile { wm, wn, taps, subs, units: Units::TensorCores, gathered: false }
}

const fn gathered(t: NhwcGwTile) -> NhwcGwTile {
    NhwcGwTile { gathered: true, ..t }
}

/// Every tile of this build: on tensor cores 32 x 32 channels (4 accumulators a tap) of 3 taps (8 subgroups a
/// workgroup, or 4) or 4 taps, 64 x 32 (8 a tap) of 2 (4 subgroups, or 2), 16 x 16 of 4 for narrow layers; the
/// 32 x 32, 64 x 32 and 16 x 16 selector tiles gathered too. On the FMA units 16 x 16 of 4 taps, in rows and
/// gathered: candidates of the tuner and of a forced run wherever there are f16 shaders (so the software driver
/// runs the same copies, jobs and reduction in CI), never the selector's.
pub const NHWC_GW_TILES: [NhwcGwTile; 11] = [
    NHWC_32X32_T3,
    tile(32, 32, 3, 4),
    tile(32, 32, 4, 4),
    NHWC_64X32_T2,
    tile(64, 32, 2, 2),
    NHWC_16X16_T4,
    NhwcGwTile { units: Units::Fma, ..NHWC_16X16_T4 },
    gathered(NHWC_32X32_T3),
    gathered(NHWC_64X32_T2),
    gathered(NHWC_16X16_T4),
    gathered(NhwcGwTile { units: Units::Fma, ..NHWC_16X16_T4 }),
];
/// The selector's tiles (`select::grad_weight_nhwc_tiles`). 32 x 32 of 3 taps runs 8 subgroups a workgroup, which
/// measured faster than 4 on every suite case tried (docs/PERFORMANCE.md).
pub const NHWC_32X32_T3: NhwcGwTile = tile(32, 32, 3, 8);
pub const NHWC_64X32_T2: NhwcGwTile = tile(64, 32, 2, 4);
pub const NHWC_16X16_T4: NhwcGwTile = tile(16, 16, 4, 4);

impl NhwcGwTile {
    /// Its name, as the tuning cache and `convt bench` show it.
    pub fn name(&self) -> String {
        let fma = if self.units == Units::Fma { "fma_" } else { "" };
        let subs = if self.subs == 4 { String::new() } else { format!("_s{}", self.subs) };
        let gathered = if self.gathered { "_g" } else { "" };
        format!("grad_weight_nhwc_{fma}{}x{}_t{}{subs}{gathered}", self.wm, self.wn, self.taps)
    }

    /// Whether `ctx` runs it (f16 cooperative matrices for the tensor-core tiles, f16 shaders for the FMA one) and it
    /// computes `shape` ([`NhwcGwTile::plan`]).
    pub fn check(&self, ctx: &GpuContext, shape: &ConvShape) -> Result<()> {
        self.runs_on(ctx)?;
        self.plan(shape, ctx.binding_limit()).map(|_| ())
    }

    /// Whether `ctx` has what the tile's units need.
    fn runs_on(&self, ctx: &GpuContext) -> Result<()> {
        let (runs, lacks) = match self.units {
            Units::TensorCores => (ctx.has_coop_f16(), "f16 cooperative matrices"),
            Units::Fma => (ctx.has_f16(), "f16 shaders"),
        };
        match runs {
            true => Ok(()),
            false => {
                Err(ConvtError::InvalidArgument(format!("{} does not run on this adapter (no {lacks})", self.name())))
            }
        }
    }

    /// The work for `shape` with bindings of at most `binding_limit` bytes: one group, channels multiples of the
    /// tile's, sizes within 32-bit indices, each copy within one binding and each tensor's samples whole in its
    /// bindings (the copy reads whole samples per binding), the partial sums of every split within one binding.
    fn plan(&self, shape: &ConvShape, binding_limit: u64) -> Result<Plan> {
        let unfit =
            |why: String| Err(ConvtError::InvalidArgument(format!("{} does not take this shape: {why}", self.name())));
        if shape.groups != 1 {
            return unfit(format!("{} groups (it needs one group)", shape.groups));
        }
        if !shape.in_channels.is_multiple_of(self.wm as usize) || !shape.out_channels.is_multiple_of(self.wn as usize) {
            return unfit(format!(
                "{} input and {} output channels (it needs multiples of {} and {})",
                shape.in_channels, shape.out_channels, self.wm, self.wn
            ));
        }
        check_index_range(shape)?;
        let limit = binding_limit as u128;
        let sample_bytes = |channels: usize, hw: [usize; 2]| channels as u128 * hw[0] as u128 * hw[1] as u128 * 4;
        let l = Layouts::of(shape, self.gathered);
        for (what, bytes) in [
            ("one sample of the input", sample_bytes(shape.in_channels, shape.in_hw)),
            ("one sample of grad_output", sample_bytes(shape.out_channels, shape.out_hw)),
            ("the input's f16 copy", l.x_bytes(shape.batch)),
            ("grad_output's f16 copy", l.g_bytes(shape.batch)),
            ("grad_output gathered per tap", l.gathered_bytes(shape)),
        ] {
            // (A copy's halves are indexed in 32 bits.)
            if bytes > limit || bytes / 2 >= 1 << 31 {
                return unfit(format!("{what} takes {bytes} bytes, more than one binding's {binding_limit}"));
            }
        }
        let (cin, cout) = (shape.in_channels, shape.out_channels);
        let elems = cin * cout * shape.kernel[0] * shape.kernel[1];
        let blocks = l.blocks(shape);
        let per_split = self.jobs_per_split(shape);
        // Slots of partial sums, and the scratch where taps past the kernel's store (C_IN x C_OUT floats).
        let max_splits = ((split_k::partial_cap(binding_limit, elems) / 4) as usize).saturating_sub(cin * cout) / elems;
        let (splits, chunk) = splits(blocks, per_split, self.subs as usize, max_splits);
        let partial_bytes = (splits as u128 * elems as u128 + (cin * cout) as u128) * 4;
        if partial_bytes > limit {
            return unfit(format!(
                "its partial sums take {partial_bytes} bytes, more than one binding's {binding_limit}"
            ));
        }
        Ok(Plan { layouts: l, elems, blocks, per_split, splits, chunk })
    }

    /// The shader (only the copies read the tensors themselves, so one for every dtype): the template with this
    /// tile's constants in front, its taps, accumulators, products and epilogue at the marker lines.
    pub(crate) fn source(&self) -> String {
        let t = self.taps;
        let mut taps = String::new();
        for k in 0..t {
            taps += &format!(
                "    let tap{k} = tg * TAPS_PER + {k}u;\n    let at{k} = select(0u, tap{k}, tap{k} < taps);\n    let off{k} = select((at{k} / K_W) * D_H * GW + (at{k} % K_W) * D_W, at{k} * TAP_PIXELS, GATHERED);\n    let base{k} = select(u.trash, (split * taps + tap{k}) * C_IN * C_OUT, tap{k} < taps);\n"
            );
        }
        let (decl, math, epilogue, enable) = match self.units {
            Units::TensorCores => self.coop_parts(),
            Units::Fma => self.fma_parts(),
        };
        let header = format!(
            "enable f16;\n{enable}const WM: u32 = {}u;\nconst WN: u32 = {}u;\nconst TAPS_PER: u32 = {t}u;\nconst SUBS: u32 = {}u;\n",
            self.wm, self.wn, self.subs
        );
        let body = fill_markers(
            SHADER,
            &[
                ("PROLOGUE", &scaled_prologue(["X_SLOT", "G_SLOT"])),
                ("TAP_DECL", &taps),
                ("ACC_DECL", &decl),
                ("MATH", &math),
                ("EPILOGUE", &epilogue),
            ],
        );
        wgsl::module(&[&header, &body, &scaled_module(MAXIMA_BINDING)])
    }

    /// Tensor cores: A from x's copy (column-major), B from grad_output's (row-major), per tap (WM/16) x (WN/16)
    /// named accumulators, each stored as a 16 x 16 matrix.
    fn coop_parts(&self) -> (String, String, String, &'static str) {
        let (mi, nj, t) = (self.wm / 16, self.wn / 16, self.taps);
        let mut decl = String::new();
        let mut math = String::new();
        for i in 0..mi {
            math += &format!("        let a{i} = coopLoad<coop_mat16x16<f16, A>>(&xq[xa + {}u], CSX);\n", 16 * i);
        }
        for k in 0..t {
            for j in 0..nj {
                math += &format!(
                    "        let b{k}_{j} = coopLoadT<coop_mat16x16<f16, B>>(&gq[(g0 + select(0u, off{k}, live)) * CSG + oc0 + {}u], G_STEP * CSG);\n",
                    16 * j
                );
            }
        }
        let mut epilogue = String::from("    let factors = unscale_factors();\n");
        for k in 0..t {
            for i in 0..mi {
                for j in 0..nj {
                    decl += &format!("    var acc{k}_{i}_{j} = coop_mat16x16<f32, C>();\n");
                    math += &format!("        acc{k}_{i}_{j} = coopMultiplyAdd(a{i}, b{k}_{j}, acc{k}_{i}_{j});\n");
                    // naga 30 needs every coopStore argument bound to a `let` (its SPIR-V writer panics otherwise).
                    epilogue += &format!(
                        "    {{
        let v = acc{k}_{i}_{j} * factors.x * factors.y;
        let at = base{k} + (ic0 + {}u) * C_OUT + oc0 + {}u;
        let st = C_OUT;
        coopStoreT(v, &partial[at], st);
    }}
",
                        16 * i,
                        16 * j
                    );
                }
            }
        }
        (decl, math, epilogue, "enable wgpu_cooperative_matrix;\n")
    }

    /// The FMA units: lane l of the subgroup owns elements l, l + 32, ... of the job's WM x WN block (row-major) for
    /// each tap, f32 sums of the same f16 products.
    fn fma_parts(&self) -> (String, String, String, &'static str) {
        let t = self.taps;
        let per_lane = self.wm * self.wn / SUBGROUP;
        let decl = format!("    var acc: array<f32, {}>;\n    let lane = lid % 32u;\n", t * per_lane);
        let mut math = format!(
            "        for (var p = 0u; p < 16u; p++) {{
            for (var q = 0u; q < {per_lane}u; q++) {{
                let e = lane + 32u * q;
                let a = f32(xq[xa + e / WN + p * CSX]);
"
        );
        let mut epilogue = format!(
            "    for (var q = 0u; q < {per_lane}u; q++) {{
        let e = lane + 32u * q;
        let at = (ic0 + e / WN) * C_OUT + oc0 + e % WN;
"
        );
        for k in 0..t {
            math += &format!(
                "                let b{k} = f32(gq[(g0 + select(0u, off{k}, live) + p * G_STEP) * CSG + oc0 + e % WN]);
                acc[{k}u * {per_lane}u + q] = fma(a, b{k}, acc[{k}u * {per_lane}u + q]);
"
            );
            epilogue += &format!(
                "        partial[base{k} + at] = unscale(acc[{k}u * {per_lane}u + q]);
"
            );
        }
        math += "            }\n        }\n";
        epilogue += "    }\n";
        (decl, math, epilogue, "")
    }

    /// Jobs per split: tap groups x input-channel tiles x output-channel tiles.
    fn jobs_per_split(&self, shape: &ConvShape) -> usize {
        let taps = shape.kernel[0] * shape.kernel[1];
        taps.div_ceil(self.taps as usize)
            * (shape.in_channels / self.wm as usize)
            * (shape.out_channels / self.wn as usize)
    }
}

/// The copies' layouts for a shape (the shader's opening comment): x in rows of `wq` pixels (in rows: whole blocks
/// of 16; gathered: the row's own pixels), grad_output with its padding written out, each with tail rows of zeros
/// (the blocks past the end read 16 pixels of them); gathered, grad_output's regions of `tap_pixels` pixels per
/// tap (x's pixels rounded up to 16, and 16 more, all zeros past x's pixels).
struct Layouts {
    x: CopyLayout,
    g: CopyLayout,
    wq: usize,
    tap_pixels: usize,
}

impl Layouts {
    fn of(shape: &ConvShape, gathered: bool) -> Layouts {
        let [h, w] = shape.in_hw;
        let wq = if gathered { w.max(1) } else { w.div_ceil(16).max(1) * 16 };
        let gh = (h.max(1) - 1) * shape.stride[0] + (shape.kernel[0] - 1) * shape.dilation[0] + 1;
        let gw = (wq - 1) * shape.stride[1] + (shape.kernel[1] - 1) * shape.dilation[1] + 1;
        let x = CopyLayout {
            channels: shape.in_channels,
            hw: shape.in_hw,
            before: [0, 0],
            padded: [h, wq],
            copied: [0..h, 0..w],
            pixel_stride: shape.in_channels + PIXEL_PAD,
            tail_rows: 16usize.div_ceil(wq),
        };
        let g = CopyLayout {
            channels: shape.out_channels,
            hw: shape.out_hw,
            before: shape.padding,
            padded: [gh, gw],
            copied: [0..shape.out_hw[0], 0..shape.out_hw[1]],
            pixel_stride: shape.out_channels + PIXEL_PAD,
            tail_rows: 1,
        };
        let tap_pixels = if gathered { (shape.batch * h * w).next_multiple_of(16) + 16 } else { 0 };
        Layouts { x, g, wq, tap_pixels }
    }

    fn gathered(&self) -> bool {
        self.tap_pixels > 0
    }

    /// The blocks of 16 x pixels: within rows of `wq`, or gathered across them.
    fn blocks(&self, shape: &ConvShape) -> usize {
        let [h, w] = shape.in_hw;
        match self.gathered() {
            true => (shape.batch * h * w).div_ceil(16),
            false => shape.batch * h * (self.wq / 16),
        }
    }

    /// Bytes of grad_output gathered per tap (none in rows): its pixels as far apart as in its own copy.
    fn gathered_bytes(&self, shape: &ConvShape) -> u128 {
        let taps = shape.kernel[0] * shape.kernel[1];
        taps as u128 * self.tap_pixels as u128 * (shape.out_channels + PIXEL_PAD) as u128 * 2
    }
    /// What this kernel needs of a grad_output copy another kernel makes: padded images at least its own, zero
    /// pixels after the last one for the blocks past the end (16 pixels S_W apart, from `zero_g`), its pixel
    /// stride (the bank spread).
    fn g_needs(&self, shape: &ConvShape) -> CopyNeeds {
        CopyNeeds { padded: self.g.padded, tail_pixels: 16 * shape.stride[1], pixel_stride: Some(self.g.pixel_stride) }
    }

    /// Whether this kernel reads grad_output from `copy` as from its own: the same tensor in the same place (its
    /// channels, its padding before it, every value copied), padded images at least as large (every read of a tap
    /// lands on the pixel it lands on in its own copy, or on a zero past it), the tail's zero pixels, a pixel stride
    /// of whole 8-half groups (16-byte aligned fragment rows) and halves indexed in 32 bits. Then the products, and
    /// the bits of grad_weight, are the same.
    fn takes(&self, copy: &CopyLayout, batch: usize, tail_pixels: usize) -> bool {
        let own = &self.g;
        copy.channels == own.channels
            && copy.hw == own.hw
            && copy.before == own.before
            && copy.copied == own.copied
            && (0..2).all(|a| copy.padded[a] >= own.padded[a])
            && copy.tail_rows * copy.padded[1] >= tail_pixels
            && copy.pixel_stride >= own.channels
            && copy.pixel_stride.is_multiple_of(8)
            && copy.pixels(batch) * (copy.pixel_stride as u128) < 1 << 31
    }

    fn x_bytes(&self, batch: usize) -> u128 {
        self.x.pixels(batch) * self.x.pixel_stride as u128 * 2
    }
    fn g_bytes(&self, batch: usize) -> u128 {
        self.g.pixels(batch) * self.g.pixel_stride as u128 * 2
    }
}

/// The shader's uniform block `Job`, field for field.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct JobUniform {
    blocks: u32,
    chunk: u32,
    zero_x: u32,
    zero_g: u32,
    trash: u32,
    dispatch_width: u32,
    workgroups: u32,
    _pad: u32,
}

/// (splits, blocks per split) for `blocks` blocks and `per_split` jobs per split: about `TARGET_SUBGROUPS` jobs in
/// all, at most `max_splits` (when that allows whole workgroups), the job count a multiple of `subs`.
fn splits(blocks: usize, per_split: usize, subs: usize, max_splits: usize) -> (usize, usize) {
    let wanted = TARGET_SUBGROUPS.div_ceil(per_split.max(1)).clamp(1, blocks.max(1)).min(max_splits.max(1));
    let chunk = blocks.div_ceil(wanted).max(1);
    let splits = blocks.div_ceil(chunk).max(1);
    // Whole workgroups: splits rounded up to a multiple of subs / gcd(subs, per_split) (the extra ones sum zeros).
    let step = subs / crate::gpu::kernel::gcd(subs, per_split.max(1));
    (splits.next_multiple_of(step), chunk)
}

/// What [`NhwcGwTile::plan`] finds for a shape: the copies' layouts, the weight's values, the 16-pixel blocks of
/// x, the jobs per split, the splits and the blocks per split.
struct Plan {
    layouts: Layouts,
    elems: usize,
    blocks: usize,
    per_split: usize,
    splits: usize,
    chunk: usize,
}

/// What this kernel needs of a copy of grad_output that another kernel makes for `shape`, so that it reads that
/// copy instead of making its own ([`encode`]'s `shared`).
pub(crate) fn grad_output_needs(shape: &ConvShape) -> CopyNeeds {
    Layouts::of(shape, false).g_needs(shape)
}

/// Encodes grad_weight of `shape` from `input` and `grad_output` into `grad_weight` with `tile` (checked here),
/// reading grad_output from `shared` where it is a copy this kernel reads as its own (one made for the
/// [`grad_output_needs`]), else from a copy of its own.
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode(
    ctx: &GpuContext,
    shape: &ConvShape,
    tile: &NhwcGwTile,
    input: &GpuTensor,
    grad_output: &GpuTensor,
    grad_weight: &GpuTensor,
    shared: Option<&SharedCopy>,
    pass: &mut wgpu::ComputePass<'_>,
    in_flight: &mut InFlight,
) -> Result<()> {
    tile.runs_on(ctx)?;
    let Plan { layouts: mut l, elems, blocks, per_split, splits, chunk } = tile.plan(shape, ctx.binding_limit())?;
    if shape.batch == 0 {
        return Ok(()); // nothing to sum: the caller has cleared grad_weight
    }
    let (cin, cout) = (shape.in_channels, shape.out_channels);
    let tail_pixels = l.g_needs(shape).tail_pixels;
    let shared = shared.filter(|s| l.takes(&s.layout, shape.batch, tail_pixels) && s.slot != SHARED_X_SLOT);
    // x's copy at the scale of its largest magnitude, taken as it copies (at the scale the last call of this shape
    // found, copied again where that differs: no pass of its own over x); grad_output's copy, shared or made here,
    // at the scale of grad_output's largest magnitude (which slot `g_slot` of the maxima holds).
    let (maxima, x_slot, g_slot) = match shared {
        Some(s) => (s.maxima.clone(), SHARED_X_SLOT, s.slot),
        None => (absmax::encode_slots(ctx, &[(1, grad_output)], &[], pass)?, 0, 1),
    };
    let x_bytes = l.x_bytes(shape.batch) as u64;
    let xq = ctx.scoped(|| Ok(in_flight.keep(ctx.pool.get(&ctx.device, x_bytes, STORAGE))))?;
    let x_block = PrepBlock::of(l.x.channels, x_bytes as u128);
    let guess_key = nhwc_copy::guess_key("grad_weight_nhwc x", shape);
    nhwc_copy::encode_at_guess(ctx, input, &l.x, x_block, &xq, &maxima, x_slot, guess_key, pass)?;
    let gq = match shared {
        Some(s) => {
            l.g = s.layout.clone();
            s.buffer.clone()
        }
        None => {
            let g_bytes = l.g_bytes(shape.batch) as u64;
            nhwc_copy::encode_at_maximum(ctx, grad_output, &l.g, g_bytes, &maxima, g_slot, pass, in_flight)?
        }
    };
    // Gathered: each tap's grad_output pixels in x's pixel order, from the copy; the kernel reads those.
    let (gq, csg, zero_g) = match l.gathered() {
        true => (
            encode_gather(ctx, shape, &l, &gq, pass, in_flight)?,
            gathered_stride(shape),
            shape.batch * l.x.hw[0] * l.x.hw[1],
        ),
        false => (gq, l.g.pixel_stride, shape.batch * l.g.padded[0] * l.g.padded[1]),
    };
    ctx.scoped(|| {
        let module = ctx.module_with(&tile.name(), || tile.source())?;
        let values = [
            ("C_IN", cin),
            ("C_OUT", cout),
            ("K_H", shape.kernel[0]),
            ("K_W", shape.kernel[1]),
            ("S_H", shape.stride[0]),
            ("S_W", shape.stride[1]),
            ("D_H", shape.dilation[0]),
            ("D_W", shape.dilation[1]),
            ("IN_H", shape.in_hw[0]),
            ("WB", (l.wq / 16).max(1)),
            ("GH", l.g.padded[0]),
            ("GW", l.g.padded[1]),
            ("CSX", l.x.pixel_stride),
            ("CSG", csg),
            ("X_SLOT", x_slot),
            ("G_SLOT", g_slot),
            ("GATHERED", l.gathered() as usize),
            ("TAP_PIXELS", l.tap_pixels),
            ("G_STEP", if l.gathered() { 1 } else { shape.stride[1] }),
        ];
        let consts: Vec<(&str, f64)> = values.iter().map(|&(k, v)| (k, v as f64)).collect();
        let checks = ctx.options().shader_checks;
        let gemm = ctx.pipeline(format!("{} {checks:?} {consts:?}", tile.name()), &module, &consts)?;
        let partial = split_k::partial_sums(ctx, in_flight, splits * elems + cin * cout);
        let workgroups = splits * per_split / tile.subs as usize;
        let g = grid(ctx, workgroups);
        let u = JobUniform {
            blocks: blocks as u32,
            chunk: chunk as u32,
            zero_x: (shape.batch * l.x.padded[0] * l.x.padded[1]) as u32,
            zero_g: zero_g as u32,
            trash: (splits * elems) as u32,
            dispatch_width: g.0,
            workgroups: workgroups as u32,
            _pad: 0,
        };
        dispatch_buffers(ctx, pass, &gemm, bytemuck::bytes_of(&u), &[&xq, &gq, &partial, &maxima], g);
        let taps = shape.kernel[0] * shape.kernel[1];
        split_k::encode_reduce(ctx, pass, &partial, grad_weight, elems, splits, false, taps)
    })
}

/// Halves between the pixels of grad_output gathered per tap: its channels and 8 (as in its copy of its own).
fn gathered_stride(shape: &ConvShape) -> usize {
    shape.out_channels + PIXEL_PAD
}

/// The gather's uniform block `Params`, field for field.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct GatherParams {
    dispatch_width: u32,
    _pad: [u32; 3],
}

/// Encodes grad_output gathered per tap (`shaders/backward/grad_weight_gather.wgsl`) from its copy `gq` (laid out
/// as `l.g`) into a new buffer, kept in `in_flight`.
fn encode_gather(
    ctx: &GpuContext,
    shape: &ConvShape,
    l: &Layouts,
    gq: &wgpu::Buffer,
    pass: &mut wgpu::ComputePass<'_>,
    in_flight: &mut InFlight,
) -> Result<wgpu::Buffer> {
    ctx.scoped(|| {
        let gathered = in_flight.keep(ctx.pool.get(&ctx.device, l.gathered_bytes(shape) as u64, STORAGE));
        let module = ctx.module_with(GATHER_SHADER_NAME, || GATHER_SHADER.to_string())?;
        let [h, w] = shape.in_hw;
        let values = [
            ("GH", l.g.padded[0]),
            ("GW", l.g.padded[1]),
            ("SRC_Q", l.g.pixel_stride / 4),
            ("DST_Q", gathered_stride(shape) / 4),
            ("REAL", shape.batch * h * w),
            ("TAP_PIXELS", l.tap_pixels),
        ];
        let consts: Vec<(&str, f64)> =
            shape_constants(shape, false).into_iter().chain(values.iter().map(|&(k, v)| (k, v as f64))).collect();
        let key = format!("grad_weight gather {:?} {consts:?}", ctx.options().shader_checks);
        let pipeline = ctx.pipeline(key, &module, &consts)?;
        let quads = shape.kernel[0] * shape.kernel[1] * l.tap_pixels * gathered_stride(shape) / 4;
        let g = grid(ctx, quads.div_ceil(GATHER_WORKGROUP_SIZE));
        let u = GatherParams { dispatch_width: g.0, _pad: [0; 3] };
        dispatch_buffers(ctx, pass, &pipeline, bytemuck::bytes_of(&u), &[gq, &gathered], g);
        Ok(gathered)
    })
}

/// This kernel's shaders for validation (`gpu::shader_sources`): every tile and the gather (the copies' shader is
/// the forward's).
pub(crate) fn shader_variants() -> Vec<crate::gpu::ShaderVariant> {
    let tiles = NHWC_GW_TILES.iter().map(|t| (SHADER_NAME, t.name(), t.source()));
    tiles.chain([(GATHER_SHADER_NAME, GATHER_SHADER_NAME.to_string(), GATHER_SHADER.to_string())]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_cover_every_block_in_whole_workgroups() {
        // Every workgroup size of the tiles (2, 4 and 8 subgroups).
        for subs in [2, 4, 8] {
            for blocks in [1, 7, 64, 1000, 1 << 19] {
                for per_split in [1, 3, 4, 9, 12, 30] {
                    for max_splits in [1, 5, 64, 100_000] {
                        let at = format!("{subs} subgroups, {blocks} blocks, {per_split} jobs, {max_splits} splits");
                        let (s, chunk) = splits(blocks, per_split, subs, max_splits);
                        assert!(s * chunk >= blocks, "{at}: {s} x {chunk}");
                        assert_eq!((s * per_split) % subs, 0, "{at}");
                        // At most one workgroup's rounding past the cap.
                        assert!(s <= max_splits.max(1).next_multiple_of(subs), "{at}: {s}");
                    }
                }
            }
        }
    }

    /// What the shader and the reduction compute, in f64, index for index (every load checked against its
    /// copy's length, every partial sum of a real tap written exactly once), with the copies laid out as `l` says:
    /// grad_weight as [ic][oc][kh][kw].
    fn emulate(
        tile: &NhwcGwTile,
        l: &Layouts,
        shape: &ConvShape,
        x: &[f64],
        gy: &[f64],
        max_splits: usize,
    ) -> Vec<f64> {
        let (xq, gq) = (nhwc_copy::emulate(&l.x, shape.batch, x), nhwc_copy::emulate(&l.g, shape.batch, gy));
        let (cin, cout, [k_h, k_w], [s_h, s_w], [d_h, d_w]) =
            (shape.in_channels, shape.out_channels, shape.kernel, shape.stride, shape.dilation);
        let (wm, wn, tp, subs) = (tile.wm as usize, tile.wn as usize, tile.taps as usize, tile.subs as usize);
        let (csx, mut csg, [gh, gw], wb, in_h) =
            (l.x.pixel_stride, l.g.pixel_stride, l.g.padded, (l.wq / 16).max(1), shape.in_hw[0]);
        let taps = k_h * k_w;
        let elems = cin * cout * taps;
        let blocks = l.blocks(shape);
        assert_eq!(l.gathered(), tile.gathered);
        // Gathered: grad_output per tap as the gather shader writes it (zeros past x's pixels, NaN in the pads, never
        // read), every read of the copy checked against its length.
        let real = shape.batch * in_h * shape.in_hw[1];
        let (gq, g_step) = match l.gathered() {
            false => (gq, s_w),
            true => {
                let dst = gathered_stride(shape);
                let mut out = vec![f64::NAN; l.gathered_bytes(shape) as usize / 2];
                for tap in 0..taps {
                    for p in 0..l.tap_pixels {
                        for c in 0..cout {
                            out[(tap * l.tap_pixels + p) * dst + c] = match p < real {
                                false => 0.0,
                                true => {
                                    let (j, row, n) =
                                        (p % shape.in_hw[1], (p / shape.in_hw[1]) % in_h, p / (in_h * shape.in_hw[1]));
                                    let src =
                                        (n * gh + row * s_h + (tap / k_w) * d_h) * gw + j * s_w + (tap % k_w) * d_w;
                                    gq[src * csg + c]
                                }
                            };
                        }
                    }
                }
                csg = dst;
                (out, 1)
            }
        };
        let per_split = tile.jobs_per_split(shape);
        let (splits, chunk) = splits(blocks, per_split, subs, max_splits);
        let workgroups = splits * per_split / subs;
        let (zero_x, zero_g, trash) = (
            shape.batch * l.x.padded[0] * l.x.padded[1],
            if l.gathered() { real } else { shape.batch * gh * gw },
            splits * elems,
        );
        let mut partial = vec![f64::NAN; splits * elems + cin * cout];
        let mut written = vec![0u32; splits * elems];
        let (n_tiles, m_tiles, tap_groups) = (cout / wn, cin / wm, taps.div_ceil(tp));
        for job in 0..workgroups * subs {
            let oc0 = (job % n_tiles) * wn;
            let ic0 = ((job / n_tiles) % m_tiles) * wm;
            let tg = (job / (n_tiles * m_tiles)) % tap_groups;
            let split = job / (n_tiles * m_tiles * tap_groups);
            let tap: Vec<usize> = (0..tp).map(|k| tg * tp + k).collect();
            let off: Vec<usize> = tap
                .iter()
                .map(|&t| {
                    let at = if t < taps { t } else { 0 };
                    match l.gathered() {
                        true => at * l.tap_pixels,
                        false => (at / k_w) * d_h * gw + (at % k_w) * d_w,
                    }
                })
                .collect();
            let mut acc = vec![0.0; tp * wm * wn];
            for s in 0..chunk {
                let b = split * chunk + s;
                let live = b < blocks;
                let (r, jb) = (b / wb, b % wb);
                let (i, n) = (r % in_h, r / in_h);
                let xa = if live { b * 16 } else { zero_x } * csx + ic0;
                let g0 = match (live, l.gathered()) {
                    (false, _) => zero_g,
                    (true, true) => b * 16,
                    (true, false) => (n * gh + i * s_h) * gw + jb * 16 * s_w,
                };
                for (k, &o) in off.iter().enumerate() {
                    let gb = (g0 + if live { o } else { 0 }) * csg + oc0;
                    for p in 0..16 {
                        for m in 0..wm {
                            // A column-major (stride CSX), B row-major (stride G_STEP * CSG).
                            let a = xq[xa + m + p * csx];
                            for c in 0..wn {
                                acc[(k * wm + m) * wn + c] += a * gq[gb + p * g_step * csg + c];
                            }
                        }
                    }
                }
            }
            for (k, &t) in tap.iter().enumerate() {
                let base = if t < taps { (split * taps + t) * cin * cout } else { trash };
                for m in 0..wm {
                    for c in 0..wn {
                        let at = base + (ic0 + m) * cout + oc0 + c;
                        partial[at] = acc[(k * wm + m) * wn + c];
                        if t < taps {
                            written[at] += 1;
                        }
                    }
                }
            }
        }
        assert!(
            written.iter().all(|&w| w == 1),
            "{tile:?} {shape:?}: a partial sum written {:?} times",
            written.iter().find(|&&w| w != 1)
        );
        // The reduction with TAP_MAJOR = taps: grad_weight index i = (ic * cout + oc) * taps + tap.
        (0..elems)
            .map(|i| {
                let at = (i % taps) * (elems / taps) + i / taps;
                (0..splits).map(|s| partial[s * elems + at]).sum()
            })
            .collect()
    }

    /// grad_weight from its definition, in f64: [ic][oc][kh][kw].
    fn reference(shape: &ConvShape, x: &[f64], gy: &[f64]) -> Vec<f64> {
        let (cin, cout, [k_h, k_w]) = (shape.in_channels, shape.out_channels, shape.kernel);
        let ([h, w], [oh_n, ow_n]) = (shape.in_hw, shape.out_hw);
        let mut gw = vec![0.0; cin * cout * k_h * k_w];
        for n in 0..shape.batch {
            for ic in 0..cin {
                for oc in 0..cout {
                    for kh in 0..k_h {
                        for kw in 0..k_w {
                            let mut sum = 0.0;
                            for i in 0..h {
                                let oh =
                                    (i * shape.stride[0] + kh * shape.dilation[0]) as i64 - shape.padding[0] as i64;
                                if oh < 0 || oh >= oh_n as i64 {
                                    continue;
                                }
                                for j in 0..w {
                                    let ow =
                                        (j * shape.stride[1] + kw * shape.dilation[1]) as i64 - shape.padding[1] as i64;
                                    if ow < 0 || ow >= ow_n as i64 {
                                        continue;
                                    }
                                    sum += x[((n * cin + ic) * h + i) * w + j]
                                        * gy[((n * cout + oc) * oh_n + oh as usize) * ow_n + ow as usize];
                                }
                            }
                            gw[((ic * cout + oc) * k_h + kh) * k_w + kw] += sum;
                        }
                    }
                }
            }
        }
        gw
    }

    #[test]
    fn the_emulated_kernel_computes_grad_weight_on_every_option() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(46);
        // (batch, cin, cout, in_hw, kernel, stride, padding, output_padding, dilation): stride 1 and strided, padding
        // beyond the kernel's reach, output padding, rows that are not whole blocks, a kernel of 4 x 4 taps (no tap
        // group of 3 divides it) and of 1 x 1.
        type Case = (usize, usize, usize, [usize; 2], [usize; 2], [usize; 2], [usize; 2], [usize; 2], [usize; 2]);
        let cases: [Case; 7] = [
            (2, 32, 32, [5, 20], [3, 3], [1, 1], [0, 0], [0, 0], [1, 1]),
            (1, 32, 64, [4, 17], [3, 5], [2, 3], [1, 2], [1, 2], [2, 1]),
            (2, 32, 32, [3, 33], [3, 3], [5, 5], [1, 1], [0, 0], [2, 2]),
            (1, 64, 32, [4, 8], [4, 4], [2, 2], [1, 1], [0, 0], [1, 1]),
            (1, 16, 16, [8, 16], [3, 7], [1, 1], [4, 3], [0, 0], [1, 1]),
            (2, 16, 32, [2, 9], [1, 1], [1, 1], [0, 0], [0, 0], [1, 1]),
            (1, 32, 32, [6, 40], [2, 3], [3, 2], [0, 5], [2, 1], [1, 3]),
        ];
        for (batch, cin, cout, hw, kernel, stride, padding, output_padding, dilation) in cases {
            let hw2 = |v: [usize; 2]| [v[0] as i64, v[1] as i64];
            let params = crate::ConvTranspose2dOptions::default()
                .stride(hw2(stride))
                .padding(hw2(padding))
                .output_padding(hw2(output_padding))
                .dilation(hw2(dilation));
            let shape = params.resolve(&[batch, cin, hw[0], hw[1]], &[cin, cout, kernel[0], kernel[1]], None).unwrap();
            let x: Vec<f64> = (0..batch * cin * hw[0] * hw[1]).map(|_| rng.random_range(-1.0..1.0)).collect();
            let gy: Vec<f64> =
                (0..batch * cout * shape.out_hw[0] * shape.out_hw[1]).map(|_| rng.random_range(-1.0..1.0)).collect();
            let want = reference(&shape, &x, &gy);
            for tile in NHWC_GW_TILES.iter().filter(|t| t.plan(&shape, 1 << 30).is_ok()) {
                // Few splits (long chunks, blocks past the end) and many (one block each, whole workgroups of zeros).
                for max_splits in [3, 1 << 20] {
                    let got = emulate(tile, &Layouts::of(&shape, tile.gathered), &shape, &x, &gy, max_splits);
                    let diff: f64 = got.iter().zip(&want).map(|(g, w)| (g - w) * (g - w)).sum();
                    let err = (diff / want.iter().map(|w| w * w).sum::<f64>()).sqrt();
                    assert!(err < 1e-12, "{tile:?} {shape:?} max_splits {max_splits}: {err:e}");
                }
            }
        }
    }

    #[test]
    fn grad_inputs_copy_of_grad_output_serves_as_this_kernels_own() {
        use crate::gpu::backward::grad_input::GradInputKernel;
        use crate::gpu::forward::coop_nhwc::{self, TILES};
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(47);
        // Stride-1 shapes with an equivalent transposed convolution (grad_input's padded-NHWC kernel runs it):
        // rows of whole blocks and not, padding, dilation, kernels wide and narrow, 32 and 64 channels.
        // (batch, cin, cout, in_hw, kernel, padding, dilation)
        type Case = (usize, usize, usize, [usize; 2], [usize; 2], [usize; 2], [usize; 2]);
        let cases: [Case; 6] = [
            (2, 32, 32, [5, 32], [3, 3], [0, 0], [1, 1]),
            (1, 32, 32, [4, 20], [3, 7], [1, 3], [1, 1]),
            (2, 64, 32, [3, 17], [3, 5], [1, 2], [1, 1]),
            (1, 32, 64, [6, 16], [2, 3], [1, 0], [2, 3]),
            (1, 16, 16, [7, 9], [1, 1], [0, 0], [1, 1]),
            (1, 32, 32, [3, 48], [3, 3], [2, 2], [1, 1]),
        ];
        let mut wider = 0;
        for (batch, cin, cout, hw, kernel, padding, dilation) in cases {
            let hw2 = |v: [usize; 2]| [v[0] as i64, v[1] as i64];
            let params = crate::ConvTranspose2dOptions::default().padding(hw2(padding)).dilation(hw2(dilation));
            let shape = params.resolve(&[batch, cin, hw[0], hw[1]], &[cin, cout, kernel[0], kernel[1]], None).unwrap();
            let t = GradInputKernel::transposed_problem(&shape).expect("stride 1: a transposed convolution");
            let x: Vec<f64> = (0..batch * cin * hw[0] * hw[1]).map(|_| rng.random_range(-1.0..1.0)).collect();
            let gy: Vec<f64> =
                (0..batch * cout * shape.out_hw[0] * shape.out_hw[1]).map(|_| rng.random_range(-1.0..1.0)).collect();
            let want = reference(&shape, &x, &gy);
            let own = Layouts::of(&shape, false);
            let needs = grad_output_needs(&shape);
            // Every padded-NHWC tile (direct and staged, whose own copies differ in pixel stride).
            for nhwc in TILES {
                let layout = coop_nhwc::shared_copy_layout(&t, nhwc, &needs);
                assert!(own.takes(&layout, batch, needs.tail_pixels), "{nhwc:?} {shape:?}: {layout:?}");
                wider += (layout.padded != own.g.padded) as usize;
                for tile in NHWC_GW_TILES.iter().filter(|t| t.plan(&shape, 1 << 30).is_ok()) {
                    // The same sums in the same order as from the kernel's own copy: the same values.
                    let own = Layouts::of(&shape, tile.gathered);
                    let shared = Layouts { g: layout.clone(), ..Layouts::of(&shape, tile.gathered) };
                    assert!(own.takes(&layout, batch, needs.tail_pixels), "{tile:?} {shape:?}");
                    let got = emulate(tile, &shared, &shape, &x, &gy, 1 << 20);
                    assert_eq!(got, emulate(tile, &own, &shape, &x, &gy, 1 << 20), "{tile:?} {nhwc:?} {shape:?}");
                    let diff: f64 = got.iter().zip(&want).map(|(g, w)| (g - w) * (g - w)).sum();
                    let err = (diff / want.iter().map(|w| w * w).sum::<f64>()).sqrt();
                    assert!(err < 1e-12, "{tile:?} {nhwc:?} {shape:?}: {err:e}");
                }
            }
        }
        // The forward's alignment widens most shared images past this kernel's own.
        assert!(wider >= cases.len(), "{wider} wider shared copies");
    }

    #[test]
    fn a_copy_it_cannot_read_as_its_own_is_not_taken() {
        let shape = crate::ConvTranspose2dOptions::default().padding(1).resolve(&[2, 32, 4, 20], &[32, 32, 3, 3], None);
        let shape = shape.unwrap();
        let l = Layouts::of(&shape, false);
        let tail = grad_output_needs(&shape).tail_pixels;
        assert!(l.takes(&l.g, 2, tail));
        let mut narrower = l.g.clone();
        narrower.padded[1] -= 1;
        let mut shifted = l.g.clone();
        shifted.before = [0, 0];
        let mut cropped = l.g.clone();
        cropped.copied[1] = 1..shape.out_hw[1];
        let mut no_tail = l.g.clone();
        no_tail.tail_rows = 0;
        let mut unaligned = l.g.clone();
        unaligned.pixel_stride = 36;
        for (what, copy) in [("narrower", narrower), ("shifted", shifted), ("cropped", cropped), ("no tail", no_tail)]
            .into_iter()
            .chain([("unaligned", unaligned)])
        {
            assert!(!l.takes(&copy, 2, tail), "{what}");
        }
    }

    #[test]
    fn the_layouts_hold_every_read_of_every_tap() {
        // kb81-like: stride 5, padding 1, dilation 2; a row of 100 pixels rounds to 112.
        let params = crate::ConvTranspose2dOptions::default().stride(5).padding(1).dilation(2);
        let shape = params.resolve(&[2, 32, 9, 100], &[32, 64, 3, 3], None).unwrap();
        let l = Layouts::of(&shape, false);
        assert_eq!(l.wq, 112);
        let [gh, gw] = l.g.padded;
        // The last x pixel's last tap, in the padded grad_output image.
        assert_eq!(8 * 5 + 2 * 2, gh - 1);
        assert_eq!(111 * 5 + 2 * 2, gw - 1);
        // A block's B fragment spans 15 strides: the zero tail row holds one.
        assert!(15 * shape.stride[1] < gw);
    }
}
