//! The GPU backend. The functional calls ([`conv_transpose2d`], [`conv_transpose2d_backward`] and their `_into`
//! forms) resolve the problem, ask [`select`] for each pass's kernel (forced option, tuning cache, heuristic) and
//! encode it. The kernels: `forward/` (one module per algorithm, [`Strategy`] names them), `backward/` (one per
//! gradient); what they share: `kernel` (bindings, dispatch), `slices` (splitting tensors larger than one binding),
//! `plan` (weights prepared once for a layer), `memory` (the one place that creates GPU buffers). `context` holds
//! the device, pipelines and options, [`tune`] the tuning cache, [`elementwise`] what a training loop adds.

pub(crate) mod absmax;
pub(crate) mod backward;
pub(crate) mod context;
pub(crate) mod convert;
pub mod elementwise;
pub(crate) mod forward;
pub(crate) mod kernel;
pub(crate) mod memory;
pub(crate) mod nhwc_copy;
pub(crate) mod plan;
pub(crate) mod profile;
pub mod select;
pub(crate) mod slices;
pub(crate) mod timing;
pub mod tune;
pub(crate) mod wgsl;

use backward::{grad_bias, grad_input, grad_weight, grad_weight_nhwc};
use forward::gemm::GemmKernel;
use forward::{coop, coop_nhwc, coop_winograd, direct, gemm, rows, winograd};
use wgsl::shape_constants;

pub use backward::grad_input::GradInputKernel;
pub use backward::grad_weight::GradWeightKernel;
pub use backward::{conv_transpose2d_backward, conv_transpose2d_backward_into, GpuGradients};
pub use context::{describe, list_adapters, AdapterSummary, GpuContext, GpuOptions, ShaderChecks, REQUIRED_LIMITS};
pub use memory::GpuTensor;
pub use profile::{CallProfile, Dispatch, Profiler};
pub use timing::GpuTimer;

use crate::error::{ConvtError, Result};
use crate::params::{ConvShape, ConvTranspose2dOptions};
use crate::precision::Precision;

/// The algorithms convt can run a transposed convolution with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// Gather form, one invocation per output pixel and channel block (`shaders/forward/direct.wgsl`). Exact.
    Direct,
    /// Gather form, one workgroup per few output rows of one stride phase and channel block, their weights
    /// staged in workgroup memory (`shaders/forward/rows.wgsl`). Exact.
    Rows(rows::Rows),
    /// Implicit GEMM per stride phase with this register tile (`shaders/forward/gemm.wgsl`); exact with f32 operands,
    /// precision `fast` with f16 operands.
    Gemm(gemm::Tile),
    /// Implicit GEMM on cooperative matrices (tensor cores): f16 operands, f32 accumulation. Precision `fast`.
    Coop(coop::CoopTile),
    /// One group on cooperative matrices, one stride phase per dispatch, operands prepared as padded f16 NHWC and
    /// loaded straight from storage (`shaders/forward/coop_nhwc.wgsl`). Precision `fast`.
    CoopNhwc(coop_nhwc::NhwcTile),
    /// Winograd along W on cooperative matrices: one GEMM per transform point over the transformed f16 input and
    /// weight, stride 1 only (`shaders/forward/coop_winograd.wgsl`). Precision `fast`.
    CoopWinograd(coop_winograd::CoopWinoTile),
    /// Fused Winograd transform with this tile (`shaders/forward/winograd.wgsl`): stride 1 without dilation only, f32,
    /// fewer products than the GEMM (its transforms round a little more: held to the f32 tolerance).
    Winograd(winograd::WinoTile),
}

impl Strategy {
    /// Every exact strategy the selector may choose: the tests run each on the software driver.
    pub fn candidates() -> Vec<Strategy> {
        std::iter::once(Strategy::Direct)
            .chain(rows::VARIANTS.iter().map(|r| Strategy::Rows(*r)))
            .chain(gemm::TILES.iter().map(|t| Strategy::Gemm(*t)))
            .chain(winograd::WINO_TILES.iter().map(|t| Strategy::Winograd(*t)))
            .collect()
    }

    /// Every strategy of precision `fast` (f16 operands), whether or not this adapter can run it.
    pub fn fast_candidates() -> Vec<Strategy> {
        gemm::F16_TILES
            .iter()
            .map(|t| Strategy::Gemm(*t))
            .chain(coop::COOP_TILES.iter().map(|t| Strategy::Coop(*t)))
            .chain(coop_nhwc::TILES.iter().map(|t| Strategy::CoopNhwc(*t)))
            .collect()
    }

    /// Kernels that run only where forced by name (`CONVT_STRATEGY`, `GpuOptions::strategy`), neither the
    /// selector's nor the tuner's: the Winograd tensor-core tiles, measured slower than the padded-NHWC kernel, whose
    /// transforms also mix a tile's input pixels, so that an Inf or NaN in the input can make the tile's other
    /// outputs NaN (docs/RELIABILITY.md).
    pub fn forced_only() -> Vec<Strategy> {
        coop_winograd::TILES.iter().map(|t| Strategy::CoopWinograd(*t)).collect()
    }

    /// The candidates for `precision` that `ctx`'s device can run: for `fast`, its f16 strategies where it
    /// has them, and the exact ones too (on an adapter without f16 they are all `fast` can use).
    pub fn candidates_for(ctx: &GpuContext, precision: Precision) -> Vec<Strategy> {
        match precision {
            Precision::F32 => Self::candidates(),
            Precision::Fast => {
                Self::fast_candidates().into_iter().filter(|s| s.runs_on(ctx)).chain(Self::candidates()).collect()
            }
        }
    }

    /// Every strategy of this build (for looking one up by name).
    pub fn all() -> Vec<Strategy> {
        Self::candidates().into_iter().chain(Self::fast_candidates()).chain(Self::forced_only()).collect()
    }

    /// The strategy of this build with this [`Strategy::name`].
    pub fn from_name(name: &str) -> Option<Strategy> {
        Self::all().into_iter().find(|s| s.name() == name)
    }

    /// The strategy's name, as `CONVT_STRATEGY`, the tuning cache, `convt bench` and `convt tune` spell it
    /// (`direct`, or the algorithm and its tile); [`Strategy::from_name`] reads it back.
    pub fn name(&self) -> String {
        match self {
            Strategy::Direct => "direct".into(),
            Strategy::Rows(r) => r.name(),
            Strategy::Gemm(t) => t.name(),
            Strategy::Coop(t) => t.name(),
            Strategy::CoopNhwc(t) => t.name(),
            Strategy::CoopWinograd(t) => t.name(),
            Strategy::Winograd(t) => t.name(),
        }
    }

    /// The precision this strategy computes at.
    pub fn precision(&self) -> Precision {
        match self {
            Strategy::Gemm(gemm::Tile { operand: gemm::Operand::F16, .. })
            | Strategy::Coop(_)
            | Strategy::CoopNhwc(_)
            | Strategy::CoopWinograd(_) => Precision::Fast,
            _ => Precision::F32,
        }
    }

    /// How it computes, in words (what `convt` prints about the path that ran).
    pub fn arithmetic(&self) -> &'static str {
        match self {
            Strategy::Coop(_) | Strategy::CoopNhwc(_) => {
                "f16 operands on tensor cores (cooperative matrices), f32 accumulation"
            }
            Strategy::CoopWinograd(_) => {
                "f16 Winograd-transformed operands on tensor cores (cooperative matrices), f32 accumulation"
            }
            Strategy::Gemm(gemm::Tile { operand: gemm::Operand::F16, .. }) => {
                "f16 operands on the FMA units (no cooperative matrices here), f32 accumulation"
            }
            Strategy::Winograd(_) => "f32 through Winograd transforms (fewer products, a little more rounding)",
            _ => "exact f32",
        }
    }

    /// The WGSL source and the override constants this strategy's kernel is compiled from for a shape (what
    /// its pipeline is made of; for inspection tools such as `tools/kernel-stats`).
    pub fn shader(&self, shape: &ConvShape, has_bias: bool) -> Result<(String, Vec<(&'static str, f64)>)> {
        Ok(match self {
            Strategy::Direct => (direct::source(wgsl::operands::Io::F32), direct::constants(shape, has_bias)?),
            Strategy::Rows(r) => (r.source(wgsl::operands::Io::F32), r.constants(shape, has_bias)?),
            Strategy::Gemm(t) => (t.source(wgsl::operands::Io::F32), shape_constants(shape, has_bias)),
            Strategy::Coop(t) => (t.source(wgsl::operands::Io::F32), shape_constants(shape, has_bias)),
            Strategy::CoopNhwc(t) => (t.source(wgsl::operands::Io::F32), coop_nhwc::constants(t, shape, has_bias)),
            Strategy::CoopWinograd(t) => coop_winograd::shader(t, shape, has_bias)?,
            Strategy::Winograd(t) => winograd::shader(t, shape, has_bias)?,
        })
    }

    /// Whether `ctx`'s device has what this strategy needs (f16 shaders; cooperative matrices) and room for
    /// its workgroup.
    pub fn runs_on(&self, ctx: &GpuContext) -> bool {
        let limits = ctx.device.limits();
        match self {
            Strategy::Direct => true,
            Strategy::Rows(r) => r.fits(&limits),
            Strategy::Gemm(t) => (t.operand == gemm::Operand::F32 || ctx.has_f16()) && t.fits(&limits),
            Strategy::Coop(t) => ctx.has_coop_f16() && t.fits(&limits),
            Strategy::CoopNhwc(t) => ctx.has_coop_f16() && t.fits(&limits),
            Strategy::CoopWinograd(t) => ctx.has_coop_f16() && t.fits(&limits),
            Strategy::Winograd(t) => t.is_consistent(),
        }
    }

    /// Whether this strategy can compute `shape` on `ctx`'s device: [`Strategy::runs_on`], and for the Winograd
    /// kernel a stride-1 undilated shape whose kernel its transforms take, with its transformed weight within
    /// one binding (every other strategy computes every shape).
    pub fn computes(&self, ctx: &GpuContext, shape: &ConvShape) -> bool {
        self.runs_on(ctx) && self.takes_shape(ctx, shape)
    }

    /// The shape part of [`Strategy::computes`]: false only for a Winograd or padded-NHWC tile that cannot take
    /// `shape` here (for the padded-NHWC kernel: groups, channel counts, sizes), whether or not this adapter runs
    /// it.
    pub fn takes_shape(&self, ctx: &GpuContext, shape: &ConvShape) -> bool {
        match self {
            Strategy::Winograd(t) => t.check_on(ctx, shape).is_ok(),
            Strategy::CoopNhwc(t) => t.check(ctx, shape).is_ok(),
            Strategy::CoopWinograd(t) => t.check(ctx, shape).is_ok(),
            _ => true,
        }
    }

    /// Bytes of the weight as this strategy prepares it for `shape` (it must fit one storage binding), or `None`
    /// for a kernel that reads the weight as it is or a shape it does not take.
    pub fn prepared_weight_bytes(&self, shape: &ConvShape) -> Option<u64> {
        let weight = shape.weight_dims().iter().fold(4u64, |acc, &v| acc.saturating_mul(v as u64));
        // (f32 bytes: a half-precision weight's packed copy takes half of it, and a budget check may ask for more
        // than it needs, never less.)
        match self {
            Strategy::Direct | Strategy::Rows(_) => None,
            Strategy::Gemm(_) | Strategy::Coop(_) => Some(weight),
            Strategy::CoopNhwc(_) => Some(coop_nhwc::packed_weight_bytes(shape)),
            Strategy::CoopWinograd(t) => coop_winograd::transformed_weight_bytes(t, shape),
            Strategy::Winograd(t) => t.transformed_bytes(shape).ok(),
        }
    }

    /// Prepares `weight` as this strategy's kernel reads it for `shape` (packed, transformed; see
    /// [`plan`]) in a submission of its own, or `None` for a kernel that reads the weight as it is.
    pub(crate) fn prepare_weight(
        &self,
        ctx: &GpuContext,
        shape: &ConvShape,
        weight: &GpuTensor,
    ) -> Result<Option<plan::PreparedWeight>> {
        let Some(bytes) = self.prepared_weight_bytes(shape).filter(|_| self.runs_on(ctx)) else { return Ok(None) };
        let what = || format!("the weight prepared for {}", self.name());
        let reserved = ctx.pool.reserve_held(bytes, ctx.memory_budget(), &what)?;
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        let (buffer, maxima) = {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("convt weight preparation"),
                timestamp_writes: None,
            });
            match self {
                Strategy::Gemm(tile) => gemm::prepare_weight(ctx, shape, tile, weight, &mut pass)?,
                Strategy::Coop(tile) => gemm::prepare_weight(ctx, shape, tile, weight, &mut pass)?,
                Strategy::CoopNhwc(tile) => coop_nhwc::prepare_weight(ctx, shape, tile, weight, &mut pass)?,
                Strategy::CoopWinograd(tile) => coop_winograd::prepare_weight(ctx, shape, tile, weight, &mut pass)?,
                Strategy::Winograd(tile) => (winograd::prepare_weight(ctx, shape, tile, weight, &mut pass)?, None),
                Strategy::Direct | Strategy::Rows(_) => return Ok(None),
            }
        };
        ctx.scoped(|| {
            ctx.queue.submit([encoder.finish()]);
            Ok(())
        })?;
        // The f16 kernels' weight scale: its largest magnitude, found once here instead of on every call, and kept
        // on the GPU (each call carries it into its own maxima: no wait for the GPU here).
        Ok(Some(plan::PreparedWeight { buffer, maxima, _reserved: reserved }))
    }

    /// Encodes this strategy's kernel for `shape` into `pass`, reading the weight as prepared (by
    /// [`Strategy::prepare_weight`] for this shape) where `w` has it, else preparing it in the same pass: the one place that
    /// maps a strategy to its kernel (the forward, and grad_input through the equivalent transposed convolution).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn encode(
        &self,
        ctx: &GpuContext,
        shape: &ConvShape,
        input: &GpuTensor,
        w: kernel::Weight<'_>,
        bias: Option<&GpuTensor>,
        output: &GpuTensor,
        pass: &mut wgpu::ComputePass<'_>,
        in_flight: &mut memory::InFlight,
    ) -> Result<()> {
        let phases = gemm::Geometry::Phases;
        match self {
            Strategy::Direct => direct::encode(ctx, shape, input, w.tensor, bias, output, pass),
            Strategy::Rows(r) => rows::encode(ctx, shape, r, input, w.tensor, bias, output, pass),
            Strategy::Gemm(tile) => gemm::encode(ctx, shape, phases, tile, input, w, bias, output, pass, in_flight),
            Strategy::Coop(tile) => gemm::encode(ctx, shape, phases, tile, input, w, bias, output, pass, in_flight),
            Strategy::CoopNhwc(tile) => coop_nhwc::encode(ctx, shape, tile, input, w, bias, output, pass, in_flight),
            Strategy::CoopWinograd(tile) => {
                coop_winograd::encode(ctx, shape, tile, input, w, bias, output, pass, in_flight)
            }
            Strategy::Winograd(tile) => winograd::encode(ctx, shape, tile, input, w, bias, output, pass, in_flight),
        }
    }
}

/// An error unless `others` and `bias` have `input`'s dtype (PyTorch's rule: one dtype per call).
pub(crate) fn check_dtypes(input: &GpuTensor, others: &[(&str, &GpuTensor)], bias: Option<&GpuTensor>) -> Result<()> {
    let dtype = input.dtype();
    for (what, t) in others.iter().copied().chain(bias.map(|b| ("the bias", b))) {
        t.expect_dtype(what, dtype)?;
    }
    Ok(())
}

/// One shader variant: its file under `shaders/`, the variant's name, its WGSL.
pub type ShaderVariant = (&'static str, String, String);

/// Every shader source of the GPU backend, each generated variant included, from each kernel module's own list
/// (validated by naga in the tests, which need no GPU).
pub fn shader_sources() -> Vec<ShaderVariant> {
    [
        direct::shader_variants,
        rows::shader_variants,
        gemm::shader_variants,
        coop::shader_variants,
        coop_nhwc::shader_variants,
        coop_winograd::shader_variants,
        winograd::shader_variants,
        grad_input::shader_variants,
        grad_weight::shader_variants,
        grad_weight_nhwc::shader_variants,
        grad_bias::shader_variants,
        absmax::shader_variants,
        elementwise::shader_variants,
        convert::shader_variants,
    ]
    .into_iter()
    .flat_map(|variants| variants())
    .collect()
}

/// How one forward call runs where the caller decides: a kernel forced instead of the selector's, and a
/// [`GpuTimer`] slot that times the call's compute pass. The default leaves the choice to [`select`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Run<'a> {
    /// The forward kernel to run instead of the selector's choice; `None` lets [`select`] choose.
    pub kernel: Option<Strategy>,
    /// A timer and the slot (below its [`GpuTimer::capacity`]) that records the call's compute pass.
    pub timer: Option<(&'a GpuTimer, u32)>,
}

/// [`Run`] for a backward call: grad_input's and grad_weight's kernels where the caller forces them.
#[derive(Debug, Clone, Copy, Default)]
pub struct BackwardRun<'a> {
    /// The grad_input kernel to run instead of the selector's choice; `None` lets [`select`] choose.
    pub grad_input: Option<GradInputKernel>,
    /// The grad_weight kernel to run instead of the selector's choice; `None` lets [`select`] choose.
    pub grad_weight: Option<GradWeightKernel>,
    /// A timer and the slot (below its [`GpuTimer::capacity`]) that records the call's one compute pass (all three
    /// gradients).
    pub timer: Option<(&'a GpuTimer, u32)>,
}

/// `F.conv_transpose2d(input, weight, bias, **options)` on GPU-resident tensors at `options.precision`; the
/// output stays on the GPU, in the input's dtype. The weight and bias must have the input's dtype, as in PyTorch.
pub fn conv_transpose2d(
    ctx: &GpuContext,
    input: &GpuTensor,
    weight: &GpuTensor,
    bias: Option<&GpuTensor>,
    options: &ConvTranspose2dOptions,
) -> Result<GpuTensor> {
    let shape = options.resolve(input.shape(), weight.shape(), bias.map(|b| b.shape()))?;
    check_dtypes(input, &[("the weight", weight)], bias)?;
    let output = GpuTensor::empty_with(ctx, &shape.output_dims_as_given(), input.dtype())?;
    conv_transpose2d_into(ctx, input, weight, bias, options, &output, Run::default())?;
    Ok(output)
}

/// [`conv_transpose2d`] into an existing output tensor (of the output's exact shape and the input's dtype), run as
/// `run` says. Submits
/// the work (it completes in queue order) and returns the kernel that ran (see [`Strategy::arithmetic`] for what
/// it computed with). A forced kernel that cannot run on this adapter is an error.
pub fn conv_transpose2d_into(
    ctx: &GpuContext,
    input: &GpuTensor,
    weight: &GpuTensor,
    bias: Option<&GpuTensor>,
    options: &ConvTranspose2dOptions,
    output: &GpuTensor,
    run: Run<'_>,
) -> Result<Strategy> {
    let shape = options.resolve(input.shape(), weight.shape(), bias.map(|b| b.shape()))?;
    let strategy = match run.kernel {
        Some(kernel) => kernel,
        None => select::forward(ctx, &shape, bias.is_some(), options.precision, input.dtype()),
    };
    let weight = kernel::Weight { tensor: weight, prepared: None };
    forward_prepared(ctx, strategy, &shape, input, weight, bias, output, run.timer)?;
    Ok(strategy)
}

/// The forward of `shape` (resolved from these tensors) with `strategy`, reading the weight as prepared for it
/// where `weight` has it: every forward call ends here.
#[allow(clippy::too_many_arguments)]
pub(crate) fn forward_prepared(
    ctx: &GpuContext,
    strategy: Strategy,
    shape: &ConvShape,
    input: &GpuTensor,
    weight: kernel::Weight<'_>,
    bias: Option<&GpuTensor>,
    output: &GpuTensor,
    timer: Option<(&GpuTimer, u32)>,
) -> Result<()> {
    if output.shape() != shape.output_dims_as_given() {
        return Err(ConvtError::ShapeMismatch {
            expected: shape.output_dims_as_given(),
            actual: output.shape().to_vec(),
        });
    }
    check_dtypes(input, &[("the weight", weight.tensor), ("the output", output)], bias)?;
    if !strategy.runs_on(ctx) {
        return Err(ConvtError::InvalidArgument(format!(
            "{} ({}) cannot run on {}",
            strategy.name(),
            strategy.arithmetic(),
            ctx.adapter_info().name
        )));
    }
    output.mark_written();
    let mut encoder = ctx.device.create_command_encoder(&Default::default());
    let mut in_flight = memory::InFlight::default();
    {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("convt conv_transpose2d"),
            timestamp_writes: timer.map(|(t, slot)| t.pass_writes(slot)),
        });
        // Every kernel reads the tensors as stored and writes the output's dtype; only a sum that later slices add
        // to (a sample's input channels over several bindings) goes through an f32 result, rounded once at the end.
        let accumulates = slices::plan(shape, input, output).iter().any(|s| s.accumulate);
        let result = convert::f32_result(ctx, output, accumulates)?;
        let out = result.as_ref().unwrap_or(output);
        strategy.encode(ctx, shape, input, weight, bias, out, &mut pass, &mut in_flight)?;
        convert::finish(ctx, result, output, &mut pass, &mut in_flight)?;
    }
    in_flight.submit(ctx, encoder)?;
    output.mark_written();
    Ok(())
}
