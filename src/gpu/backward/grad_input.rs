//! grad_input, three ways ([`GradInputKernel`]), chosen by [`crate::gpu::select::grad_input`] (or by the tuner's
//! cache entry, `convt tune --backward`):
//! - where the shape has an equivalent transposed convolution (stride 1 without output_padding, padding at most
//!   dilation*(kernel-1)), grad_input is that transposed convolution of grad_output with the flipped,
//!   channel-swapped weight (`shaders/backward/grad_input_weights.wgsl`) and padding dilation*(kernel-1) - padding, so the
//!   forward's selector and its GEMM or Winograd kernel run it;
//! - at any stride, grad_input is a strided convolution of grad_output with that weight: the same stride-1
//!   correlation sampled every `stride` pixels, which the GEMM kernel (register tiles, or cooperative matrices at
//!   precision `fast`) computes as one phase ([`gemm::Geometry::Sampled`]) wherever the forward's heuristic would
//!   take a GEMM for it;
//! - otherwise, `shaders/backward/grad_input.wgsl`: a gather over grad_output, each invocation a few input pixels and
//!   a block of input channels ([`GatherTile`]), for every option.

use crate::error::{ConvtError, Result};
use crate::gpu::context::GpuContext;
use crate::gpu::forward::coop_nhwc;
use crate::gpu::forward::gather::SliceUniform;
use crate::gpu::forward::gemm::{self, Geometry};
use crate::gpu::kernel::{channel_blocks, check_index_range, dispatch_buffers, grid, Weight};
use crate::gpu::memory::{GpuTensor, InFlight};
use crate::gpu::nhwc_copy::{CopyNeeds, SharedCopy};
use crate::gpu::plan::PreparedWeight;
use crate::gpu::slices::{plan_between, Side};
use crate::gpu::wgsl::operands::{declare, Access, Io};
use crate::gpu::wgsl::{self, shape_constants, with_shape_prelude};
use crate::gpu::Strategy;
use crate::params::{ConvShape, ConvTranspose2dOptions};
use crate::precision::Precision;

pub const SHADER_NAME: &str = "backward/grad_input.wgsl";
/// `shaders/backward/grad_input.wgsl` behind the shape's constants.
const SHADER: &str = with_shape_prelude!("backward/grad_input.wgsl");
pub const FLIP_SHADER_NAME: &str = "backward/grad_input_weights.wgsl";
const FLIP_SHADER: &str = include_str!("../../../shaders/backward/grad_input_weights.wgsl");

/// The gather kernel's source for tensors of `io` (grad_output and the weight read, grad_input written) with
/// `tile`'s constants in front.
fn source(tile: &GatherTile, io: Io) -> String {
    let header = format!(
        "const PX: u32 = {}u;\nconst IC_VECS: u32 = {}u;\nconst STAGED: bool = {};\n",
        tile.px, tile.ic_vecs, tile.staged
    );
    let operands = declare(
        io.storage,
        &[
            io.operand("grad_out", 1, Access::Read),
            io.operand("w", 2, Access::Read),
            io.operand("grad_in", 3, Access::ReadWrite),
        ],
    );
    wgsl::module(&[&header, &operands, SHADER])
}

/// The weight flip's source for a weight of `io` (the flipped weight has its dtype).
fn flip_source(io: Io) -> String {
    let operands = declare(io.storage, &[io.operand("src", 1, Access::Read), io.operand("dst", 2, Access::ReadWrite)]);
    wgsl::module(&[&operands, FLIP_SHADER])
}
const WORKGROUP_SIZE: u32 = 256;
/// The most staged weights a gather workgroup holds, in vec4s: the 16 KiB every adapter convt runs on offers
/// (more would leave fewer workgroups per multiprocessor).
const STAGED_VEC4S: usize = 1024;
/// Each gather invocation's sums, in vec4s (`PX * IC_VECS`) where a group has at most 16 input channels: the
/// fastest measured on kb75; 8 were slower, 16 many times slower (docs/PERFORMANCE.md). Larger groups take 8
/// vec4s of channels at one pixel ([`GatherTile::for_shape`]).
const SUM_VEC4S: usize = 4;

/// The gather kernel's tiling for a shape (`shaders/backward/grad_input.wgsl`): input pixels per invocation
/// (`px`), vec4s of input channels per invocation (`ic_vecs`), output channels whose weights are staged at once
/// (`co_chunk`), and whether they are staged at all (a kernel too large for one output channel's taps reads
/// them from storage).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GatherTile {
    px: usize,
    ic_vecs: usize,
    co_chunk: usize,
    staged: bool,
}

impl GatherTile {
    /// The tile for `shape`: as many of a group's input channels as fit 4 vec4s, the rest of the sums' registers
    /// in pixels, fewer pixels where a workgroup's would not fill a whole plane (samples and channel blocks
    /// then keep the GPU busy instead). A group of more than 16 input channels takes blocks of 32 at one pixel:
    /// every channel block's workgroups read all of grad_output's values their pixels reach, so halving the
    /// blocks halves those reads, which bound the kernel where grad_output is much larger than the input (kb81:
    /// docs/PERFORMANCE.md).
    pub(crate) fn for_shape(shape: &ConvShape) -> Self {
        let ic_vecs = match shape.in_per_group() {
            0..=4 => 1,
            5..=8 => 2,
            9..=16 => 4,
            _ => 8,
        };
        let pixels = shape.in_hw[0] * shape.in_hw[1];
        let mut px = (SUM_VEC4S / ic_vecs).max(1);
        while px > 1 && WORKGROUP_SIZE as usize * px > pixels {
            px /= 2;
        }
        let taps = shape.kernel[0] * shape.kernel[1];
        let co_chunk = (STAGED_VEC4S / (taps * ic_vecs)).min(shape.out_per_group());
        let staged = co_chunk > 0;
        Self { px, ic_vecs, co_chunk: if staged { co_chunk } else { shape.out_per_group() }, staged }
    }

    /// Input channels per invocation (`IC_BLOCK` in the shader).
    fn ic_block(&self) -> usize {
        4 * self.ic_vecs
    }

    /// Input pixels per workgroup.
    fn span(&self) -> usize {
        WORKGROUP_SIZE as usize * self.px
    }

    /// The override constants of its pipeline beside the shape's.
    fn constants(&self, shape: &ConvShape) -> [(&'static str, f64); 3] {
        let taps = shape.kernel[0] * shape.kernel[1];
        let ws_len = if self.staged { self.co_chunk * taps * self.ic_vecs } else { 1 };
        [("WORKGROUP_SIZE", WORKGROUP_SIZE as f64), ("CO_CHUNK", self.co_chunk as f64), ("WS_LEN", ws_len as f64)]
    }

    /// Its module's name for tensors of `io`.
    fn module_name(&self, io: Io) -> String {
        format!("{SHADER_NAME} px{} v{} staged {} {}", self.px, self.ic_vecs, self.staged, io.key())
    }
}

/// The transposed convolution that computes grad_input from grad_output, where there is one: stride 1, no
/// output_padding and padding <= dilation*(kernel-1) on both axes (then its output has the input's size).
pub fn as_transposed_convolution(shape: &ConvShape) -> Option<ConvShape> {
    let fits = (0..2).all(|a| {
        shape.stride[a] == 1
            && shape.output_padding[a] == 0
            && shape.padding[a] <= shape.dilation[a] * (shape.kernel[a] - 1)
    });
    if !fits {
        return None;
    }
    let params = ConvTranspose2dOptions {
        stride: [1, 1],
        padding: [0, 1].map(|a| (shape.dilation[a] * (shape.kernel[a] - 1) - shape.padding[a]) as i64),
        output_padding: [0, 0],
        dilation: shape.dilation.map(|d| d as i64),
        groups: shape.groups as i64,
        ..Default::default()
    };
    let input = shape.output_dims();
    let weight = [shape.out_channels, shape.in_per_group(), shape.kernel[0], shape.kernel[1]];
    let t = params.resolve(&input, &weight, None).ok()?;
    (t.out_hw == shape.in_hw).then_some(t)
}

/// The sampled correlation that computes grad_input from grad_output at any stride: a stride-1 problem reading
/// grad_output ([N, Cout, OH, OW]) with the flipped, channel-swapped weight and writing the input's size, and
/// its geometry: output pixel (ih, iw) reads grad_output at (ih * stride - padding + kh * dilation) for every
/// tap kh, i.e. at ih * stride + off - j * dilation for the flipped tap j = kH - 1 - kh.
pub(crate) fn as_sampled_correlation(shape: &ConvShape) -> (ConvShape, Geometry) {
    let t = ConvShape {
        batch: shape.batch,
        in_channels: shape.out_channels,
        out_channels: shape.in_channels,
        groups: shape.groups,
        in_hw: shape.out_hw,
        out_hw: shape.in_hw,
        kernel: shape.kernel,
        stride: [1, 1],
        padding: [0, 0],
        output_padding: [0, 0],
        dilation: shape.dilation,
        unbatched: shape.unbatched,
    };
    let off = [0, 1].map(|a| (shape.dilation[a] * (shape.kernel[a] - 1)) as i64 - shape.padding[a] as i64);
    (t, Geometry::Sampled { step: shape.stride, off })
}

/// A kernel that computes grad_input: what [`crate::gpu::select::grad_input`] picks, what
/// [`GradInputKernel::candidates`] lists for the tuner, and what [`super::conv_transpose2d_backward_into`] takes (in
/// its `Run`) and returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GradInputKernel {
    /// The forward's GEMM or Winograd kernel (exact), or its f16 GEMM, cooperative-matrix or padded-NHWC kernel
    /// (precision `fast`), on the equivalent transposed convolution (stride 1, no output_padding, padding at most
    /// `dilation * (kernel - 1)`), with the weight flipped.
    Transposed(Strategy),
    /// The GEMM kernel with this tile (a register tile, f32 or f16 operands, or a cooperative-matrix tile) on the
    /// sampled correlation of grad_output with the flipped weight (any stride). Only `Strategy::Gemm` and
    /// `Strategy::Coop` compute it: [`GradInputKernel::computes`] is false for any other strategy, and running one
    /// is an error.
    Sampled(Strategy),
    /// `shaders/backward/grad_input.wgsl`, the gather over grad_output (every option).
    Gather,
}

/// The tuning-cache name of [`GradInputKernel::Gather`] (the others are named by their strategy or tile).
const GATHER: &str = "gather";

impl GradInputKernel {
    /// The kernel and what it computes, as `convt bench --backward` prints it.
    pub fn name(&self) -> String {
        match self {
            GradInputKernel::Transposed(s) => format!("{} (transposed convolution)", s.name()),
            GradInputKernel::Sampled(s) => format!("{} (sampled correlation)", s.name()),
            GradInputKernel::Gather => GATHER.into(),
        }
    }

    /// Its name in the tuning cache: the strategy's or tile's name, or `gather`. Which form a GEMM tile takes
    /// follows from the shape ([`Self::from_cache_name`]).
    pub fn cache_name(&self) -> String {
        match self {
            GradInputKernel::Transposed(s) => s.name(),
            GradInputKernel::Sampled(s) => s.name(),
            GradInputKernel::Gather => GATHER.into(),
        }
    }

    /// How it computes, in words: its strategy's [`Strategy::arithmetic`] (the gather kernel's is exact f32).
    pub fn arithmetic(&self) -> &'static str {
        match self {
            GradInputKernel::Transposed(s) | GradInputKernel::Sampled(s) => s.arithmetic(),
            GradInputKernel::Gather => "exact f32",
        }
    }

    /// The precision it computes at: its strategy's (the gather kernel is exact).
    pub fn precision(&self) -> Precision {
        match self {
            GradInputKernel::Transposed(s) | GradInputKernel::Sampled(s) => s.precision(),
            GradInputKernel::Gather => Precision::F32,
        }
    }

    /// The kernel a cache name stands for on `shape`: where the shape has an equivalent transposed convolution a
    /// GEMM, Winograd, cooperative-matrix or padded-NHWC strategy runs it, elsewhere a GEMM or cooperative-matrix
    /// tile runs the sampled correlation; `gather` the gather kernel. None for any other name.
    pub fn from_cache_name(name: &str, shape: &ConvShape) -> Option<Self> {
        if name == GATHER {
            return Some(GradInputKernel::Gather);
        }
        let strategy = Strategy::all().into_iter().find(|s| s.name() == name)?;
        let kernel = match as_transposed_convolution(shape) {
            Some(_) => GradInputKernel::Transposed(strategy),
            None => GradInputKernel::Sampled(strategy),
        };
        kernel.takes_strategy().then_some(kernel)
    }

    /// Whether its strategy is one this form runs: the GEMM, Winograd, cooperative-matrix and padded-NHWC
    /// kernels on the transposed convolution, the GEMM and cooperative-matrix tiles on the sampled correlation.
    fn takes_strategy(&self) -> bool {
        match self {
            GradInputKernel::Transposed(s) => {
                matches!(s, Strategy::Gemm(_) | Strategy::Winograd(_) | Strategy::Coop(_) | Strategy::CoopNhwc(_))
            }
            GradInputKernel::Sampled(s) => matches!(s, Strategy::Gemm(_) | Strategy::Coop(_)),
            GradInputKernel::Gather => true,
        }
    }

    /// Whether this kernel computes grad_input for `shape` on `ctx`'s device (at its [`Self::precision`]): a
    /// transposed-convolution kernel where the shape has one and the forward kernel computes it, a
    /// sampled-correlation tile that runs here (any shape), the gather kernel always.
    pub fn computes(&self, ctx: &GpuContext, shape: &ConvShape) -> bool {
        self.takes_strategy()
            && match self {
                GradInputKernel::Transposed(s) => as_transposed_convolution(shape).is_some_and(|t| s.computes(ctx, &t)),
                GradInputKernel::Sampled(s) => s.runs_on(ctx),
                GradInputKernel::Gather => true,
            }
    }

    /// The kernels that compute grad_input for `shape` on `ctx`'s device at `precision`, as `convt tune --backward`
    /// times them: where the shape has an equivalent transposed convolution (stride 1, see
    /// [`GradInputKernel::Transposed`]) the forward's strategies on it, elsewhere every GEMM tile (and for `fast`
    /// every cooperative-matrix tile) on the sampled correlation; and the gather kernel. For `fast` the exact
    /// kernels are candidates too.
    pub fn candidates(ctx: &GpuContext, shape: &ConvShape, precision: Precision) -> Vec<GradInputKernel> {
        let strategies = Strategy::candidates_for(ctx, precision);
        let kernels: Vec<GradInputKernel> = match as_transposed_convolution(shape) {
            Some(_) => strategies.into_iter().map(GradInputKernel::Transposed).collect(),
            None => strategies.into_iter().map(GradInputKernel::Sampled).collect(),
        };
        let mut kernels: Vec<GradInputKernel> = kernels.into_iter().filter(|k| k.computes(ctx, shape)).collect();
        kernels.push(GradInputKernel::Gather);
        kernels
    }

    /// The transposed convolution that computes grad_input for `shape` where there is one (stride 1, no
    /// output_padding, padding within the kernel's reach): the problem the [`GradInputKernel::Transposed`]
    /// kernels compute.
    pub fn transposed_problem(shape: &ConvShape) -> Option<ConvShape> {
        as_transposed_convolution(shape)
    }
}

/// The convolution grad_input's kernel computes for `shape` (with the flipped weight, from grad_output), and the
/// strategy that runs it: the transposed convolution or the sampled correlation; `None` for the gather kernel, which
/// reads the weight as it is.
pub(crate) fn flipped_problem(shape: &ConvShape, kernel: GradInputKernel) -> Result<Option<(ConvShape, Strategy)>> {
    match kernel {
        GradInputKernel::Transposed(strategy) => {
            let t = as_transposed_convolution(shape).ok_or_else(|| {
                ConvtError::InvalidArgument(format!(
                    "grad_input kernel {}: this shape has no equivalent transposed convolution (stride 1 only)",
                    kernel.name()
                ))
            })?;
            Ok(Some((t, strategy)))
        }
        GradInputKernel::Sampled(strategy) => Ok(Some((as_sampled_correlation(shape).0, strategy))),
        GradInputKernel::Gather => Ok(None),
    }
}

/// The flipped weight of [`flip_weights`] in a submission of its own (for a layer that keeps it: see
/// [`crate::gpu::plan::PreparedBackward`]).
pub(crate) fn flipped_weight(ctx: &GpuContext, shape: &ConvShape, weight: &GpuTensor) -> Result<GpuTensor> {
    let mut encoder = ctx.device.create_command_encoder(&Default::default());
    let flipped = {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("convt grad_input weight flip"),
            timestamp_writes: None,
        });
        flip_weights(ctx, shape, weight, &mut pass)?
    };
    flipped.mark_written();
    ctx.scoped(|| {
        ctx.queue.submit([encoder.finish()]);
        Ok(())
    })?;
    Ok(flipped)
}

/// Encodes grad_input = the gradient of the input given `grad_output`, into `grad_input` (the input's size),
/// with `kernel`; where `kept` has them, with the flipped weight and its prepared form made earlier
/// ([`crate::gpu::plan::PreparedBackward`]), else flipping (and the kernel preparing) the weight in this pass.
/// Where the kernel is the padded-NHWC one and `needs` asks for it, its copy of grad_output is laid out for that
/// second reader too and handed back (see [`coop_nhwc::encode_sharing`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode(
    ctx: &GpuContext,
    shape: &ConvShape,
    kernel: GradInputKernel,
    weight: &GpuTensor,
    kept: Option<(&GpuTensor, Option<&PreparedWeight>)>,
    grad_output: &GpuTensor,
    grad_input: &GpuTensor,
    needs: Option<&CopyNeeds>,
    pass: &mut wgpu::ComputePass<'_>,
    in_flight: &mut InFlight,
) -> Result<Option<SharedCopy>> {
    // The flipped weight, kept or made here (and then kept until the submission); the gather kernel reads the
    // weight as it is.
    let problem = flipped_problem(shape, kernel)?;
    let made = match (kept, &problem) {
        (None, Some(_)) => Some(flip_weights(ctx, shape, weight, pass)?),
        _ => None,
    };
    let w = match (kept, &made) {
        (Some((tensor, prepared)), _) => Weight { tensor, prepared },
        (None, Some(tensor)) => Weight { tensor, prepared: None },
        (None, None) => Weight { tensor: weight, prepared: None },
    };
    let mut shared = None;
    match kernel {
        GradInputKernel::Transposed(strategy) => {
            // Both kernels read any [N, C, H, W] tensor through the slice plan; the chunks of grad_output and
            // grad_input are those of an input and an output of the transposed convolution's shape.
            let (t, _) = problem.ok_or_else(|| {
                ConvtError::InvalidArgument(format!("grad_input kernel {}: no transposed convolution", kernel.name()))
            })?;
            match (strategy, needs) {
                (Strategy::CoopNhwc(tile), Some(needs)) => {
                    shared = coop_nhwc::encode_sharing(
                        ctx,
                        &t,
                        &tile,
                        grad_output,
                        w,
                        None,
                        grad_input,
                        Some(needs),
                        pass,
                        in_flight,
                    )?
                }
                _ => strategy.encode(ctx, &t, grad_output, w, None, grad_input, pass, in_flight)?,
            }
        }
        GradInputKernel::Sampled(strategy) => {
            let (t, geometry) = as_sampled_correlation(shape);
            match strategy {
                Strategy::Gemm(tile) => {
                    gemm::encode(ctx, &t, geometry, &tile, grad_output, w, None, grad_input, pass, in_flight)?
                }
                Strategy::Coop(tile) => {
                    gemm::encode(ctx, &t, geometry, &tile, grad_output, w, None, grad_input, pass, in_flight)?
                }
                _ => {
                    return Err(ConvtError::InvalidArgument(format!(
                        "grad_input kernel {}: only GEMM tiles compute the sampled correlation",
                        kernel.name()
                    )))
                }
            }
        }
        GradInputKernel::Gather => encode_gather(ctx, shape, weight, grad_output, grad_input, pass)?,
    }
    if let Some(t) = made {
        in_flight.keep_tensor(t);
    }
    Ok(shared)
}

/// Whether grad_input's kernels add to it over several slices (grad_output's channels of a sample over several
/// bindings): then a half-precision grad_input is summed in an f32 result.
pub(crate) fn accumulates(shape: &ConvShape, grad_output: &GpuTensor, grad_input: &GpuTensor) -> bool {
    let go = Side { tensor: grad_output, channels: shape.out_channels, per_group: shape.out_per_group() };
    let gi = Side { tensor: grad_input, channels: shape.in_channels, per_group: shape.in_per_group() };
    plan_between(shape.batch, go, gi).iter().any(|s| s.accumulate)
}

/// The weight [Cout, Cin/groups, kH, kW] of [`as_transposed_convolution`] and [`as_sampled_correlation`]
/// (`shaders/backward/grad_input_weights.wgsl`): flipped, input and output channels swapped, in the weight's dtype.
fn flip_weights(
    ctx: &GpuContext,
    shape: &ConvShape,
    weight: &GpuTensor,
    pass: &mut wgpu::ComputePass<'_>,
) -> Result<GpuTensor> {
    let src = weight.single_buffer("weight", ctx)?;
    let dims = [shape.out_channels, shape.in_per_group(), shape.kernel[0], shape.kernel[1]];
    let flipped = GpuTensor::empty_with(ctx, &dims, weight.dtype())?;
    let io = Io::of(ctx, weight.dtype());
    let module = ctx.module_with(&format!("{FLIP_SHADER_NAME} {}", io.key()), || flip_source(io))?;
    let consts = [
        ("COUT", shape.out_channels),
        ("CIG", shape.in_per_group()),
        ("COG", shape.out_per_group()),
        ("TAPS", shape.kernel[0] * shape.kernel[1]),
        ("WORKGROUP_SIZE", WORKGROUP_SIZE as usize),
    ]
    .map(|(k, v)| (k, v as f64));
    let key = format!("flip {} {:?} {consts:?}", io.key(), ctx.options().shader_checks);
    let pipeline = ctx.pipeline(key, &module, &consts)?;
    let grid = grid(ctx, weight.numel().div_ceil(WORKGROUP_SIZE as usize));
    let dst = flipped.single_buffer("flipped weight", ctx)?;
    ctx.scoped(|| {
        dispatch_buffers(ctx, pass, &pipeline, bytemuck::bytes_of(&grid.0), &[src, dst], grid);
        Ok(())
    })?;
    Ok(flipped)
}

/// The gather kernel, for every option.
fn encode_gather(
    ctx: &GpuContext,
    shape: &ConvShape,
    weight: &GpuTensor,
    grad_output: &GpuTensor,
    grad_input: &GpuTensor,
    pass: &mut wgpu::ComputePass<'_>,
) -> Result<()> {
    let slices = plan_between(
        shape.batch,
        Side { tensor: grad_output, channels: shape.out_channels, per_group: shape.out_per_group() },
        Side { tensor: grad_input, channels: shape.in_channels, per_group: shape.in_per_group() },
    );
    let weight = weight.single_buffer("weight", ctx)?;
    let io = Io::new(ctx, grad_output.dtype(), grad_input.dtype());
    let tile = GatherTile::for_shape(shape);
    let name = tile.module_name(io);
    let module = ctx.module_with(&name, || source(&tile, io))?;
    check_index_range(shape)?;
    let mut consts = shape_constants(shape, false);
    consts.extend(tile.constants(shape));
    let key = format!("grad_input {name} {:?} {:?}", ctx.options().shader_checks, consts);
    let pipeline = ctx.pipeline(key, &module, &consts)?;
    let tiles = (shape.in_hw[0] * shape.in_hw[1]).div_ceil(tile.span());
    ctx.scoped(|| {
        for s in &slices {
            // In this plan "in" is grad_output (read) and "out" is grad_input (written).
            let (b0, b1) = channel_blocks(shape.in_per_group(), tile.ic_block(), &s.oc);
            let grid = grid(ctx, s.samples.len() * (b1 - b0) * tiles);
            // The shader's `Slice` is the gather kernels' (go_* and gi_* for in_* and out_*).
            let u = SliceUniform::new(s, (b0, b1), grid.0);
            let go = &grad_output.chunks()[s.in_chunk];
            let gi = &grad_input.chunks()[s.out_chunk];
            dispatch_buffers(ctx, pass, &pipeline, bytemuck::bytes_of(&u), &[go, weight, gi], grid);
        }
        Ok(())
    })
}

/// This kernel's shaders for validation (`gpu::shader_sources`): the gather kernel at each channel block and
/// staged or not, and the weight flip (the other two forms run the forward's shaders).
pub(crate) fn shader_variants() -> Vec<crate::gpu::ShaderVariant> {
    let tiles = [(4, 1, true), (2, 2, true), (1, 4, true), (1, 8, true), (4, 1, false)]
        .map(|(px, ic_vecs, staged)| GatherTile { px, ic_vecs, co_chunk: 1, staged });
    let variants = Io::variants().into_iter().flat_map(|io| {
        let key = io.key();
        let gathers = tiles.iter().map(move |t| (SHADER_NAME, t.module_name(io), source(t, io)));
        gathers.chain([(FLIP_SHADER_NAME, format!("{FLIP_SHADER_NAME} {key}"), flip_source(io))])
    });
    variants.collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(input: [usize; 4], weight: [usize; 4], stride: i64, groups: i64) -> ConvShape {
        let params = ConvTranspose2dOptions { stride: [stride, stride], groups, ..Default::default() };
        params.resolve(&input, &weight, None).unwrap()
    }

    #[test]
    fn gather_tiles_follow_the_groups_channels_the_plane_and_the_kernel() {
        let t = |input, weight, stride, groups| {
            let t = GatherTile::for_shape(&shape(input, weight, stride, groups));
            (t.px, t.ic_vecs, t.co_chunk, t.staged)
        };
        // kb75: groups of 8 x 16 channels, 15 taps; kb81: 32 x 64, 9 taps (64 output channels in five chunks).
        assert_eq!(t([16, 32, 128, 256], [32, 16, 3, 5], 2, 4), (2, 2, 16, true));
        assert_eq!(t([16, 32, 64, 128], [32, 64, 3, 3], 5, 1), (1, 8, 14, true));
        // 16 input channels a group: one block of 4 vec4s; 48: two blocks of 8 vec4s, the second partial.
        assert_eq!(t([16, 16, 64, 128], [16, 64, 3, 3], 5, 1), (1, 4, 28, true));
        assert_eq!(t([16, 48, 64, 128], [48, 64, 3, 3], 5, 1), (1, 8, 14, true));
        // A plane smaller than a workgroup's pixels; 3 channels a group.
        assert_eq!(t([2, 6, 20, 20], [6, 5, 3, 3], 2, 2), (1, 1, 5, true));
        assert_eq!(t([2, 6, 48, 50], [6, 5, 3, 3], 2, 2), (4, 1, 5, true));
        // One output channel's taps beyond the staged weights' room: read from storage.
        assert_eq!(t([1, 2, 3, 3], [2, 3, 33, 33], 1, 1), (1, 1, 3, false));
    }
}
