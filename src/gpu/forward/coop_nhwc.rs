//! The padded-NHWC cooperative-matrix kernel (precision `fast` on tensor cores, any stride), `shaders/forward/coop_nhwc.wgsl`
//! (its opening comment explains the form): the input is first rewritten as scaled f16 in padded NHWC order
//! (`shaders/forward/coop_nhwc_input.wgsl`) and the weight as scaled f16 [phase][tap][ic][oc] (`shaders/forward/coop_nhwc_weights.wgsl`),
//! so that every tensor-core operand loads straight from storage (or, for the staged-rows tiles, the input's from
//! rows the workgroup copies into workgroup memory); then one dispatch per stride phase and output chunk. One
//! module per [`NhwcTile`].

use crate::dtype::DType;
use crate::error::{ConvtError, Result};
use crate::gpu::absmax;
use crate::gpu::context::GpuContext;
use crate::gpu::kernel::{
    axis_phase, check_index_range, dispatch_buffers, grid, AxisPhase, GridParams, Operands, Weight,
};
use crate::gpu::memory::{GpuTensor, InFlight, PooledBuffer, STORAGE};
use crate::gpu::nhwc_copy::{self, CopyLayout, CopyNeeds, PrepBlock, SharedCopy};
use crate::gpu::wgsl::coop::{self, SUBGROUP};
use crate::gpu::wgsl::operands::{declare, Access, Io};
use crate::gpu::wgsl::scale::{scaled_module, scaled_prologue, MAXIMA_BINDING, SCALE_FUNCTIONS, SLOTS_01};
use crate::gpu::wgsl::{self, fill_markers, with_shape_prelude, without_section};
use crate::params::ConvShape;

pub const SHADER_NAME: &str = "forward/coop_nhwc.wgsl";
pub const SHADER: &str = include_str!("../../../shaders/forward/coop_nhwc.wgsl");
pub const WEIGHT_SHADER_NAME: &str = "forward/coop_nhwc_weights.wgsl";
/// `shaders/forward/coop_nhwc_weights.wgsl` behind the shape's constants (and the f16 it enables).
pub const WEIGHT_SHADER: &str = concat!("enable f16;\n", with_shape_prelude!("forward/coop_nhwc_weights.wgsl"));
/// Workgroup size of the two preparation shaders.
const PREP_WORKGROUP_SIZE: usize = 256;

/// Halves after each row that tensor-core fragments load from (the padded input's pixels for the direct tiles, the
/// packed weight's rows, the staged rows), so that the 16 rows of a load do not fall in the same L1 banks
/// (`shaders/forward/coop_nhwc.wgsl`).
const ROW_PAD: usize = 8;

/// Halves between the padded input's pixels: padded for the direct tiles, whose A fragments load from them; not
/// for the staged ones, which read them only in the stage's copy (4 halves a lane) and pad their staged rows
/// instead (the pad was 11% of the input copy's writes).
fn pixel_stride(shape: &ConvShape, tile: &NhwcTile) -> usize {
    shape.in_channels + if tile.staged { 0 } else { ROW_PAD }
}

/// Halves between the packed weight's rows (one input channel of one tap).
fn weight_row(shape: &ConvShape) -> usize {
    shape.out_channels + ROW_PAD
}

/// Input pixels the staged rows hold beyond the tile's BM: the shifts of the taps staged together
/// (`TAPS_PER_STAGE` taps of a kernel row, D_W pixels apart, fit within it).
const STAGE_HALO: u32 = 16;
/// The most input channels staged at once (wider inputs are staged in slices of this many or fewer).
/// 32 rather than 64: the staged rows' workgroup memory counts against the multiprocessor's (docs/PERFORMANCE.md:
/// with 64 channels a 128 x 128 tile's rows take 37 KiB, and such tiles ran one workgroup per multiprocessor).
const MAX_STAGE_C: usize = 32;

/// A workgroup of SG_M x SG_N subgroups, each computing WM pixels x WN output channels; `staged`: the A operand
/// loaded from input rows staged in workgroup memory per kernel row instead of straight from storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NhwcTile {
    pub wm: u32,
    pub wn: u32,
    pub sg_m: u32,
    pub sg_n: u32,
    pub staged: bool,
}

pub(crate) const fn tile(wm: u32, wn: u32, sg_m: u32, sg_n: u32) -> NhwcTile {
    NhwcTile { wm, wn, sg_m, sg_n, staged: false }
}

pub(crate) const fn staged(wm: u32, wn: u32, sg_m: u32, sg_n: u32) -> NhwcTile {
    NhwcTile { wm, wn, sg_m, sg_n, staged: true }
}

/// Input channels staged at once: all of them up to `MAX_STAGE_C`, else the largest of `MAX_STAGE_C`, its halves
/// down to 16 that divides them (the tiles take multiples of 16).
fn stage_channels(shape: &ConvShape) -> usize {
    let c = shape.in_channels;
    if c <= MAX_STAGE_C {
        return c;
    }
    let mut s = MAX_STAGE_C;
    while s > 16 && !c.is_multiple_of(s) {
        s /= 2;
    }
    s
}

/// Every tile the selector may choose: those of its heuristic ([`crate::gpu::select`]) and 128 x 64 of two 64 x 64
/// subgroups, which the tuner chose for 64 output channels on 3x3 kernels; 128 x 64 of four 64 x 64 subgroups,
/// 64 x 128 and the staged 128 x 64 of 64 x 32 subgroups never won and were removed.
/// Larger subgroup blocks (96 x 64, 128 x 32) measured slower or no faster, smaller ones (32 x 64, 32 x 32, 64 x
/// 16) slower (docs/PERFORMANCE.md). Tiles of 8 subgroups of 64 x 32 (128 x 128, 256 x 64) ran one workgroup per
/// multiprocessor and slower than 128 x 64; 128 x 64 with staged rows (fewer registers, but more workgroup memory)
/// slower than direct. Since the staged loop loads each stage ahead, the staged 128 x 64 of 64 x 64 subgroups and
/// the direct tiles measure close, and which is faster depends on the shape: for 64 output channels the tuner
/// chooses per shape.
pub const TILES: &[NhwcTile] = &[
    tile(64, 64, 2, 1),
    tile(64, 32, 2, 1),
    tile(64, 32, 4, 1),
    tile(64, 32, 2, 2),
    staged(64, 64, 2, 1),
    staged(64, 64, 2, 2),
];

/// The taps of a kernel row (per stride phase) from which a 128 x 64 tile stages its input rows by default
/// ([`crate::gpu::select`]): the staged rows save all but one in that many of A's loads from storage, at the price of the
/// stage's copy and barriers; between 3 taps, where the direct tile measured faster, and 7, where the staged one
/// did.
pub(crate) const STAGED_MIN_ROW_TAPS: usize = 5;

impl NhwcTile {
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
        let rows = if self.staged { "_rows" } else { "" };
        format!("coopnhwc_{}x{}_{}x{}{rows}", self.bm(), self.bn(), self.wm, self.wn)
    }
    /// Input pixels the staged rows hold.
    fn stage_pixels(&self) -> u32 {
        self.bm() + STAGE_HALO
    }
    /// The most quads (4 channels) of a stage one invocation copies: the staged rows' capacity at the widest stage.
    fn stage_loads(&self) -> u32 {
        (self.stage_pixels() * MAX_STAGE_C as u32 / 4).div_ceil(self.threads())
    }
    /// Halves of the staged rows (`a_stage`): their pixels, each `ROW_PAD` halves longer than its channels, at the
    /// widest stage.
    fn stage_halves(&self) -> u32 {
        self.stage_pixels() * (MAX_STAGE_C + ROW_PAD) as u32
    }
    /// The epilogue's scratch (`coop::scratch`): 16 padded columns of 32 f32 per subgroup, and its choice of
    /// direct rows (`direct_rows`, 16 bytes: see `source`); for staged tiles the staged rows (`stage_halves`).
    pub fn workgroup_bytes(&self) -> u32 {
        let stage = if self.staged { self.stage_halves() * 2 } else { 0 };
        coop::scratch_bytes(self.sg_m * self.sg_n, EPILOGUE_RUN) + 16 + stage
    }
    /// The generator's layout rules: whole 16 x 16 matrices, and 32-pixel runs for the epilogue's lanes.
    pub fn is_consistent(&self) -> bool {
        self.wm.is_multiple_of(32) && self.wn.is_multiple_of(16) && self.sg_m * self.sg_n > 0
    }
    pub fn fits(&self, limits: &wgpu::Limits) -> bool {
        self.is_consistent()
            && self.workgroup_bytes() <= limits.max_compute_workgroup_storage_size
            && self.threads() <= limits.max_compute_invocations_per_workgroup
    }

    /// Whether this tile computes `shape` here: one group, input channels a multiple of 16 and output channels of
    /// the tile's width, whole samples per binding, and the padded f16 input within one binding.
    pub fn check(&self, ctx: &GpuContext, shape: &ConvShape) -> Result<()> {
        let unfit =
            |why: String| Err(ConvtError::InvalidArgument(format!("{} does not take this shape: {why}", self.name())));
        if shape.groups != 1 {
            return unfit(format!("{} groups (it needs one group)", shape.groups));
        }
        // Sizes within the kernels' 32-bit indexing first: the geometry below is then exact (the byte counts in
        // u128).
        check_index_range(shape)?;
        if !shape.in_channels.is_multiple_of(16) || !shape.out_channels.is_multiple_of(self.bn() as usize) {
            return unfit(format!(
                "{} input and {} output channels (it needs multiples of 16 and {})",
                shape.in_channels,
                shape.out_channels,
                self.bn()
            ));
        }
        let g = Geometry::of(shape);
        let limit = ctx.binding_limit() as u128;
        let sample_bytes = |channels: usize, hw: [usize; 2]| channels as u128 * hw[0] as u128 * hw[1] as u128 * 4;
        if sample_bytes(shape.out_channels, shape.out_hw) > limit
            || sample_bytes(shape.in_channels, shape.in_hw) > limit
            || g.padded_bytes(shape, self) > limit
        {
            return unfit("a sample, or the padded f16 input, exceeds one storage binding".into());
        }
        Ok(())
    }

    /// The shader for tensors of `io`: `shaders/forward/coop_nhwc.wgsl` with this tile's constants and generated
    /// parts.
    pub(crate) fn source(&self, io: Io) -> String {
        let (mi, nj) = (self.wm / 16, self.wn / 16);
        // A from the staged rows or from the padded input itself: rows padded either way (STAGE_STRIDE is STAGE_C +
        // ROW_PAD, a direct tile's PIXEL_STRIDE C_IN + ROW_PAD).
        let (a_src, a_stride) = if self.staged { ("a_stage", "STAGE_STRIDE") } else { ("xp", "PIXEL_STRIDE") };
        let mut math = String::new();
        for i in 0..mi {
            math += &format!(
                "            let a{i} = coopLoadT<coop_mat16x16<f16, A>>(&{a_src}[a_base + {}u * {a_stride} + c0], {a_stride});\n",
                16 * i
            );
        }
        for j in 0..nj {
            math += &format!(
                "            let b{j} = coopLoadT<coop_mat16x16<f16, B>>(&wp[b_base + c0 * W_ROW + {}u], W_ROW);\n",
                16 * j
            );
        }
        let (decl, products) = coop::products(mi, nj);
        math += &products;
        let epi = self.epilogue(io.input == DType::F32 && io.output == DType::F32);
        // Workgroup memory: every variable a multiple of 16 bytes (the word `direct_rows` as an array of 4), so
        // that the arrays cooperative matrices load from and store to (the staged rows, the epilogue's scratch)
        // start 16-byte aligned in whatever order the driver lays the variables out. NVIDIA's driver was seen not
        // to align them itself: in a prototype (docs/PERFORMANCE.md) a 4-byte word laid out before the staged
        // rows made every fragment load from them read 4 bytes early.
        let mut header = format!(
            "enable f16;\nenable wgpu_cooperative_matrix;\nconst WM: u32 = {}u;\nconst WN: u32 = {}u;\nconst SG_M: u32 = {}u;\nconst SG_N: u32 = {}u;\nconst BM: u32 = SG_M * WM;\nconst BN: u32 = SG_N * WN;\nconst THREADS: u32 = {SUBGROUP}u * SG_M * SG_N;\n{}",
            self.wm, self.wn, self.sg_m, self.sg_n, coop::scratch(EPILOGUE_RUN)
        ) + "var<workgroup> direct_rows: array<u32, 4>; // [0]: the epilogue's fragment rows stored straight to the output\n";
        if self.staged {
            header += &format!(
                "override TAPS_PER_STAGE: u32; // taps of a kernel row staged together\noverride STAGE_C: u32;        // input channels staged at once\noverride STAGE_QUADS: u32;    // STAGE_C / 4: the copy's vec4<f16> per staged pixel\noverride STAGE_STRIDE: u32;   // halves between staged pixels (STAGE_C + 8)\nvar<workgroup> a_stage: array<f16, {}u>; // {} pixels x up to {} channels, padded\nconst STAGE_LOADS: u32 = {}u; // quads of a stage per invocation, at most\n",
                self.stage_halves(),
                self.stage_pixels(),
                MAX_STAGE_C,
                self.stage_loads()
            );
        }
        // The sections this tile kind keeps lose their marker lines, the others go whole.
        let (keep, drop) = if self.staged { ("STAGED", "DIRECT") } else { ("DIRECT", "STAGED") };
        let body = if self.staged {
            fill_markers(SHADER, &[("STAGE_FNS_BEGIN", ""), ("STAGE_FNS_END", "")])
        } else {
            without_section(SHADER, "STAGE_FNS")
        };
        let (begin, end) = (format!("{keep}_BEGIN"), format!("{keep}_END"));
        let body = fill_markers(&without_section(&body, drop), &[(&begin, ""), (&end, "")]);
        // Staged tiles read the padded input only in the stage's copy, 4 halves at a time.
        let body = if self.staged { body.replace(INPUT_BINDING, STAGED_INPUT_BINDING) } else { body };
        let body = fill_markers(
            &body,
            &[
                ("MODULE", &scaled_module(MAXIMA_BINDING)),
                ("PROLOGUE", &scaled_prologue(SLOTS_01)),
                ("ACC_DECL", &decl),
                ("MATH", &math),
                ("EPILOGUE", &epi),
            ],
        );
        let operands =
            declare(io.storage, &[io.operand("bias", 3, Access::Read), io.operand("out", 4, Access::ReadWrite)]);
        wgsl::module(&[&header, &operands, &body])
    }

    /// The epilogue (the shader's opening comment), per fragment row i (16 pixels) of the subgroups: where the
    /// row is a direct run (`direct_run`) in every subgroup row of the workgroup, each 16 x 16 accumulator of it
    /// straight to the output, unscaled by a matrix-times-scalar, the bias added as a matrix (a load of stride 0
    /// repeats the bias row in all 16 rows); else through the subgroup's scratch (`scratch_rounds`): two
    /// neighbouring rows that both need it as one 32-pixel run, a row alone as a 16-pixel run. The choice depends
    /// on the workgroup's tile only: naga wants cooperative-matrix operations (and barriers) in workgroup-uniform
    /// control flow. Without `direct` (a half-precision output, which an f32 accumulator cannot be stored to as a
    /// matrix) every pair of rows goes through the scratch.
    fn epilogue(&self, direct: bool) -> String {
        let (mi, nj) = (self.wm / 16, self.wn / 16);
        let mut e = String::from(
            "    let plane = OUT_H * OUT_W;\n    let factors = unscale_factors();\n    let scratch = sg * C_LD * 16u;\n",
        );
        if !direct {
            e += "    if (lid == 0u) {\n        direct_rows[0] = 0u;\n    }\n";
            for i in (0..mi).step_by(2) {
                e += &format!("    {{\n{}    }}\n", scratch_rounds(&[i, i + 1], nj));
            }
            return e;
        }
        // Bit i: fragment row i is a direct run in every subgroup row. Every invocation computes the same bits;
        // they pass through workgroup memory because naga takes only a `workgroupUniformLoad` (not the workgroup
        // id) for workgroup-uniform.
        let bits: Vec<String> = (0..mi)
            .map(|i| {
                let rows: Vec<String> =
                    (0..self.sg_m).map(|r| format!("direct_run(m_tile + {}u)", r * self.wm + 16 * i)).collect();
                format!("select(0u, {}u, {})", 1u32 << i, rows.join(" && "))
            })
            .collect();
        e += &format!(
            "    if (lid == 0u) {{\n        direct_rows[0] = {};\n    }}\n    let direct = workgroupUniformLoad(&direct_rows[0]);\n",
            bits.join(" | ")
        );
        let is_direct = |i: u32| format!("(direct & {}u) != 0u", 1u32 << i);
        // Pairs of fragment rows (WM is a multiple of 32: `is_consistent`).
        for i in (0..mi).step_by(2) {
            for r in [i, i + 1] {
                e += &format!("    if ({}) {{\n        let at = out_pixel(m0 + {}u).index;\n", is_direct(r), 16 * r);
                for j in 0..nj {
                    // naga 30 needs every coopStore argument bound to a `let` (its SPIR-V writer panics otherwise).
                    e += &format!(
                        "        {{
            let scaled = acc_{r}_{j} * factors.x * factors.y;
            let off = at + (n0 + {c}u) * plane;
            let st = plane;
            if (HAS_BIAS) {{
                let t = scaled + coopLoadT<coop_mat16x16<f32, C>>(&bias[n0 + {c}u], 0u);
                coopStore(t, &out[off], st);
            }} else {{
                let t = scaled;
                coopStore(t, &out[off], st);
            }}
        }}
",
                        c = 16 * j
                    );
                }
                e += "    }\n";
            }
            let (a, b) = (is_direct(i), is_direct(i + 1));
            e += &format!("    if (!({a}) && !({b})) {{\n{}", scratch_rounds(&[i, i + 1], nj));
            e += &format!("    }} else if (!({a})) {{\n{}", scratch_rounds(&[i], nj));
            e += &format!("    }} else if (!({b})) {{\n{}    }}\n", scratch_rounds(&[i + 1], nj));
        }
        e
    }
}

/// The scratch path of the epilogue for consecutive fragment rows `rows` (one or two: a run of 16 or 32 pixels):
/// one `coop::scratch_round` per 16-channel column.
fn scratch_rounds(rows: &[u32], nj: u32) -> String {
    let run = 16 * rows.len() as u32;
    let mut e = format!(
        "        let run_pixel = lane % {run}u;\n        let run_channel = lane / {run}u;\n        let px = out_pixel(m0 + {}u + run_pixel);\n",
        16 * rows[0]
    );
    for j in 0..nj {
        let store = format!("store(px, n0 + {}u + c, c_tile[scratch + c * C_LD + run_pixel]);", 16 * j);
        e += &coop::scratch_round(rows, j, &store, "        ");
    }
    e
}

/// Pixels per run of the epilogue's scratch: two 16-pixel fragment rows. Runs of one row only measured slower
/// (docs/PERFORMANCE.md).
const EPILOGUE_RUN: u32 = coop::FULL_RUN;

/// The padded input's binding in `shaders/forward/coop_nhwc.wgsl`, and as staged tiles declare it.
const INPUT_BINDING: &str = "@group(0) @binding(1) var<storage, read> xp: array<f16>;";
const STAGED_INPUT_BINDING: &str = "@group(0) @binding(1) var<storage, read> xp4: array<vec4<f16>>;";

/// The weight's preparation shader for a weight of `io`'s dtype, with the scale functions it calls (the input's
/// copy: src/gpu/nhwc_copy.rs).
pub(crate) fn weight_shader(io: Io) -> String {
    let operands = declare(io.storage, &[io.operand("w", 1, Access::Read)]);
    wgsl::module(&[&operands, WEIGHT_SHADER, SCALE_FUNCTIONS])
}

/// One stride phase of the padded-NHWC form: its outputs (rows R_H + S_H*i, i < count[0]; columns likewise), its
/// taps as the pack shader flips them (packed tap a is kernel row last[0] - a*kstep[0] and reads input row
/// i + first[0] + a*istep[0]), and its place in the packed weight.
#[derive(Debug, Clone, Copy)]
struct Phase {
    r: [usize; 2],
    count: [usize; 2],
    taps: [usize; 2],
    last: [usize; 2],
    kstep: [usize; 2],
    istep: [usize; 2],
    first: [i64; 2],
    weight_offset: usize,
}

impl Phase {
    fn has_taps(&self) -> bool {
        self.taps[0] * self.taps[1] > 0
    }
    /// Input pixels between an output pixel and the one its packed tap (0, 0) reads, in the padded images.
    fn base(&self, g: &Geometry) -> usize {
        if !self.has_taps() {
            return 0;
        }
        let along = |a: usize| (self.first[a] + g.before[a] as i64) as usize;
        along(0) * g.padded[1] + along(1)
    }
    /// The farthest input pixel a tap reads past the output pixel, in the padded images.
    fn reach(&self, g: &Geometry) -> usize {
        if !self.has_taps() {
            return 0;
        }
        self.base(g) + (self.taps[0] - 1) * self.istep[0] * g.padded[1] + (self.taps[1] - 1) * self.istep[1]
    }
}

/// The padded input's layout for a shape: the margin before each image (top, left), the padded image's size (room
/// for every phase's outputs, and for what they read but for what runs into the next row's or sample's margin),
/// the input rows and columns copied into it (from the first some output reads to the last: padding may crop the
/// others, which then set no scale), the stride phases with outputs, and the rows of zeros after the last sample
/// that its last outputs read; and the pixels' stride where another reader of the copy sets it.
#[derive(Debug, Clone)]
struct Geometry {
    before: [usize; 2],
    padded: [usize; 2],
    copied: [std::ops::Range<usize>; 2],
    phases: Vec<Phase>,
    tail_rows: usize,
    stride: Option<usize>,
}

impl Geometry {
    /// The geometry this kernel needs alone.
    fn of(shape: &ConvShape) -> Geometry {
        Geometry::with(shape, &CopyNeeds::default())
    }

    /// The geometry this kernel needs, with room for what a second reader of the input's copy `needs` (padded images
    /// at least its size, at least its zero pixels after the last sample, its pixel stride): wider padded images
    /// and more tail rows only add zeros the kernel reads past, and any stride of whole 8-half groups serves both
    /// tile kinds. Exact for the shapes `check_index_range` passes (every size below 2^31); `check` refuses the
    /// others before anything uses the geometry.
    fn with(shape: &ConvShape, needs: &CopyNeeds) -> Geometry {
        // Phases past the output's size have no pixel (a stride may be far larger than the output).
        let axis = |a: usize| {
            (0..shape.stride[a].min(shape.out_hw[a]))
                .map(|r| {
                    let (k, s, p, d) = (shape.kernel[a], shape.stride[a], shape.padding[a], shape.dilation[a]);
                    (r, axis_phase(r, shape.out_hw[a], k, s, p, d))
                })
                .filter(|(_, p)| p.count > 0)
                .collect::<Vec<_>>()
        };
        let (rows, cols) = (axis(0), axis(1));
        let mut before = [0; 2];
        let mut padded = [1; 2];
        let mut copied = [0..0, 0..0];
        for (a, phases) in [&rows, &cols].into_iter().enumerate() {
            for (_, p) in phases.iter().filter(|(_, p)| p.taps > 0) {
                before[a] = before[a].max((-first_offset(p)).max(0) as usize);
            }
            // Along the axis: the input positions some output reads, from the smallest first offset (a phase's
            // first output reads there) to `needed` in padded positions (its last output reads (count - 1) + its
            // largest offset (off) past the margin), and the outputs of the longest phase.
            let mut needed = 0;
            let mut first_read = i64::MAX;
            for (_, p) in phases {
                if p.taps > 0 {
                    needed = needed.max((p.count as i64 + p.off + before[a] as i64) as usize);
                    first_read = first_read.min(first_offset(p));
                }
                padded[a] = padded[a].max(p.count);
            }
            // Tight: the reads of a row's last outputs may run past its end into the next row's margin, which is
            // zeros (and those of a sample's last rows into the next sample's top margin), as long as they run no
            // farther than the margin and every input position some output reads lies within the row. A 128 x 256
            // input under a 3 x 5 kernel then computes its 130 x 260 outputs over 130 x 260 padded pixels instead
            // of 132 x 264.
            let end = shape.in_hw[a].min(needed.saturating_sub(before[a]));
            copied[a] = (first_read.max(0) as usize).min(end)..end;
            padded[a] = padded[a].max(before[a] + end).max(needed.saturating_sub(before[a])).max(needs.padded[a]);
        }
        // Where one phase covers the output (stride 1) and its planes allow aligned stores: a few more padded
        // columns keep each padded row's pixels congruent mod 8 with their output indices, so that every 16-pixel
        // fragment within an output row may be stored straight to the output (`direct_run`: coopStore wants
        // 16-byte alignment) and fills whole 32-byte sectors; up to 3 padded rows more per sample keep every
        // sample's fragments 16-byte aligned. Rows rounded so measured faster than rows rounded less (only some
        // rows' fragments aligned); rounding each sample to whole sectors too measured slower
        // (docs/PERFORMANCE.md).
        let [out_h, out_w] = shape.out_hw;
        if shape.stride == [1, 1] && (out_h * out_w).is_multiple_of(4) {
            padded[1] = out_w + (padded[1] - out_w).next_multiple_of(8);
            while !(padded[0] * padded[1] - out_h * out_w).is_multiple_of(4) {
                padded[0] += 1; // at most 3 times: W_P is congruent with OUT_W
            }
        }
        let mut phases = Vec::new();
        let mut weight_offset = 0;
        for (rh, h) in &rows {
            for (rw, w) in &cols {
                let (taps_h, taps_w) = (h.taps, w.taps);
                phases.push(Phase {
                    r: [*rh, *rw],
                    count: [h.count, w.count],
                    taps: [taps_h, taps_w],
                    last: [
                        h.k0 + taps_h.max(1).saturating_sub(1) * h.kstep,
                        w.k0 + taps_w.max(1).saturating_sub(1) * w.kstep,
                    ],
                    kstep: [h.kstep, w.kstep],
                    istep: [h.istep, w.istep],
                    first: [first_offset(h), first_offset(w)],
                    weight_offset,
                });
                weight_offset += taps_h * taps_w * shape.in_channels * weight_row(shape);
            }
        }
        let mut g = Geometry { before, padded, copied, phases, tail_rows: 0, stride: needs.pixel_stride };
        // The padded rows after the last sample that its last outputs read (all zeros: the top margin of a
        // sample that is not there, and where the reads of that margin's last row run past its end, the next
        // row's left margin).
        let sample = g.sample_pixels();
        g.tail_rows = g
            .phases
            .iter()
            .filter(|p| p.has_taps())
            .map(|p| {
                let last_read = (p.count[0] - 1) * g.padded[1] + p.count[1] - 1 + p.reach(&g);
                (last_read + 1).saturating_sub(sample).div_ceil(g.padded[1])
            })
            .max()
            .unwrap_or(0)
            .max(needs.tail_pixels.div_ceil(g.padded[1]));
        g
    }

    /// Halves between the padded input's pixels: the second reader's where it sets them, else the tile's.
    fn pixel_stride(&self, shape: &ConvShape, tile: &NhwcTile) -> usize {
        self.stride.unwrap_or_else(|| pixel_stride(shape, tile))
    }

    /// Padded pixels of one sample.
    fn sample_pixels(&self) -> usize {
        self.padded[0] * self.padded[1]
    }

    /// The input's copy (src/gpu/nhwc_copy.rs) for `tile`.
    fn copy_layout(&self, shape: &ConvShape, tile: &NhwcTile) -> CopyLayout {
        CopyLayout {
            channels: shape.in_channels,
            hw: shape.in_hw,
            before: self.before,
            padded: self.padded,
            copied: self.copied.clone(),
            pixel_stride: self.pixel_stride(shape, tile),
            tail_rows: self.tail_rows,
        }
    }

    /// Bytes of the padded f16 input, with room after the last sample for its tail rows and for the reads of the
    /// last tile's pixels past it (computed, never stored).
    fn padded_bytes(&self, shape: &ConvShape, tile: &NhwcTile) -> u128 {
        let reach = self.phases.iter().map(|p| p.reach(self)).max().unwrap_or(0);
        let after = (tile.bm() as usize + reach).max(self.tail_rows * self.padded[1]);
        let pixels = shape.batch as u128 * self.sample_pixels() as u128 + after as u128;
        // Whole vec4<f16>s: shaders/forward/coop_nhwc_input.wgsl writes the pixels 4 halves (8 bytes) at a time.
        (pixels * self.pixel_stride(shape, tile) as u128 * 2).next_multiple_of(8)
    }

    /// Bytes of the packed f16 weight ([`packed_weight_bytes`]).
    fn weight_bytes(&self, shape: &ConvShape) -> u64 {
        packed_weight_bytes(shape)
    }
}

/// Halves of the packed f16 weight: every tap of the kernel, once (each belongs to one phase), in padded rows
/// (saturating, for sizes no binding holds).
fn packed_weight_halves(shape: &ConvShape) -> u64 {
    [shape.kernel[0], shape.kernel[1], shape.in_channels, weight_row(shape)]
        .into_iter()
        .fold(1u64, |acc, v| acc.saturating_mul(v as u64))
}

/// The input's copy for `tile` on `shape` laid out also for a second reader that `needs` it, as
/// [`encode_sharing`] makes it (for that reader's tests).
#[cfg(test)]
pub(crate) fn shared_copy_layout(shape: &ConvShape, tile: &NhwcTile, needs: &CopyNeeds) -> CopyLayout {
    Geometry::with(shape, needs).copy_layout(shape, tile)
}

/// Bytes of the packed f16 weight, whole words.
pub(crate) fn packed_weight_bytes(shape: &ConvShape) -> u64 {
    packed_weight_halves(shape).saturating_mul(2).next_multiple_of(4)
}

/// The input offset of a phase's first packed tap (taps flipped): the smallest, off - (taps - 1) * istep.
fn first_offset(p: &AxisPhase) -> i64 {
    p.off - (p.taps.max(1) as i64 - 1) * p.istep as i64
}

/// The kernel's override constants for a shape, per stride phase with outputs (the first phase's for
/// inspection: `Strategy::shader`).
pub fn constants(tile: &NhwcTile, shape: &ConvShape, has_bias: bool) -> Vec<(&'static str, f64)> {
    let g = Geometry::of(shape);
    g.phases.first().map(|p| phase_constants(tile, shape, &g, p, has_bias)).unwrap_or_default()
}

fn phase_constants(
    tile: &NhwcTile,
    shape: &ConvShape,
    g: &Geometry,
    p: &Phase,
    has_bias: bool,
) -> Vec<(&'static str, f64)> {
    // A phase without taps runs no K step (K_H = 0); K_W stays 1, so that nothing divides by zero.
    let taps = if p.has_taps() { p.taps } else { [0, 1] };
    let mut values = vec![
        ("C_IN", shape.in_channels),
        ("C_OUT", shape.out_channels),
        ("K_H", taps[0]),
        ("K_W", taps[1]),
        ("D_H", p.istep[0]),
        ("D_W", p.istep[1]),
        ("H_P", g.padded[0]),
        ("W_P", g.padded[1]),
        ("OUT_H", shape.out_hw[0]),
        ("OUT_W", shape.out_hw[1]),
        ("HAS_BIAS", has_bias as usize),
        ("S_H", shape.stride[0]),
        ("S_W", shape.stride[1]),
        ("R_H", p.r[0]),
        ("R_W", p.r[1]),
        ("PH_H", p.count[0]),
        ("PH_W", p.count[1]),
        ("BASE", p.base(g)),
        ("W_OFF", p.weight_offset),
        ("PIXEL_STRIDE", g.pixel_stride(shape, tile)),
        ("W_ROW", weight_row(shape)),
    ];
    if tile.staged {
        let c = stage_channels(shape);
        // Taps D_W pixels apart: as many as keep their shifts within the halo.
        values.extend([
            ("TAPS_PER_STAGE", STAGE_HALO as usize / p.istep[1].max(1) + 1),
            ("STAGE_C", c),
            ("STAGE_QUADS", c / 4),
            ("STAGE_STRIDE", c + ROW_PAD),
        ]);
    }
    override_values(&values)
}

/// Override constants as the pipeline takes them.
fn override_values(values: &[(&'static str, usize)]) -> Vec<(&'static str, f64)> {
    values.iter().map(|&(k, v)| (k, v as f64)).collect()
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

/// Where the context keeps a shape's guess of its input's scale exponent (`nhwc_copy::guess_key`).
fn scale_guess_key(shape: &ConvShape) -> String {
    nhwc_copy::guess_key("coop_nhwc input", shape)
}

/// The kernel's operands, prepared on the GPU: both tensors' largest magnitudes (which set their power-of-two
/// scales, slot 0 the input's, slot 1 the weight's), the padded f16 NHWC input and the packed f16 weight.
struct Prepared {
    maxima: wgpu::Buffer,
    /// The input's fix-up dispatches (x, y, z workgroups per input chunk): zero where the guessed scale held.
    #[cfg_attr(not(test), allow(dead_code))] // the preparation test reads it: which path ran
    fixup_counts: wgpu::Buffer,
    input: wgpu::Buffer,
    weight: wgpu::Buffer,
}

/// Encodes the weight as f16 [phase][tap][ic][oc] at the scale slot 1 of `maxima` sets, each phase's taps flipped:
/// one dispatch per phase with taps.
fn encode_weight(
    ctx: &GpuContext,
    shape: &ConvShape,
    g: &Geometry,
    weight: &GpuTensor,
    maxima: &wgpu::Buffer,
    pass: &mut wgpu::ComputePass<'_>,
) -> Result<PooledBuffer> {
    let (cin, cout) = (shape.in_channels, shape.out_channels);
    ctx.scoped(|| {
        let wpk = ctx.pool.get(&ctx.device, g.weight_bytes(shape), STORAGE);
        let io = Io::of(ctx, weight.dtype());
        let module = ctx.module_with(&format!("{WEIGHT_SHADER_NAME} {}", io.key()), || weight_shader(io))?;
        let w = weight.single_buffer("weight", ctx)?;
        for p in g.phases.iter().filter(|p| p.has_taps()) {
            let consts = override_values(&[
                ("C_IN", cin),
                ("C_OUT", cout),
                ("K_H", shape.kernel[0]),
                ("K_W", shape.kernel[1]),
                ("T_H", p.taps[0]),
                ("T_W", p.taps[1]),
                ("LAST_H", p.last[0]),
                ("LAST_W", p.last[1]),
                ("KSTEP_H", p.kstep[0]),
                ("KSTEP_W", p.kstep[1]),
                ("W_OFF", p.weight_offset),
                ("W_ROW", weight_row(shape)),
            ]);
            let key = format!("pack_f16 {} {:?} {consts:?}", io.key(), ctx.options().shader_checks);
            let pipeline = ctx.pipeline(key, &module, &consts)?;
            let wgrid = grid(ctx, (p.taps[0] * p.taps[1] * cin * cout).div_ceil(PREP_WORKGROUP_SIZE));
            let u = GridParams::of(wgrid);
            dispatch_buffers(ctx, pass, &pipeline, bytemuck::bytes_of(&u), &[w, &wpk, maxima], wgrid);
        }

        Ok(wpk)
    })
}

/// Encodes the preparation of the weight for `tile` on `shape` into `pass` ([`crate::gpu::plan`]): the packed f16
/// weight, and the maxima buffer whose slot 1 holds its largest magnitude.
pub(crate) fn prepare_weight(
    ctx: &GpuContext,
    shape: &ConvShape,
    tile: &NhwcTile,
    weight: &GpuTensor,
    pass: &mut wgpu::ComputePass<'_>,
) -> Result<(PooledBuffer, Option<wgpu::Buffer>)> {
    tile.check(ctx, shape)?;
    let g = Geometry::of(shape);
    let maxima = absmax::encode_slots(ctx, &[(1, weight)], &[], pass)?;
    Ok((encode_weight(ctx, shape, &g, weight, &maxima, pass)?, Some(maxima)))
}

/// Encodes the preparation of both operands into `pass`, the input's copy in blocks of `block`
/// (`PrepBlock::of`); the scratch buffers go into `in_flight`.
#[allow(clippy::too_many_arguments)]
fn encode_preparation(
    ctx: &GpuContext,
    shape: &ConvShape,
    tile: &NhwcTile,
    g: &Geometry,
    block: PrepBlock,
    input: &GpuTensor,
    weight: Weight<'_>,
    pass: &mut wgpu::ComputePass<'_>,
    in_flight: &mut InFlight,
) -> Result<Prepared> {
    // Slot 1: the weight's largest magnitude (found when it was prepared, or here); slot 0, the input's, comes
    // from the input's first pass.
    let maxima = match weight.prepared {
        Some(p) => absmax::encode_slots(ctx, &[], &[(1, p.maxima(&tile.name())?)], pass)?,
        None => absmax::encode_slots(ctx, &[(1, weight.tensor)], &[], pass)?,
    };
    ctx.scoped(|| {
        // The input, padded, as f16 NHWC at the scale the last call of this shape found, checked and copied again
        // where that differs (`nhwc_copy::encode_at_guess`); its largest magnitude lands in slot 0. Within one
        // binding (`check`), so the size fits u64.
        let padded_bytes = g.padded_bytes(shape, tile);
        let xp = in_flight.keep(ctx.pool.get(&ctx.device, padded_bytes as u64, STORAGE));
        let layout = g.copy_layout(shape, tile);
        let counts =
            nhwc_copy::encode_at_guess(ctx, input, &layout, block, &xp, &maxima, 0, scale_guess_key(shape), pass)?;

        let wpk = match weight.prepared {
            Some(p) => (*p.buffer).clone(),
            None => in_flight.keep(encode_weight(ctx, shape, g, weight.tensor, &maxima, pass)?),
        };
        Ok(Prepared { maxima, fixup_counts: counts, input: xp, weight: wpk })
    })
}

/// Encodes the preparation of both operands and the kernel over every output chunk into `pass`; the scratch
/// buffers go into `in_flight`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode(
    ctx: &GpuContext,
    shape: &ConvShape,
    tile: &NhwcTile,
    input: &GpuTensor,
    weight: Weight<'_>,
    bias: Option<&GpuTensor>,
    output: &GpuTensor,
    pass: &mut wgpu::ComputePass<'_>,
    in_flight: &mut InFlight,
) -> Result<()> {
    encode_sharing(ctx, shape, tile, input, weight, bias, output, None, pass, in_flight).map(|_| ())
}

/// [`encode`], with the input's copy laid out also for a second reader that `needs` it, and handed back for it
/// (the input's largest magnitude in slot 0 of its maxima) where it fits one binding so laid out; `None` where
/// nothing asked for it, it did not fit, or there is nothing to copy.
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode_sharing(
    ctx: &GpuContext,
    shape: &ConvShape,
    tile: &NhwcTile,
    input: &GpuTensor,
    weight: Weight<'_>,
    bias: Option<&GpuTensor>,
    output: &GpuTensor,
    needs: Option<&CopyNeeds>,
    pass: &mut wgpu::ComputePass<'_>,
    in_flight: &mut InFlight,
) -> Result<Option<SharedCopy>> {
    if !tile.fits(&ctx.device.limits()) || !ctx.has_coop_f16() {
        return Err(ConvtError::InvalidArgument(format!("kernel {} does not run on this adapter", tile.name())));
    }
    tile.check(ctx, shape)?;
    if shape.batch == 0 || shape.out_hw[0] * shape.out_hw[1] == 0 {
        return Ok(None);
    }
    // The copy laid out for both readers where it still fits one binding (`check` passed the kernel's own).
    let shared =
        needs.map(|n| Geometry::with(shape, n)).filter(|g| g.padded_bytes(shape, tile) <= ctx.binding_limit() as u128);
    let sharing = shared.is_some();
    let g = shared.unwrap_or_else(|| Geometry::of(shape));
    let cout = shape.out_channels;
    let block = PrepBlock::of(shape.in_channels, g.padded_bytes(shape, tile));
    let Prepared { maxima, input: xp, weight: wpk, .. } =
        encode_preparation(ctx, shape, tile, &g, block, input, weight, pass, in_flight)?;
    let copy = sharing.then(|| SharedCopy {
        buffer: xp.clone(),
        layout: g.copy_layout(shape, tile),
        maxima: maxima.clone(),
        slot: 0,
    });

    ctx.scoped(|| {
        // The products, one dispatch per phase and output chunk (whole samples).
        let name = tile.name();
        let io = Io::new(ctx, input.dtype(), output.dtype());
        let module = ctx.module_with(&format!("{name} {}", io.key()), || tile.source(io))?;
        let ops = Operands::new(ctx, &wpk, bias)?;
        let n_tiles = cout / tile.bn() as usize;
        for p in &g.phases {
            let consts = phase_constants(tile, shape, &g, p, bias.is_some());
            let key = format!("{name} {} {:?} {consts:?}", io.key(), ctx.options().shader_checks);
            let pipeline = ctx.pipeline(key, &module, &consts)?;
            for c in output.chunks() {
                let (first, samples) = (c.first_plane / cout, c.planes / cout);
                let (begin, end) = (first * g.sample_pixels(), (first + samples) * g.sample_pixels());
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
                let mut buffers = ops.buffers(&xp, &c);
                buffers.push(&maxima);
                dispatch_buffers(ctx, pass, &pipeline, bytemuck::bytes_of(&u), &buffers, mgrid);
            }
        }
        Ok(copy)
    })
}

/// This kernel's shaders for validation (`gpu::shader_sources`): every tile and the three preparation shaders.
pub(crate) fn shader_variants() -> Vec<crate::gpu::ShaderVariant> {
    let mut v: Vec<crate::gpu::ShaderVariant> = Vec::new();
    for io in Io::variants() {
        let key = io.key();
        v.extend(TILES.iter().map(|t| (SHADER_NAME, format!("{} {key}", t.name()), t.source(io))));
        v.push((
            nhwc_copy::INPUT_SHADER_NAME,
            format!("{} {key}", nhwc_copy::INPUT_SHADER_NAME),
            nhwc_copy::input_shader(io),
        ));
        v.push((WEIGHT_SHADER_NAME, format!("{WEIGHT_SHADER_NAME} {key}"), weight_shader(io)));
    }
    v.push((
        nhwc_copy::SCALE_CHECK_SHADER_NAME,
        nhwc_copy::SCALE_CHECK_SHADER_NAME.to_string(),
        nhwc_copy::scale_check_shader(),
    ));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::gpu::context::GpuOptions;
    use crate::gpu::memory::read_back;
    use crate::ConvTranspose2dOptions;
    use rand::{Rng, SeedableRng};

    /// The operands as the preparation shaders lay them out for `tile` (coop_nhwc_input.wgsl, coop_nhwc_weights.wgsl),
    /// unscaled, in f64: the padded NHWC input (zero margins, zero tail rows) and the packed weight. Halves no shader
    /// writes (past each pixel's channels and each weight row's, past the tail rows) are NaN, so that a read of one
    /// shows. The input laid out as `g` says.
    fn expected_operands(
        tile: &NhwcTile,
        g: &Geometry,
        shape: &ConvShape,
        x: &[f32],
        w: &[f32],
    ) -> (Vec<f64>, Vec<f64>) {
        let (cin, cout, [kh_n, kw_n]) = (shape.in_channels, shape.out_channels, shape.kernel);
        let [h, wd] = shape.in_hw;
        let [hp, wp] = g.padded;
        let (ps, row) = (g.pixel_stride(shape, tile), weight_row(shape));
        let pixels = (g.padded_bytes(shape, tile) / 2) as usize / ps;
        let mut xp = vec![f64::NAN; pixels * ps];
        for (i, v) in xp.iter_mut().enumerate().take((shape.batch * hp + g.tail_rows) * wp * ps) {
            if i % ps < cin {
                *v = 0.0;
            }
        }
        for n in 0..shape.batch {
            for r in 0..hp {
                for col in 0..wp {
                    // In the margin before the input, the position wraps past any range.
                    let (ih, iw) = (r.wrapping_sub(g.before[0]), col.wrapping_sub(g.before[1]));
                    if g.copied[0].contains(&ih) && g.copied[1].contains(&iw) {
                        for c in 0..cin {
                            xp[((n * hp + r) * wp + col) * ps + c] = x[((n * cin + c) * h + ih) * wd + iw] as f64;
                        }
                    }
                }
            }
        }
        let mut wpk = vec![f64::NAN; packed_weight_halves(shape) as usize];
        for p in g.phases.iter().filter(|p| p.has_taps()) {
            for i in 0..p.taps[0] * p.taps[1] * cin * cout {
                let (oc, ic, t) = (i % cout, (i / cout) % cin, i / (cout * cin));
                let kh = p.last[0] - (t / p.taps[1]) * p.kstep[0];
                let kw = p.last[1] - (t % p.taps[1]) * p.kstep[1];
                let at = p.weight_offset + (t * cin + ic) * row + oc;
                assert!(wpk[at].is_nan(), "packed value {i} written twice");
                wpk[at] = w[((ic * cout + oc) * kh_n + kh) * kw_n + kw] as f64;
            }
        }
        (xp, wpk)
    }

    /// What the three shaders compute, in f64 on the CPU, index for index: the padded NHWC input
    /// (coop_nhwc_input.wgsl), each phase's packed weight (coop_nhwc_weights.wgsl) and each phase's products and stores
    /// (coop_nhwc.wgsl, one pixel at a time, every read checked against the padded buffer's length). Each output
    /// element must be stored exactly once. For a staged tile, the staged rows' bounds as the shader computes them
    /// (each stage's pixels against the tile's capacity and the padded input, channel slices dividing the input
    /// channels, every fragment row within its stage) and A read through the stage's row and slice; that index
    /// equals the direct one, so what this adds over the direct emulation is the bounds. Also the epilogue's
    /// choice of fragments stored straight to the output (`direct_run`), checked and counted (the second value).
    /// The input laid out as `g` says.
    fn emulate(
        tile: &NhwcTile,
        g: &Geometry,
        shape: &ConvShape,
        x: &[f32],
        w: &[f32],
        bias: &[f32],
    ) -> (Vec<f64>, usize) {
        let (cin, cout) = (shape.in_channels, shape.out_channels);
        let [hp, wp] = g.padded;
        let (ps, row) = (g.pixel_stride(shape, tile), weight_row(shape));
        let (xp, wpk) = expected_operands(tile, g, shape, x, w);
        let pixels = xp.len() / ps;
        let [ho, wo] = shape.out_hw;
        let mut out = vec![f64::NAN; shape.batch * cout * ho * wo];
        let mut directs = 0;
        for p in &g.phases {
            let c = phase_constants(tile, shape, g, p, true);
            let k = |name: &str| c.iter().find(|(n, _)| *n == name).unwrap().1 as usize;
            let (k_h, k_w, d_h, d_w, base, w_off) = (k("K_H"), k("K_W"), k("D_H"), k("D_W"), k("BASE"), k("W_OFF"));
            let bm = tile.bm() as usize;
            // The staged rows of the tile at m_tile for taps first_tap.. of kernel row a: (first pixel, pixels).
            let stage = |m_tile: usize, a: usize, first_tap: usize| {
                let taps = k("TAPS_PER_STAGE").min(k_w - first_tap);
                (m_tile + base + a * d_h * wp + first_tap * d_w, bm + (taps - 1) * d_w)
            };
            if tile.staged {
                let (sc, stride) = (k("STAGE_C"), k("STAGE_STRIDE"));
                assert!(cin.is_multiple_of(sc) && sc % 4 == 0 && stride == sc + ROW_PAD && sc <= MAX_STAGE_C);
                for m_tile in (0..shape.batch * hp * wp).step_by(bm) {
                    for a in 0..k_h {
                        for first_tap in (0..k_w).step_by(k("TAPS_PER_STAGE")) {
                            let (first, n) = stage(m_tile, a, first_tap);
                            assert!(n <= tile.stage_pixels() as usize, "stage of {n} pixels");
                            assert!(first + n <= pixels, "stage copy past the padded input: {first} + {n} of {pixels}");
                        }
                    }
                }
            }
            // Input pixel and channel of A for output pixel m, tap, input channel ic.
            let a_value = |m: usize, tap: usize, ic: usize| -> f64 {
                let (a, b) = (tap / k_w, tap % k_w);
                if !tile.staged {
                    return xp[(m + base + a * d_h * wp + b * d_w) * ps + ic];
                }
                let (m_tile, tpc, sc) = (m / bm * bm, k("TAPS_PER_STAGE"), k("STAGE_C"));
                let first_tap = b / tpc * tpc;
                let (first, n) = stage(m_tile, a, first_tap);
                let row = (b - first_tap) * d_w + (m - m_tile); // a_base / STAGE_STRIDE + the fragment's row
                assert!(row < n, "staged row {row} of {n}");
                let (cc, c) = (ic / sc * sc, ic % sc); // the slice staged, the channel in it
                xp[(first + row) * ps + cc + c]
            };
            // The output index of phase pixel m (before the channel's plane), as `out_pixel`.
            let out_index = |m: usize| {
                let (n, i, j) = (m / (hp * wp), (m % (hp * wp)) / wp, m % wp);
                ((n * cout) * ho + k("R_H") + k("S_H") * i) * wo + k("R_W") + k("S_W") * j
            };
            // `direct_run` (one dispatch: m_end is every sample's pixels): where it holds for a fragment's first
            // pixel, its 16 pixels must be stored at 16 consecutive outputs, 16-byte aligned, as coopStore does.
            let m_end = shape.batch * hp * wp;
            for m in (0..m_end).step_by(16) {
                let (i, j) = ((m % (hp * wp)) / wp, m % wp);
                let direct = k("S_W") == 1
                    && (ho * wo) % 4 == 0
                    && m + 16 <= m_end
                    && i < k("PH_H")
                    && j + 16 <= k("PH_W")
                    && out_index(m) % 4 == 0;
                if direct {
                    directs += 1;
                    for d in 0..16 {
                        let (i, j) = (((m + d) % (hp * wp)) / wp, (m + d) % wp);
                        assert!(i < k("PH_H") && j < k("PH_W") && out_index(m + d) == out_index(m) + d, "run at {m}");
                    }
                }
            }
            for m in 0..shape.batch * hp * wp {
                let (n, i, j) = (m / (hp * wp), (m % (hp * wp)) / wp, m % wp);
                if i >= k("PH_H") || j >= k("PH_W") {
                    continue;
                }
                for oc in 0..cout {
                    let mut sum = bias[oc] as f64;
                    for tap in 0..k_h * k_w {
                        let a = m + base + (tap / k_w) * d_h * wp + (tap % k_w) * d_w;
                        assert!(a < pixels, "read past the padded input: pixel {a} of {pixels}");
                        for ic in 0..cin {
                            sum += a_value(m, tap, ic) * wpk[w_off + (tap * cin + ic) * row + oc];
                        }
                    }
                    let o = ((n * cout + oc) * ho + k("R_H") + k("S_H") * i) * wo + k("R_W") + k("S_W") * j;
                    assert!(out[o].is_nan(), "output {o} stored twice");
                    out[o] = sum;
                }
            }
        }
        (out, directs)
    }

    #[test]
    fn preparation_shaders_lay_out_the_operands() {
        // The two preparation shaders run wherever the adapter has f16 (Mesa's software driver too), unlike the
        // kernel, which needs tensor cores. Their output against `expected_operands` (which the CPU emulation
        // checks against the float64 reference): every value a shader must write, scaled by its tensor's power of
        // two and rounded to f16; the margins zero. The pool hands the shaders buffers filled with NaN first,
        // so a value not written shows.
        let base = GpuContext::new().expect("the GPU tests need an adapter");
        if !base.has_f16() {
            eprintln!("{}: no SHADER_F16, so the preparation shaders cannot run here", base.adapter_info().name);
            return;
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        // in_hw, kernel, stride, padding, output_padding, dilation; input and output channels; magnitude of x;
        // a staged tile (padded pixels C_IN halves apart) or a direct one (C_IN + 8); a cap on the bytes of a
        // binding (the input in chunks)
        type Case = ([[i64; 2]; 6], [usize; 2], f32, bool, Option<u64>);
        let cases: &[Case] = &[
            ([[5, 7], [3, 5], [1, 1], [1, 4], [0, 0], [2, 1]], [16, 32], 1e3, false, None),
            ([[4, 6], [4, 4], [2, 2], [1, 1], [0, 0], [1, 1]], [32, 64], 1e-6, true, None),
            ([[3, 5], [2, 3], [4, 2], [0, 3], [3, 1], [2, 4]], [48, 32], 1.5, false, None),
            // Padding crops input rows and columns: no output reads the first input row, the first two columns
            // or the last column. The input's first and last values, in cropped columns, are 1e4 times the others'
            // magnitude: the copy neither writes them nor takes them for the scale.
            ([[6, 7], [1, 1], [1, 1], [1, 2], [0, 0], [1, 1]], [16, 32], 40.0, true, None),
            // 64 and 128 input channels: 16 x 64 blocks (`PrepBlock`), a padded row of 22 pixels (a partial block).
            ([[3, 20], [2, 3], [1, 1], [0, 0], [0, 0], [1, 1]], [64, 64], 3.0, false, None),
            ([[2, 5], [3, 3], [2, 1], [1, 0], [1, 0], [1, 2]], [128, 64], 0.5, true, None),
            // The input in two chunks of one sample (a binding holds 1.5 samples): one dispatch each, the tail rows
            // written by the second.
            ([[20, 20], [3, 3], [1, 1], [0, 0], [0, 0], [1, 1]], [64, 32], 2.0, true, Some(153_600)),
        ];
        let staged_tile = *TILES.iter().find(|t| t.staged).unwrap();
        let mut tail_rows = 0;
        for &([in_hw, kernel, stride, padding, output_padding, dilation], [cin, cout], magnitude, staged, limit) in
            cases
        {
            let (in_hw, kernel) = (in_hw.map(|v| v as usize), kernel.map(|v| v as usize));
            let params =
                ConvTranspose2dOptions { stride, padding, output_padding, dilation, groups: 1, ..Default::default() };
            let batch = 2;
            let shape =
                params.resolve(&[batch, cin, in_hw[0], in_hw[1]], &[cin, cout, kernel[0], kernel[1]], None).unwrap();
            let tile = if staged { staged_tile } else { TILES[0] };
            let capped;
            let ctx = match limit {
                None => &base,
                Some(bytes) => {
                    let options = GpuOptions { max_binding_bytes: Some(bytes), ..GpuOptions::from_env().unwrap() };
                    capped = GpuContext::with_options(options).unwrap();
                    &capped
                }
            };
            let g = Geometry::of(&shape);
            tail_rows += g.tail_rows;
            // Three calls of the shape: the first pass scales by the last call's exponent (the first call's guess,
            // then the exponent found), so the second call keeps its first pass's copy, the third (2^20 smaller)
            // is rewritten by the fix-up, and the first is kept or rewritten as its magnitude meets the first
            // guess or not (1.5 does; the others do not).
            let mut guess_before = nhwc_copy::FIRST_SCALE_GUESS;
            // 64-channel blocks go 2 per workgroup only above 512 MiB of padded input (`PrepBlock::of`): the second
            // call takes that path here.
            let chosen = PrepBlock::of(cin, g.padded_bytes(&shape, &tile));
            for (call, m) in [magnitude, magnitude, magnitude * 2f32.powi(-20)].into_iter().enumerate() {
                let block =
                    if call == 1 && chosen.channels == 64 { PrepBlock { per_workgroup: 2, ..chosen } } else { chosen };
                let mut draw =
                    |n: usize, m: f32| (0..n).map(|_| m * rng.random_range(-1.0f32..1.0)).collect::<Vec<_>>();
                let (mut x, w) =
                    (draw(batch * cin * in_hw[0] * in_hw[1], m), draw(cin * cout * kernel[0] * kernel[1], 0.1));
                if kernel == [1, 1] {
                    x[0] = 1e4 * m;
                    *x.last_mut().unwrap() = 1e4 * m;
                }
                // The input in each dtype the copy reads: f16 where the magnitude suits it, bf16, f32.
                let dtype = match call {
                    0 if (1e-3..=1e3).contains(&m) => DType::F16,
                    1 => DType::BF16,
                    _ => DType::F32,
                };
                x.iter_mut().for_each(|v| *v = dtype.round(*v));
                let upload = |dims: Vec<usize>, data: &[f32], dtype: DType| {
                    let t = crate::Tensor::new(dims, data.to_vec()).unwrap().to_dtype(dtype);
                    GpuTensor::upload(ctx, &t).unwrap()
                };
                let (xg, wg) = (upload(shape.input_dims(), &x, dtype), upload(shape.weight_dims(), &w, DType::F32));
                assert_eq!(xg.chunks().len(), if limit.is_some() { 2 } else { 1 }, "input chunks");
                let sizes = [g.padded_bytes(&shape, &tile) as u64, g.weight_bytes(&shape)];
                let poisoned: Vec<_> = sizes.iter().map(|&size| ctx.pool.get(&ctx.device, size, STORAGE)).collect();
                for b in &poisoned {
                    // 0xffff is an f16 NaN.
                    ctx.queue.write_buffer(b, 0, &vec![0xff; b.size() as usize]);
                }
                drop(poisoned); // back to the pool, for the preparation to take
                let created = ctx.pool.stats().0;
                let mut encoder = ctx.device.create_command_encoder(&Default::default());
                let mut in_flight = InFlight::default();
                let prepared = {
                    let mut pass = encoder.begin_compute_pass(&Default::default());
                    encode_preparation(
                        ctx,
                        &shape,
                        &tile,
                        &g,
                        block,
                        &xg,
                        crate::gpu::kernel::Weight { tensor: &wg, prepared: None },
                        &mut pass,
                        &mut in_flight,
                    )
                    .unwrap()
                };
                ctx.queue.submit([encoder.finish()]);
                assert_eq!(ctx.pool.stats().0, created, "the preparation did not take the poisoned buffers");

                let halves = |bytes: Vec<u8>| -> Vec<f64> {
                    bytes.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f64()).collect()
                };
                let read = |b: &wgpu::Buffer| read_back(ctx, (b, 0, b.size()), <[u8]>::to_vec).unwrap();
                let maxima: Vec<u32> = bytemuck::cast_slice(&read(&prepared.maxima)).to_vec();
                let (got_x, got_w) = (halves(read(&prepared.input)), halves(read(&prepared.weight)));
                let (want_x, want_w) = expected_operands(&tile, &Geometry::of(&shape), &shape, &x, &w);
                let guess = read(&ctx.kept_i32(scale_guess_key(&shape), nhwc_copy::FIRST_SCALE_GUESS));
                let counts: Vec<u32> = bytemuck::cast_slice(&read(&prepared.fixup_counts)).to_vec();
                // The input's largest magnitude is that of the values the copy reads (not those in input rows or
                // columns that padding crops: the 1 x 1 case's huge values); the weight's, of all its values.
                let copied: Vec<f32> = want_x.iter().filter(|v| !v.is_nan()).map(|&v| v as f32).collect();
                if kernel == [1, 1] {
                    assert!(copied.iter().all(|v| v.abs() <= m), "a cropped value is in the padded input");
                }
                for (name, got, want, values, slot) in
                    [("input", got_x, want_x, &copied, 0), ("weight", got_w, want_w, &w, 1)]
                {
                    let largest = values.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                    // An f16 input is copied as it is: no maximum, scale 1, no check, no fix-up.
                    if slot == 0 && dtype == DType::F16 {
                        assert_eq!(maxima[0], 0, "an f16 input's maximum is not taken");
                        assert!(counts.iter().all(|&c| c == 0), "no fix-up for an f16 input: {counts:?}");
                        assert_eq!(bytemuck::pod_read_unaligned::<i32>(&guess), guess_before, "the guess is kept");
                        for (i, (g, want)) in got.iter().zip(&want).enumerate().filter(|(_, (_, w))| !w.is_nan()) {
                            assert_eq!(*g, *want, "{shape:?}: f16 input half {i} copied as it is");
                        }
                        continue;
                    }
                    assert_eq!(maxima[slot], largest.to_bits(), "{name}'s largest magnitude");
                    // The scale brings the largest magnitude into [2^14, 2^15) (shaders/common/scale.wgsl).
                    let k = 14 - (largest as f64).log2().floor() as i32;
                    if slot == 0 {
                        assert_eq!(bytemuck::pod_read_unaligned::<i32>(&guess), k, "the next call's guess");
                        // The fix-up dispatches workgroups for every input chunk exactly where the guess missed.
                        assert_eq!(counts.len(), 3 * xg.chunks().len());
                        assert!(
                            counts.chunks(3).all(|c| (c[0] != 0) == (guess_before != k)),
                            "fix-up workgroups {counts:?}, guessed {guess_before}, needed {k}"
                        );
                        guess_before = k;
                    }
                    let scale = 2f64.powi(k);
                    for (i, (g, want)) in got.iter().zip(&want).enumerate().filter(|(_, (_, w))| !w.is_nan()) {
                        let want = want * scale;
                        // Rounding to f16: half an ulp, 2^-11 relative for normal values, 2^-25 for subnormal ones.
                        let bound = want.abs() * 2f64.powi(-11) + 2f64.powi(-25);
                        assert!(
                            (g - want).abs() <= bound,
                            "{shape:?}: {name} half {i}: {g} against {want} ({m:e}, input {dtype})"
                        );
                    }
                }
            }
        }
        assert!(tail_rows > 0, "no case writes tail rows");
    }

    #[test]
    fn padded_images_are_tight_where_the_margins_take_the_overhang() {
        // Reads past a row's end land in the next row's left margin (and past a sample's last row, in the next
        // sample's top margin), so a full transposed convolution (padding 0: margins of kernel - 1) computes
        // exactly its outputs. With padding, the margins shrink and the rows keep room for the reads; at stride
        // 1 the rows round up to the output's row length mod 8 and the samples to its plane mod 4 (aligned
        // stores: 514 x 518 outputs need no more, rows of 1024 outputs go from 1027 to 1032 columns).
        let shape = |in_hw: [usize; 2], kernel: [usize; 2], padding: [i64; 2]| {
            let params = ConvTranspose2dOptions { padding, ..Default::default() };
            params.resolve(&[2, 64, in_hw[0], in_hw[1]], &[64, 64, kernel[0], kernel[1]], None).unwrap()
        };
        for (s, padded, tail_rows) in [
            (shape([128, 256], [3, 5], [0, 0]), [130, 260], 3),     // kb69
            (shape([1024, 1024], [3, 3], [0, 0]), [1026, 1026], 3), // kb57
            (shape([512, 1024], [3, 7], [1, 3]), [513, 1032], 1),   // kb78: margins 1 and 3
            (shape([512, 512], [3, 7], [0, 0]), [514, 518], 3),     // kb65
        ] {
            let g = Geometry::of(&s);
            assert_eq!((g.padded, g.tail_rows), (padded, tail_rows), "{s:?}");
        }
    }

    #[test]
    fn preparation_blocks_fit_the_shaders_tile() {
        // The shader's tile (`TILE_FLOATS`) holds `channels` rows of `pixels + 1` floats.
        const PREP_TILE_FLOATS: usize = 1088;
        for cin in (16..=1024).step_by(16) {
            for padded_bytes in [1 << 20, 1 << 32] {
                let b = PrepBlock::of(cin, padded_bytes);
                assert!(
                    b.channels * (b.pixels + 1) <= PREP_TILE_FLOATS && b.channels.is_multiple_of(4),
                    "{cin}: {b:?}"
                );
            }
        }
        // 64-channel blocks: 4 per workgroup up to the threshold, 2 above it.
        for (bytes, per_workgroup) in
            [(nhwc_copy::PREP_SMALL_INPUT_MAX_BYTES, 4), (nhwc_copy::PREP_SMALL_INPUT_MAX_BYTES + 1, 2)]
        {
            assert_eq!(PrepBlock::of(64, bytes).per_workgroup, per_workgroup, "{bytes} bytes");
        }
        assert!(nhwc_copy::INPUT_SHADER.contains(&format!("const TILE_FLOATS: u32 = {PREP_TILE_FLOATS}u;")));
    }

    #[test]
    fn tiles_meet_the_layout_rules_and_the_defaults_are_candidates() {
        for t in TILES {
            assert!(t.is_consistent() && t.workgroup_bytes() <= 49152, "{t:?}");
            let source = t.source(Io::F32);
            assert!(!source.contains("//#"), "{t:?}");
            // A staged tile reads the padded input only through the staged rows' copy (4 halves at a time).
            assert_eq!(source.contains(STAGED_INPUT_BINDING), t.staged, "{t:?}");
            assert_eq!(source.contains(INPUT_BINDING), !t.staged, "{t:?}");
            assert_eq!(source.contains("a_stage"), t.staged, "{t:?}");
            // Every workgroup variable a multiple of 16 bytes (see `source`), adding up to what the tile declares.
            assert_eq!(coop::workgroup_bytes_aligned(&source, &t.name()), t.workgroup_bytes(), "{t:?}");
        }
        let params = ConvTranspose2dOptions::default();
        // (output channels, kernel width, tiles for f16 outputs, tiles for f32 outputs): f32 outputs take the 64 x 64
        // subgroups without staged rows first where an odd multiple of 64 channels has rows too short to stage.
        for (cout, kernel_w, half_picks, f32_picks) in [
            (16, 3, 0, 0),
            (32, 3, 1, 1),
            (64, 3, 2, 3),
            (64, 7, 3, 3),
            (128, 3, 1, 1),
            (128, 5, 2, 2),
            (192, 3, 2, 3),
            (192, 5, 3, 3),
            (256, 3, 1, 1),
        ] {
            let shape = params.resolve(&[1, 64, 8, 8], &[64, cout, 3, kernel_w], None).unwrap();
            for (dtype, picks) in [(DType::F16, half_picks), (DType::BF16, half_picks), (DType::F32, f32_picks)] {
                let tiles = crate::gpu::select::coop_nhwc_tiles(&shape, dtype);
                assert_eq!(tiles.len(), picks, "{shape:?} {dtype:?}");
                assert!(tiles.iter().all(|t| TILES.contains(t) && shape.out_channels.is_multiple_of(t.bn() as usize)));
                let direct_64x64 = tiles.first().is_some_and(|t| *t == tile(64, 64, 2, 1));
                assert_eq!(
                    direct_64x64,
                    dtype == DType::F32 && picks == 3 && kernel_w < STAGED_MIN_ROW_TAPS,
                    "{shape:?}"
                );
            }
        }
    }

    #[test]
    fn phases_compute_the_transposed_convolution() {
        // Strides 1-5 with kernels smaller and larger than the stride (phases without taps store the bias),
        // dilation sharing a factor with the stride, padding beyond dilation * (kernel - 1), output padding,
        // H != W: the padded-NHWC index math against the float64 reference, with no GPU.
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        // in_hw, kernel, stride, padding, output_padding, dilation
        let cases: &[[[i64; 2]; 6]] = &[
            [[5, 7], [3, 3], [1, 1], [0, 0], [0, 0], [1, 1]],
            [[4, 6], [3, 5], [1, 1], [1, 4], [0, 0], [2, 1]],
            [[7, 5], [3, 3], [1, 1], [3, 0], [0, 0], [1, 1]],
            [[6, 5], [3, 3], [2, 2], [1, 1], [1, 1], [1, 1]],
            [[3, 4], [4, 4], [2, 2], [1, 1], [0, 0], [1, 1]],
            [[5, 4], [3, 5], [2, 3], [1, 2], [0, 0], [2, 1]],
            [[4, 3], [3, 3], [5, 5], [1, 1], [0, 0], [2, 2]],
            [[3, 5], [2, 3], [4, 2], [0, 3], [3, 1], [2, 4]],
            [[2, 3], [1, 1], [3, 2], [0, 0], [2, 0], [1, 1]],
            // A stride far beyond the output (2^31 - 4, the largest the index check lets through here): only the
            // phases that hold outputs are enumerated, so this returns at once.
            [[1, 2], [2, 2], [(1 << 31) - 4, 3], [0, 1], [0, 0], [1, 1]],
            // Staged tiles: taps of a kernel row staged in two parts (D_W = 9: 2 taps within the halo of 16
            // pixels), one at a time (D_W = 17), stages filled to their capacity (D_W = 16: two taps 16 pixels
            // apart; the last case: D_W = 8, three taps), input channels in slices (96: 3 slices of 32).
            [[4, 20], [2, 3], [1, 1], [0, 1], [0, 0], [1, 9]],
            [[3, 40], [1, 3], [1, 1], [0, 0], [0, 0], [1, 17]],
            [[3, 40], [1, 3], [1, 1], [0, 0], [0, 0], [1, 16]],
            [[5, 40], [3, 5], [1, 1], [1, 2], [0, 0], [1, 8]],
            // Output rows of 60 in padded rows of 64: fragments the epilogue stores straight to the output; rows of
            // 26 (a plane of 104): only even rows' fragments start 16-byte aligned.
            [[3, 56], [2, 5], [1, 1], [0, 0], [0, 0], [1, 1]],
            [[4, 22], [1, 5], [1, 1], [0, 0], [0, 0], [1, 1]],
        ];
        // A staged tile that takes the 32 output channels below (the staging is the same at every width; no staged
        // 32-wide tile is a candidate); the cases' dilations 8 and 16 fill its staged rows to their capacity at this
        // halo.
        let staged_tile = &staged(64, 32, 2, 1);
        assert_eq!(STAGE_HALO, 16);
        for (case, &[in_hw, kernel, stride, padding, output_padding, dilation]) in cases.iter().enumerate() {
            let (in_hw, kernel) = (in_hw.map(|v| v as usize), kernel.map(|v| v as usize));
            let params =
                ConvTranspose2dOptions { stride, padding, output_padding, dilation, groups: 1, ..Default::default() };
            let (cin, cout, batch) = (if case == 13 { 96 } else { 16 }, 32, 2);
            let shape = params
                .resolve(&[batch, cin, in_hw[0], in_hw[1]], &[cin, cout, kernel[0], kernel[1]], Some(&[cout]))
                .unwrap();
            let mut draw = |n: usize| (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect::<Vec<_>>();
            let (x, w, b) =
                (draw(batch * cin * in_hw[0] * in_hw[1]), draw(cin * cout * kernel[0] * kernel[1]), draw(cout));
            let want = crate::cpu::conv_transpose2d_f64(&shape, &x, &w, Some(&b)).unwrap();
            // The kernel's own layout, and one with room for a second reader of the copy (wider and taller images,
            // more zeros after the last sample, another pixel stride: grad_weight's NHWC kernel reads grad_output's
            // copy so laid out, src/gpu/backward/grad_weight_nhwc.rs).
            let own = Geometry::of(&shape);
            let needs = CopyNeeds {
                padded: [own.padded[0] + 3, own.padded[1] + 11],
                tail_pixels: 37,
                pixel_stride: Some(cin + 8),
            };
            for tile in [&TILES[0], staged_tile] {
                for g in [own.clone(), Geometry::with(&shape, &needs)] {
                    let (got, directs) = emulate(tile, &g, &shape, &x, &w, &b);
                    assert!(case < 14 || directs > 0, "{shape:?}: no fragment stored straight to the output");
                    for (i, (v, r)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (v - r).abs() <= 1e-9 * (1.0 + r.abs()),
                            "{}, {shape:?}, {:?}: output {i}: {v} against {r}",
                            tile.name(),
                            g.padded
                        );
                    }
                }
                let g = Geometry::with(&shape, &needs);
                assert!((0..2).all(|a| g.padded[a] >= needs.padded[a]), "{shape:?}");
                assert!(g.tail_rows * g.padded[1] >= needs.tail_pixels, "{shape:?}");
                assert_eq!(g.copy_layout(&shape, tile).pixel_stride, cin + 8);
            }
        }
    }
}
