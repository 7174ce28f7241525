//! The GPU backend: context ([`context`]), buffers ([`buffers`]), the slice plan for large tensors, and one
//! module per algorithm. [`conv_transpose2d`] is the single entry point of the forward; [`select`] the single
//! place that picks its algorithm for a shape. The backward pass ([`backward`]) runs one kernel per gradient
//! ([`grad_input`], [`grad_weight`], [`grad_bias`]); [`elementwise`] holds what a training loop adds.

pub(crate) mod absmax;
pub mod backward;
pub mod context;
pub mod elementwise;
pub mod forward;
pub(crate) mod kernel;
pub mod memory;
pub mod select;
pub(crate) mod slices;
pub mod timing;
pub mod tune;

use backward::{grad_bias, grad_input, grad_weight};
use forward::{coop, coop_nhwc, direct, gather, gemm, rows, winograd};

pub use backward::{
    conv_transpose2d_backward, conv_transpose2d_backward_host, conv_transpose2d_backward_into,
    conv_transpose2d_backward_with, BackwardKernels, GpuGradients,
};
pub use context::{GpuContext, GpuOptions, ShaderChecks};
pub use forward::gemm::GemmKernel;
pub use memory::GpuTensor;
pub use timing::GpuTimer;

use crate::error::{ConvtError, Result};
use crate::params::{ConvShape, ConvTranspose2dParams};
use crate::precision::Precision;
use crate::tensor::Tensor;

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
        Self::candidates().into_iter().chain(Self::fast_candidates()).collect()
    }

    /// The strategy of this build with this [`Strategy::name`].
    pub fn from_name(name: &str) -> Option<Strategy> {
        Self::all().into_iter().find(|s| s.name() == name)
    }

    pub fn name(&self) -> String {
        match self {
            Strategy::Direct => "direct".into(),
            Strategy::Rows(r) => r.name(),
            Strategy::Gemm(t) => t.name(),
            Strategy::Coop(t) => t.name(),
            Strategy::CoopNhwc(t) => t.name(),
            Strategy::Winograd(t) => t.name(),
        }
    }

    /// The precision this strategy computes at.
    pub fn precision(&self) -> Precision {
        match self {
            Strategy::Gemm(gemm::Tile { operand: gemm::Operand::F16, .. })
            | Strategy::Coop(_)
            | Strategy::CoopNhwc(_) => Precision::Fast,
            _ => Precision::F32,
        }
    }

    /// How it computes, in words (what `convt` prints about the path that ran).
    pub fn arithmetic(&self) -> &'static str {
        match self {
            Strategy::Coop(_) | Strategy::CoopNhwc(_) => {
                "f16 operands on tensor cores (cooperative matrices), f32 accumulation"
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
            Strategy::Direct => (direct::SHADER.to_string(), direct::constants(shape, has_bias)?),
            Strategy::Rows(r) => (r.source(), r.constants(shape, has_bias)?),
            Strategy::Gemm(t) => (t.source(), kernel::shape_constants(shape, has_bias)),
            Strategy::Coop(t) => (t.source(), kernel::shape_constants(shape, has_bias)),
            Strategy::CoopNhwc(t) => (t.source(), coop_nhwc::constants(t, shape, has_bias)),
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
    /// `shape` here (for the padded-NHWC kernel: groups, channel counts, sizes).
    pub(crate) fn takes_shape(&self, ctx: &GpuContext, shape: &ConvShape) -> bool {
        match self {
            Strategy::Winograd(t) => t.check_on(ctx, shape).is_ok(),
            Strategy::CoopNhwc(t) => t.check(ctx, shape).is_ok(),
            _ => true,
        }
    }

    /// Encodes this strategy's kernel for `shape` into `pass`: the one place that maps a strategy to its
    /// kernel (the forward, and grad_input through the equivalent transposed convolution).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn encode(
        &self,
        ctx: &GpuContext,
        shape: &ConvShape,
        input: &GpuTensor,
        weight: &GpuTensor,
        bias: Option<&GpuTensor>,
        output: &GpuTensor,
        pass: &mut wgpu::ComputePass<'_>,
        in_flight: &mut memory::InFlight,
    ) -> Result<()> {
        match self {
            Strategy::Direct => direct::encode(ctx, shape, input, weight, bias, output, pass),
            Strategy::Rows(r) => rows::encode(ctx, shape, r, input, weight, bias, output, pass),
            Strategy::Gemm(tile) => {
                gemm::encode(ctx, shape, gemm::Geometry::Phases, tile, input, weight, bias, output, pass, in_flight)
            }
            Strategy::Coop(tile) => {
                gemm::encode(ctx, shape, gemm::Geometry::Phases, tile, input, weight, bias, output, pass, in_flight)
            }
            Strategy::CoopNhwc(tile) => {
                coop_nhwc::encode(ctx, shape, tile, input, weight, bias, output, pass, in_flight)
            }
            Strategy::Winograd(tile) => {
                winograd::encode(ctx, shape, tile, input, weight, bias, output, pass, in_flight)
            }
        }
    }
}

/// Every shader source of the GPU backend as (file name, variant name, WGSL), each generated variant included
/// (validated by naga in the tests).
pub fn shader_sources() -> Vec<(&'static str, String, String)> {
    let mut v = vec![(direct::SHADER_NAME, direct::SHADER_NAME.to_string(), direct::SHADER.to_string())];
    for (file, source) in [
        (grad_input::SHADER_NAME, grad_input::SHADER),
        (grad_input::FLIP_SHADER_NAME, grad_input::FLIP_SHADER),
        (grad_weight::REDUCE_SHADER_NAME, grad_weight::REDUCE_SHADER),
        (grad_bias::SHADER_NAME, grad_bias::SHADER),
        (elementwise::SHADER_NAME, elementwise::SHADER),
    ] {
        v.push((file, file.to_string(), source.to_string()));
    }
    v.extend(
        grad_weight::TILES
            .iter()
            .map(|&t| (grad_weight::SHADER_NAME, format!("grad_weight_{t}"), grad_weight::source(t))),
    );
    // The rows kernel of grad_weight at every CIG4 `RowsKernel::for_shape` makes (groups of up to 16 input
    // channels): the constant its source depends on (the rest of its layout are override constants).
    v.extend((1..=4).map(|cig4| {
        let k = grad_weight::RowsKernel { cig4, ocb: 16, kernel_w: 5, rb: 4, xw: 256 };
        (grad_weight::ROWS_SHADER_NAME, format!("grad_weight_rows cig4 {cig4}"), k.source())
    }));
    v.push((
        grad_weight::TAP_RANGE_SHADER_NAME,
        format!("{} + {}", grad_weight::TAP_RANGE_SHADER_NAME, grad_weight::SHADER_NAME),
        grad_weight::source(grad_weight::TILES[0]),
    ));
    v.extend(rows::VARIANTS.iter().map(|r| (rows::SHADER_NAME, r.name(), r.source())));
    // What the gather kernels share, and the shape's constants, have no entry point of their own: they are
    // validated inside a kernel that uses them.
    for file in [kernel::SHAPE_SHADER_NAME, gather::SHADER_NAME] {
        v.push((file, format!("{file} + {}", direct::SHADER_NAME), direct::SHADER.to_string()));
    }
    v.push((gemm::PACK_SHADER_NAME, gemm::PACK_SHADER_NAME.to_string(), gemm::PACK_SHADER.to_string()));
    v.push((absmax::SHADER_NAME, absmax::SHADER_NAME.to_string(), absmax::SHADER.to_string()));
    v.extend(gemm::TILES.iter().chain(gemm::F16_TILES).map(|t| (gemm::SHADER_NAME, t.name(), t.source())));
    v.extend(coop::COOP_TILES.iter().map(|t| (gemm::SHADER_NAME, t.name(), t.source())));
    v.extend(coop_nhwc::TILES.iter().map(|t| (coop_nhwc::SHADER_NAME, t.name(), t.source())));
    v.push((coop_nhwc::INPUT_SHADER_NAME, coop_nhwc::INPUT_SHADER_NAME.to_string(), coop_nhwc::input_shader()));
    v.push((
        coop_nhwc::SCALE_CHECK_SHADER_NAME,
        coop_nhwc::SCALE_CHECK_SHADER_NAME.to_string(),
        coop_nhwc::scale_check_shader(),
    ));
    v.push((coop_nhwc::WEIGHT_SHADER_NAME, coop_nhwc::WEIGHT_SHADER_NAME.to_string(), coop_nhwc::weight_shader()));
    // The scale functions have no entry point of their own: validated inside the shaders that use them.
    v.push((
        gemm::SCALE_SHADER_NAME,
        format!("{} + {}", gemm::SCALE_SHADER_NAME, coop_nhwc::INPUT_SHADER_NAME),
        coop_nhwc::input_shader(),
    ));
    v.extend(winograd::shader_variants());
    v
}

/// `conv_transpose2d` on GPU-resident tensors; the output stays on the GPU.
pub fn conv_transpose2d(
    ctx: &GpuContext,
    input: &GpuTensor,
    weight: &GpuTensor,
    bias: Option<&GpuTensor>,
    params: &ConvTranspose2dParams,
) -> Result<GpuTensor> {
    let shape = params.resolve(input.shape(), weight.shape(), bias.map(|b| b.shape()))?;
    let output = GpuTensor::empty(ctx, &shape.output_dims_as_given())?;
    conv_transpose2d_into(ctx, input, weight, bias, params, &output, None)?;
    Ok(output)
}

/// `conv_transpose2d` into an existing output tensor (of the output's exact shape), optionally timed into a
/// [`GpuTimer`] slot. Submits the work; it completes in queue order.
pub fn conv_transpose2d_into(
    ctx: &GpuContext,
    input: &GpuTensor,
    weight: &GpuTensor,
    bias: Option<&GpuTensor>,
    params: &ConvTranspose2dParams,
    output: &GpuTensor,
    timer: Option<(&GpuTimer, u32)>,
) -> Result<()> {
    conv_transpose2d_into_as(ctx, Precision::F32, input, weight, bias, params, output, timer).map(|_| ())
}

/// [`conv_transpose2d_into`] at a given [`Precision`]; returns the strategy that ran (see
/// [`Strategy::arithmetic`] for what it computed with).
#[allow(clippy::too_many_arguments)]
pub fn conv_transpose2d_into_as(
    ctx: &GpuContext,
    precision: Precision,
    input: &GpuTensor,
    weight: &GpuTensor,
    bias: Option<&GpuTensor>,
    params: &ConvTranspose2dParams,
    output: &GpuTensor,
    timer: Option<(&GpuTimer, u32)>,
) -> Result<Strategy> {
    let shape = params.resolve(input.shape(), weight.shape(), bias.map(|b| b.shape()))?;
    let strategy = select::forward(ctx, &shape, bias.is_some(), precision);
    conv_transpose2d_with(ctx, strategy, input, weight, bias, params, output, timer)?;
    Ok(strategy)
}

/// [`conv_transpose2d_into`] with a given algorithm instead of the selector's (for the tuner and tests).
#[allow(clippy::too_many_arguments)]
pub fn conv_transpose2d_with(
    ctx: &GpuContext,
    strategy: Strategy,
    input: &GpuTensor,
    weight: &GpuTensor,
    bias: Option<&GpuTensor>,
    params: &ConvTranspose2dParams,
    output: &GpuTensor,
    timer: Option<(&GpuTimer, u32)>,
) -> Result<()> {
    let shape = params.resolve(input.shape(), weight.shape(), bias.map(|b| b.shape()))?;
    if output.shape() != shape.output_dims_as_given() {
        return Err(ConvtError::ShapeMismatch {
            expected: shape.output_dims_as_given(),
            actual: output.shape().to_vec(),
        });
    }
    if !strategy.runs_on(ctx) {
        return Err(ConvtError::InvalidArgument(format!(
            "{} ({}) cannot run on {}",
            strategy.name(),
            strategy.arithmetic(),
            ctx.adapter_info().name
        )));
    }
    let mut encoder = ctx.device.create_command_encoder(&Default::default());
    let mut in_flight = memory::InFlight::default();
    {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("convt conv_transpose2d"),
            timestamp_writes: timer.map(|(t, slot)| t.pass_writes(slot)),
        });
        strategy.encode(ctx, &shape, input, weight, bias, output, &mut pass, &mut in_flight)?;
    }
    in_flight.submit(ctx, encoder)
}

/// `conv_transpose2d` on host tensors: upload, run, read back.
pub fn conv_transpose2d_host(
    ctx: &GpuContext,
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    params: &ConvTranspose2dParams,
) -> Result<Tensor> {
    conv_transpose2d_host_as(ctx, Precision::F32, input, weight, bias, params).map(|(t, _)| t)
}

/// [`conv_transpose2d_host`] at a given [`Precision`]; also returns the strategy that ran.
pub fn conv_transpose2d_host_as(
    ctx: &GpuContext,
    precision: Precision,
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    params: &ConvTranspose2dParams,
) -> Result<(Tensor, Strategy)> {
    let shape = params.resolve(input.shape(), weight.shape(), bias.map(|b| b.shape()))?;
    let x = GpuTensor::upload(ctx, input)?;
    let w = GpuTensor::upload(ctx, weight)?;
    let b = bias.map(|b| GpuTensor::upload(ctx, b)).transpose()?;
    let output = GpuTensor::empty(ctx, &shape.output_dims_as_given())?;
    let strategy = conv_transpose2d_into_as(ctx, precision, &x, &w, b.as_ref(), params, &output, None)?;
    Ok((output.download(ctx)?, strategy))
}
