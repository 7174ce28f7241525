//! The padded NHWC f16 copy of an NCHW tensor (`shaders/forward/coop_nhwc_input.wgsl`), shared by the kernels whose
//! tensor-core operands load straight from such copies: the forward's padded-NHWC kernel (its input, at a guessed
//! scale checked afterwards: [`encode_at_guess`]) and grad_weight's NHWC GEMM (x at a guessed scale too;
//! grad_output at the scale its maximum set beforehand: [`encode_at_maximum`]). A [`CopyLayout`] says where
//! the tensor lands; the copy writes every half of its padded rows (zeros around the tensor, in the pixels' pad and
//! in the tail rows), so the kernels never read an unwritten value.

use std::ops::Range;

use crate::dtype::DType;
use crate::error::Result;
use crate::gpu::context::GpuContext;
use crate::gpu::kernel::{bind_buffers, dispatch_buffers, grid};
use crate::gpu::memory::{buffer_with, Chunk, GpuTensor, InFlight, STORAGE};
use crate::gpu::wgsl::operands::{declare, Access, Io};
use crate::gpu::wgsl::scale::SCALE_FUNCTIONS;
use crate::gpu::wgsl::{self, with_shape_prelude};
use crate::params::ConvShape;

pub const INPUT_SHADER_NAME: &str = "forward/coop_nhwc_input.wgsl";
/// `shaders/forward/coop_nhwc_input.wgsl` behind the shape's constants (and the f16 it enables).
pub const INPUT_SHADER: &str = concat!("enable f16;\n", with_shape_prelude!("forward/coop_nhwc_input.wgsl"));
pub const SCALE_CHECK_SHADER_NAME: &str = "forward/coop_nhwc_scale_check.wgsl";
pub const SCALE_CHECK_SHADER: &str = include_str!("../../shaders/forward/coop_nhwc_scale_check.wgsl");
/// The scale exponent (shaders/common/scale.wgsl) the first copy under a guess key guesses: that of largest
/// magnitudes in [1, 2). Later copies guess the exponent the one before them found
/// (shaders/forward/coop_nhwc_scale_check.wgsl).
pub(crate) const FIRST_SCALE_GUESS: i32 = 14;

/// The copy's shader for tensors of `io`, with the scale functions it calls.
pub(crate) fn input_shader(io: Io) -> String {
    let operands = declare(io.storage, &[io.operand("x", 1, Access::Read)]);
    wgsl::module(&[&operands, INPUT_SHADER, SCALE_FUNCTIONS])
}

/// Where a tensor of `channels` channels and planes of `hw` lands in its copy: each image in `padded` rows x columns
/// of pixels `pixel_stride` halves apart, the tensor starting at row and column `before` (rows and columns outside
/// `copied`, in the tensor's coordinates, left out as zeros), then `tail_rows` rows of zeros after the last image.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CopyLayout {
    pub channels: usize,
    pub hw: [usize; 2],
    pub before: [usize; 2],
    pub padded: [usize; 2],
    pub copied: [Range<usize>; 2],
    pub pixel_stride: usize,
    pub tail_rows: usize,
}

impl CopyLayout {
    /// Padded pixels of `batch` images and the tail rows.
    pub fn pixels(&self, batch: usize) -> u128 {
        (batch as u128 * self.padded[0] as u128 + self.tail_rows as u128) * self.padded[1] as u128
    }
}

/// What a second reader of a copy needs of its layout beyond what the kernel that makes it needs: grad_weight's
/// NHWC GEMM reads the copy of grad_output that grad_input's padded-NHWC kernel makes at stride 1
/// ([`SharedCopy`]), so that grad_output is read and copied once for both gradients.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct CopyNeeds {
    /// The smallest padded image, rows x columns.
    pub padded: [usize; 2],
    /// Zero pixels after the last image (the tail rows hold at least this many).
    pub tail_pixels: usize,
    /// Halves between pixels, where the reader needs a particular stride.
    pub pixel_stride: Option<usize>,
}

/// A copy one kernel made and another reads (grad_output's: [`CopyNeeds`]): the buffer, its layout, and the maxima
/// buffer whose slot `slot` holds the largest magnitude that set the copy's scale (zero for an f16 tensor, copied as
/// it is).
pub(crate) struct SharedCopy {
    pub buffer: wgpu::Buffer,
    pub layout: CopyLayout,
    pub maxima: wgpu::Buffer,
    pub slot: usize,
}

/// The blocks the copy moves through workgroup memory: `pixels` padded pixels x `channels` channels,
/// `per_workgroup` of them one after the other.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PrepBlock {
    pub pixels: usize,
    pub channels: usize,
    pub per_workgroup: usize,
}

impl PrepBlock {
    /// The blocks that measured fastest for the copy alone (docs/PERFORMANCE.md): 16 pixels x 64 channels where
    /// the channels are a multiple of 64 (faster than 32 x 32 blocks, or as fast); 32 x 32, 4 per workgroup,
    /// otherwise (with 32 channels, 64-channel blocks were half empty and slower). 64-channel blocks go 4 per
    /// workgroup where the copy is at most `PREP_SMALL_INPUT_MAX_BYTES`, 2 above it: each measured faster on its
    /// side of that size.
    pub fn of(channels: usize, padded_bytes: u128) -> PrepBlock {
        if channels.is_multiple_of(64) {
            let per_workgroup = if padded_bytes <= PREP_SMALL_INPUT_MAX_BYTES { 4 } else { 2 };
            PrepBlock { pixels: 16, channels: 64, per_workgroup }
        } else {
            PrepBlock { pixels: 32, channels: 32, per_workgroup: 4 }
        }
    }
}

/// The largest copy that moves 4 of its 64-channel blocks per workgroup; larger ones move 2 (`PrepBlock`):
/// between the suite's padded inputs of 0.3 GB (4 faster) and of 1.2 GB (2 faster).
pub(crate) const PREP_SMALL_INPUT_MAX_BYTES: u128 = 512 << 20;

/// The uniform block `Params` of `shaders/forward/coop_nhwc_input.wgsl`, field for field.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct InputParams {
    first_sample: u32,
    samples: u32,
    dispatch_width: u32,
    rows: u32,
}

/// How the copy scales: by the exponent a guess buffer holds, taking the copied values' largest magnitude into
/// slot `slot` of the maxima as it goes (the first pass of [`encode_at_guess`]), or by the largest magnitude in
/// slot `slot` of the maxima (its fix-up, and every copy whose maximum was taken beforehand). An f16 tensor is
/// copied as it is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum CopyScale {
    Guess { slot: usize },
    Maximum { slot: usize },
}

/// The copy's pipeline for a tensor of `dtype` in `layout`, in blocks of `block`.
pub(crate) fn pipeline(
    ctx: &GpuContext,
    dtype: DType,
    layout: &CopyLayout,
    block: PrepBlock,
    scale: CopyScale,
) -> Result<std::sync::Arc<wgpu::ComputePipeline>> {
    let io = Io::of(ctx, dtype);
    let module = ctx.module_with(&format!("{INPUT_SHADER_NAME} {}", io.key()), || input_shader(io))?;
    let (fixup, slot) = match scale {
        CopyScale::Guess { slot } => (false, slot),
        CopyScale::Maximum { slot } => (true, slot),
    };
    let values = [
        ("C_IN", layout.channels),
        ("IN_H", layout.hw[0]),
        ("IN_W", layout.hw[1]),
        ("COPY_H_BEGIN", layout.copied[0].start),
        ("COPY_H_END", layout.copied[0].end),
        ("COPY_W_BEGIN", layout.copied[1].start),
        ("COPY_W_END", layout.copied[1].end),
        ("PAD_T", layout.before[0]),
        ("PAD_L", layout.before[1]),
        ("H_P", layout.padded[0]),
        ("W_P", layout.padded[1]),
        ("PIXEL_STRIDE", layout.pixel_stride),
        ("BLOCK_P", block.pixels),
        ("BLOCK_C", block.channels),
        ("QUADS", block.channels / 4),
        ("BLOCKS_PER_WG", block.per_workgroup),
        ("MAX_SLOT", slot),
        ("FIXUP", fixup as usize),
        ("SCALED", (dtype != DType::F16) as usize),
    ];
    let consts: Vec<(&str, f64)> = values.iter().map(|&(k, v)| (k, v as f64)).collect();
    ctx.pipeline(format!("nhwc_f16 {} {:?} {consts:?}", io.key(), ctx.options().shader_checks), &module, &consts)
}

/// The copy's dispatches, one per chunk of `tensor` (whole samples: the kernels' checks), each with its grid and
/// uniform block; the last chunk's writes the tail rows too.
pub(crate) fn dispatches<'t>(
    ctx: &GpuContext,
    tensor: &'t GpuTensor,
    layout: &CopyLayout,
    block: PrepBlock,
) -> Vec<(&'t Chunk, (u32, u32), InputParams)> {
    let c_n = layout.channels;
    let blocks = layout.padded[1].div_ceil(block.pixels) * c_n.div_ceil(block.channels);
    let chunks = tensor.chunks();
    chunks
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let samples = c.planes / c_n;
            let last = i + 1 == chunks.len();
            let rows = samples * layout.padded[0] + if last { layout.tail_rows } else { 0 };
            let igrid = grid(ctx, (rows * blocks).div_ceil(block.per_workgroup));
            let u = InputParams {
                first_sample: (c.first_plane / c_n) as u32,
                samples: samples as u32,
                dispatch_width: igrid.0,
                rows: rows as u32,
            };
            (c, igrid, u)
        })
        .collect()
}

/// Encodes the copy of `tensor` in `layout` at the scale slot `slot` of `maxima` sets (its largest magnitude, taken
/// beforehand; zero for an f16 tensor, whose maximum is not taken: a scale of 1) into a new buffer of `bytes`
/// bytes, kept in `in_flight`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode_at_maximum(
    ctx: &GpuContext,
    tensor: &GpuTensor,
    layout: &CopyLayout,
    bytes: u64,
    maxima: &wgpu::Buffer,
    slot: usize,
    pass: &mut wgpu::ComputePass<'_>,
    in_flight: &mut InFlight,
) -> Result<wgpu::Buffer> {
    ctx.scoped(|| {
        let copy = in_flight.keep(ctx.pool.get(&ctx.device, bytes, STORAGE));
        let block = PrepBlock::of(layout.channels, bytes as u128);
        let pipeline = pipeline(ctx, tensor.dtype(), layout, block, CopyScale::Maximum { slot })?;
        // The shader declares the guess of the other scale mode; this one never reads it (one buffer per context).
        let guess = ctx.kept_i32("nhwc copy: the guess a copy at a known maximum does not read".into(), 0);
        for (c, g, u) in dispatches(ctx, tensor, layout, block) {
            dispatch_buffers(ctx, pass, &pipeline, bytemuck::bytes_of(&u), &[c, &copy, maxima, &guess], g);
        }
        Ok(copy)
    })
}

/// Where a context keeps the scale exponent [`encode_at_guess`] guesses for the copies of `what` (a kernel's
/// operand) in `shape`: per layer geometry, not per batch size (a layer's last batch is often smaller; its tensors'
/// magnitudes are the same).
pub(crate) fn guess_key(what: &str, shape: &ConvShape) -> String {
    format!("{what} scale {:?}", ConvShape { batch: 0, ..*shape })
}

/// The scale check's shader, with the scale functions it calls.
pub fn scale_check_shader() -> String {
    format!("{SCALE_CHECK_SHADER}\n{SCALE_FUNCTIONS}")
}

/// The uniform block `Params` of `shaders/forward/coop_nhwc_scale_check.wgsl`, field for field.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct CheckParams {
    chunks: u32,
    _pad: [u32; 3],
}

/// Encodes the copy of `tensor` in `layout` into `copy` at the scale the last copy under `guess_key` (made by
/// [`guess_key`]) found, taking the tensor's largest magnitude into slot `slot` of `maxima` (zero before) as it goes;
/// then the scale check, and the same copy again at that magnitude's own scale where it differs from the guess (an
/// indirect dispatch per chunk, of the first pass's workgroups or none). So the copy reads the tensor once where the
/// guess holds, and the result has the same bits as a copy at the maximum taken beforehand. An f16 tensor is copied
/// as it is: no scale, so neither the check nor the fix-up. Returns the fix-up's workgroup counts (zero where the
/// guess held).
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode_at_guess(
    ctx: &GpuContext,
    tensor: &GpuTensor,
    layout: &CopyLayout,
    block: PrepBlock,
    copy: &wgpu::Buffer,
    maxima: &wgpu::Buffer,
    slot: usize,
    guess_key: String,
    pass: &mut wgpu::ComputePass<'_>,
) -> Result<wgpu::Buffer> {
    ctx.scoped(|| {
        let guess = ctx.kept_i32(guess_key, FIRST_SCALE_GUESS);
        let scaled = tensor.dtype() != DType::F16;
        let first = pipeline(ctx, tensor.dtype(), layout, block, CopyScale::Guess { slot })?;
        let chunks = dispatches(ctx, tensor, layout, block);
        for (c, igrid, u) in &chunks {
            dispatch_buffers(ctx, pass, &first, bytemuck::bytes_of(u), &[c, copy, maxima, &guess], *igrid);
        }
        // The fix-up's workgroups per chunk: the first pass's, which the check zeroes where the guess held; none
        // for an unscaled (f16) tensor, which runs neither.
        let counts: Vec<u32> = match scaled {
            true => chunks.iter().flat_map(|(_, (x, y), _)| [*x, *y, 1]).collect(),
            false => vec![0; 3 * chunks.len()],
        };
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::INDIRECT | wgpu::BufferUsages::COPY_SRC;
        let counts = buffer_with(&ctx.device, "convt scale fix-up workgroups", bytemuck::cast_slice(&counts), usage);
        if scaled {
            let fixup = pipeline(ctx, tensor.dtype(), layout, block, CopyScale::Maximum { slot })?;
            let module = ctx.module_with(SCALE_CHECK_SHADER_NAME, scale_check_shader)?;
            let consts = [("MAX_SLOT", slot as f64)];
            let check =
                ctx.pipeline(format!("scale_check {:?} {consts:?}", ctx.options().shader_checks), &module, &consts)?;
            let u = CheckParams { chunks: chunks.len() as u32, _pad: [0; 3] };
            dispatch_buffers(ctx, pass, &check, bytemuck::bytes_of(&u), &[maxima, &counts, &guess], (1, 1));
            for (i, (c, _, u)) in chunks.iter().enumerate() {
                bind_buffers(ctx, pass, &fixup, bytemuck::bytes_of(u), &[c, copy, maxima, &guess]);
                ctx.dispatch_in(pass, &fixup, |pass| pass.dispatch_workgroups_indirect(&counts, (12 * i) as u64));
            }
        }
        Ok(counts)
    })
}

/// A copy as shaders/forward/coop_nhwc_input.wgsl writes it, unscaled, in f64: every half of the padded rows
/// and the tail rows (zeros but the tensor's copied values).
#[cfg(test)]
pub(crate) fn emulate(l: &CopyLayout, batch: usize, t: &[f64]) -> Vec<f64> {
    let [hp, wp] = l.padded;
    let mut out = vec![0.0; (batch * hp + l.tail_rows) * wp * l.pixel_stride];
    for n in 0..batch {
        for r in 0..hp {
            for col in 0..wp {
                let (h, w) = (r.wrapping_sub(l.before[0]), col.wrapping_sub(l.before[1]));
                if l.copied[0].contains(&h) && l.copied[1].contains(&w) {
                    for c in 0..l.channels {
                        out[((n * hp + r) * wp + col) * l.pixel_stride + c] =
                            t[((n * l.channels + c) * l.hw[0] + h) * l.hw[1] + w];
                    }
                }
            }
        }
    }
    out
}
