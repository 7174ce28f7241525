//! The padded-NHWC cooperative-matrix kernel (precision `fast` on tensor cores, stride 1), `shaders/coop_nhwc.wgsl`
//! (its opening comment explains the form): the input is first rewritten as scaled f16 in padded NHWC order
//! (`shaders/nhwc_f16.wgsl`) and the weight as scaled f16 [tap][ic][oc] (`shaders/pack_weights_f16.wgsl`), so
//! that every tensor-core operand loads straight from storage. One module per [`NhwcTile`].

use crate::error::{ConvtError, Result};
use crate::gpu::absmax;
use crate::gpu::buffers::{GpuTensor, InFlight, STORAGE};
use crate::gpu::context::GpuContext;
use crate::gpu::coop::{self, SUBGROUP};
use crate::gpu::gemm::{SCALED_MODULE, SCALED_PROLOGUE};
use crate::gpu::kernel::{check_index_range, dispatch_buffers, grid, Operands};
use crate::params::ConvShape;

pub const SHADER_NAME: &str = "coop_nhwc.wgsl";
pub const SHADER: &str = include_str!("../../shaders/coop_nhwc.wgsl");
pub const INPUT_SHADER_NAME: &str = "nhwc_f16.wgsl";
pub const INPUT_SHADER: &str = include_str!("../../shaders/nhwc_f16.wgsl");
pub const WEIGHT_SHADER_NAME: &str = "pack_weights_f16.wgsl";
pub const WEIGHT_SHADER: &str = include_str!("../../shaders/pack_weights_f16.wgsl");
const SCALE_FUNCTIONS: &str = include_str!("../../shaders/scale.wgsl");
/// Workgroup size of the two preparation shaders.
const PREP_WORKGROUP_SIZE: usize = 256;
/// Pixels x channels per workgroup of the input's preparation (`BLOCK` x `BLOCK` in the shader).
const PREP_BLOCK: usize = 32;

/// A workgroup of SG_M x SG_N subgroups, each computing WM pixels x WN output channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NhwcTile {
    pub wm: u32,
    pub wn: u32,
    pub sg_m: u32,
    pub sg_n: u32,
}

const fn tile(wm: u32, wn: u32, sg_m: u32, sg_n: u32) -> NhwcTile {
    NhwcTile { wm, wn, sg_m, sg_n }
}

/// Every tile the selector may choose: 64 x 64 per subgroup (64+ output channels), 64 x 32 (32-channel outputs).
/// Larger subgroup blocks (96 x 64, 128 x 32) measured slower or within 2% (docs/PERFORMANCE.md, c7).
pub const TILES: &[NhwcTile] = &[
    tile(64, 64, 2, 1),
    tile(64, 64, 4, 1),
    tile(64, 64, 1, 2),
    tile(64, 64, 2, 2),
    tile(64, 32, 2, 1),
    tile(64, 32, 4, 1),
];

/// The tile for a shape before tuning, the H100's winners in docs/PERFORMANCE.md (c1): 128 pixels x 64 channels
/// where the output channels are a multiple of 64, 128 x 32 where they are of 32; none otherwise.
pub fn pick_tile(shape: &ConvShape) -> Option<NhwcTile> {
    if shape.out_channels.is_multiple_of(64) {
        Some(tile(64, 64, 2, 1))
    } else if shape.out_channels.is_multiple_of(32) {
        Some(tile(64, 32, 2, 1))
    } else {
        None
    }
}

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
        format!("coopnhwc_{}x{}_{}x{}", self.bm(), self.bn(), self.wm, self.wn)
    }
    /// The epilogue's scratch: WM x 16 f32 per subgroup.
    pub fn workgroup_bytes(&self) -> u32 {
        4 * self.sg_m * self.sg_n * self.wm * 16
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

    /// Whether this tile computes `shape` here: stride 1, one group, input channels a multiple of 16 and output
    /// channels of the tile's width, padding within the kernel's reach (the padded input's margins are not
    /// negative), whole samples per binding, and the padded f16 input within one binding.
    pub fn check(&self, ctx: &GpuContext, shape: &ConvShape) -> Result<()> {
        let unfit =
            |why: String| Err(ConvtError::InvalidArgument(format!("{} does not take this shape: {why}", self.name())));
        if shape.stride != [1, 1] || shape.groups != 1 {
            return unfit(format!(
                "stride {:?} and {} groups (it needs stride 1, one group)",
                shape.stride, shape.groups
            ));
        }
        // Sizes within the kernels' 32-bit indexing first: the products below are then exact (the byte counts
        // in u128).
        check_index_range(shape)?;
        if !shape.in_channels.is_multiple_of(16) || !shape.out_channels.is_multiple_of(self.bn() as usize) {
            return unfit(format!(
                "{} input and {} output channels (it needs multiples of 16 and {})",
                shape.in_channels,
                shape.out_channels,
                self.bn()
            ));
        }
        for a in 0..2 {
            if shape.padding[a] > shape.dilation[a] * (shape.kernel[a] - 1) {
                return unfit(format!("padding {:?} beyond dilation * (kernel - 1)", shape.padding));
            }
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

    /// The shader: `shaders/coop_nhwc.wgsl` with this tile's constants and generated parts.
    pub fn source(&self) -> String {
        let (mi, nj) = (self.wm / 16, self.wn / 16);
        let mut math = String::new();
        for i in 0..mi {
            math += &format!(
                "            let a{i} = coopLoadT<coop_mat16x16<f16, A>>(&xp[a_base + {}u * C_IN + c0], C_IN);\n",
                16 * i
            );
        }
        for j in 0..nj {
            math += &format!(
                "            let b{j} = coopLoadT<coop_mat16x16<f16, B>>(&wp[b_base + c0 * C_OUT + {}u], C_OUT);\n",
                16 * j
            );
        }
        let (decl, products) = coop::products(mi, nj);
        math += &products;
        // The epilogue through workgroup memory, as the staged kernel's: lanes store consecutive pixels.
        let epi = coop::epilogue(
            self.wm,
            nj,
            |r| format!("out_pixel(m0 + lane + {}u)", 32 * r),
            |j, r, v| format!("store(px{r}, n0 + {}u + c, {v});", 16 * j),
        );
        let header = format!(
            "enable f16;\nenable wgpu_cooperative_matrix;\nconst WM: u32 = {}u;\nconst WN: u32 = {}u;\nconst SG_M: u32 = {}u;\nconst SG_N: u32 = {}u;\nconst BM: u32 = SG_M * WM;\nconst BN: u32 = SG_N * WN;\nconst THREADS: u32 = {SUBGROUP}u * SG_M * SG_N;\n",
            self.wm, self.wn, self.sg_m, self.sg_n
        );
        let body = SHADER
            .replace("//#MODULE\n", SCALED_MODULE)
            .replace("//#PROLOGUE\n", SCALED_PROLOGUE)
            .replace("//#ACC_DECL\n", &decl)
            .replace("//#MATH\n", &math)
            .replace("//#EPILOGUE\n", &epi);
        format!("{header}{body}")
    }
}

/// The preparation shaders with the scale functions they call.
pub fn input_shader() -> String {
    format!("{INPUT_SHADER}\n{SCALE_FUNCTIONS}")
}
pub fn weight_shader() -> String {
    format!("{WEIGHT_SHADER}\n{SCALE_FUNCTIONS}")
}

/// The padded input's layout for a shape: the margin before each image (top, left) and the padded image's size
/// (the margin after it, bottom and right, is what remains: before + output padding).
#[derive(Debug, Clone, Copy)]
struct Geometry {
    before: [usize; 2],
    padded: [usize; 2],
}

impl Geometry {
    fn of(shape: &ConvShape) -> Geometry {
        let mut before = [0; 2];
        let mut padded = [0; 2];
        for a in 0..2 {
            // Saturating: `check` refuses the shapes where these would not be exact (padding beyond the reach,
            // sizes beyond 32-bit indexing) before anything uses them.
            let reach = shape.dilation[a].saturating_mul(shape.kernel[a].saturating_sub(1));
            before[a] = reach.saturating_sub(shape.padding[a]);
            // The output's last pixel reads `reach` past its own padded position: out + reach in all.
            padded[a] = shape.out_hw[a].saturating_add(reach);
        }
        Geometry { before, padded }
    }

    /// Padded pixels of one sample.
    fn sample_pixels(&self) -> usize {
        self.padded[0] * self.padded[1]
    }

    /// Bytes of the padded f16 input, with room after the last sample for the reads of the last tile's
    /// pixels past it (computed, never stored).
    fn padded_bytes(&self, shape: &ConvShape, tile: &NhwcTile) -> u128 {
        let reach = |a: usize| (shape.dilation[a] as u128) * (shape.kernel[a] as u128 - 1);
        let slack = tile.bm() as u128 + reach(0) * self.padded[1] as u128 + reach(1);
        let pixels = shape.batch as u128 * self.padded[0] as u128 * self.padded[1] as u128 + slack;
        (pixels * shape.in_channels as u128 * 2).next_multiple_of(4)
    }
}

/// The kernel's override constants for a shape.
pub fn constants(shape: &ConvShape, has_bias: bool) -> Vec<(&'static str, f64)> {
    let g = Geometry::of(shape);
    [
        ("C_IN", shape.in_channels),
        ("C_OUT", shape.out_channels),
        ("K_H", shape.kernel[0]),
        ("K_W", shape.kernel[1]),
        ("D_H", shape.dilation[0]),
        ("D_W", shape.dilation[1]),
        ("H_P", g.padded[0]),
        ("W_P", g.padded[1]),
        ("OUT_H", shape.out_hw[0]),
        ("OUT_W", shape.out_hw[1]),
        ("HAS_BIAS", has_bias as usize),
    ]
    .into_iter()
    .map(|(k, v)| (k, v as f64))
    .collect()
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

/// The uniform block `Params` of `shaders/nhwc_f16.wgsl`, field for field.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct InputParams {
    first_sample: u32,
    samples: u32,
    dispatch_width: u32,
    _pad: u32,
}

/// The uniform block `Params` of `shaders/pack_weights_f16.wgsl`, field for field.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct WeightParams {
    dispatch_width: u32,
    _pad: [u32; 3],
}

/// Encodes the preparation of both operands and the kernel over every output chunk into `pass`; the scratch
/// buffers go into `in_flight`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode(
    ctx: &GpuContext,
    shape: &ConvShape,
    tile: &NhwcTile,
    input: &GpuTensor,
    weight: &GpuTensor,
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
    let g = Geometry::of(shape);
    let (cin, cout) = (shape.in_channels, shape.out_channels);
    let maxima = absmax::encode(ctx, &[input, weight], pass)?;

    ctx.scoped(|| {
        // The input, padded, as f16 NHWC: one dispatch per input chunk (whole samples, `check`).
        // Within one binding (`check`), so it fits u64.
        let xp = in_flight.keep(ctx.pool.get(&ctx.device, g.padded_bytes(shape, tile) as u64, STORAGE));
        let consts = [
            ("C_IN", cin as f64),
            ("IN_H", shape.in_hw[0] as f64),
            ("IN_W", shape.in_hw[1] as f64),
            ("PAD_T", g.before[0] as f64),
            ("PAD_L", g.before[1] as f64),
            ("H_P", g.padded[0] as f64),
            ("W_P", g.padded[1] as f64),
        ];
        let module = ctx.module_with(INPUT_SHADER_NAME, input_shader)?;
        let pipeline =
            ctx.pipeline(format!("nhwc_f16 {:?} {consts:?}", ctx.options().shader_checks), &module, &consts)?;
        let blocks = g.padded[1].div_ceil(PREP_BLOCK) * cin.div_ceil(PREP_BLOCK);
        for c in input.chunks() {
            let samples = c.planes / cin;
            let igrid = grid(ctx, samples * g.padded[0] * blocks);
            let u = InputParams {
                first_sample: (c.first_plane / cin) as u32,
                samples: samples as u32,
                dispatch_width: igrid.0,
                _pad: 0,
            };
            dispatch_buffers(ctx, pass, &pipeline, bytemuck::bytes_of(&u), &[&c.buffer, &xp, &maxima], igrid, 1);
        }

        // The weight as f16 [tap][ic][oc], taps flipped.
        let values = shape.kernel[0] * shape.kernel[1] * cin * cout;
        let wpk = in_flight.keep(ctx.pool.get(&ctx.device, ((values * 2).next_multiple_of(4)) as u64, STORAGE));
        let consts = [
            ("C_IN", cin as f64),
            ("C_OUT", cout as f64),
            ("K_H", shape.kernel[0] as f64),
            ("K_W", shape.kernel[1] as f64),
        ];
        let module = ctx.module_with(WEIGHT_SHADER_NAME, weight_shader)?;
        let pipeline =
            ctx.pipeline(format!("pack_f16 {:?} {consts:?}", ctx.options().shader_checks), &module, &consts)?;
        let wgrid = grid(ctx, values.div_ceil(PREP_WORKGROUP_SIZE));
        let u = WeightParams { dispatch_width: wgrid.0, _pad: [0; 3] };
        let w = weight.single_buffer("weight", ctx)?;
        dispatch_buffers(ctx, pass, &pipeline, bytemuck::bytes_of(&u), &[w, &wpk, &maxima], wgrid, 1);

        // The products, one dispatch per output chunk (whole samples).
        let consts = constants(shape, bias.is_some());
        let name = tile.name();
        let module = ctx.module_with(&name, || tile.source())?;
        let pipeline =
            ctx.pipeline(format!("{name} {:?} {consts:?}", ctx.options().shader_checks), &module, &consts)?;
        let ops = Operands::new(ctx, &wpk, bias)?;
        let n_tiles = cout / tile.bn() as usize;
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
            let mut buffers = ops.buffers(&xp, &c.buffer);
            buffers.push(&maxima);
            dispatch_buffers(ctx, pass, &pipeline, bytemuck::bytes_of(&u), &buffers, mgrid, 1);
        }
        Ok(())
    })
}
