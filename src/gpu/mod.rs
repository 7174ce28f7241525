//! The GPU backend: context ([`context`]), buffers ([`buffers`]), the slice plan for large tensors, and one
//! module per algorithm. [`conv_transpose2d`] is the single entry point of the forward; [`select`] the single
//! place that picks its algorithm for a shape. The backward pass ([`backward`]) runs one kernel per gradient
//! ([`grad_input`], [`grad_weight`], [`grad_bias`]); [`elementwise`] holds what a training loop adds.

pub mod backward;
pub mod buffers;
pub mod ceilings;
pub mod context;
pub mod direct;
pub mod elementwise;
pub mod gemm;
pub mod grad_bias;
pub mod grad_input;
pub mod grad_weight;
pub(crate) mod kernel;
pub(crate) mod plan;
pub mod timing;
pub mod tune;

pub use backward::{
    conv_transpose2d_backward, conv_transpose2d_backward_host, conv_transpose2d_backward_into, GpuGradients,
};
pub use buffers::GpuTensor;
pub use context::{GpuContext, GpuOptions, ShaderChecks};
pub use timing::GpuTimer;

use crate::error::{ConvtError, Result};
use crate::params::{ConvShape, ConvTranspose2dParams};
use crate::tensor::Tensor;

/// The algorithms convt can run a transposed convolution with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// Gather form, one invocation per output pixel and channel block (`shaders/direct.wgsl`).
    Direct,
    /// Implicit GEMM per stride phase with this workgroup tile (`shaders/gemm.wgsl`).
    Gemm(gemm::Tile),
}

impl Strategy {
    /// Every strategy the selector may choose: the tests run each on the software driver.
    pub fn candidates() -> Vec<Strategy> {
        std::iter::once(Strategy::Direct).chain(gemm::TILES.iter().map(|t| Strategy::Gemm(*t))).collect()
    }

    pub fn name(&self) -> String {
        match self {
            Strategy::Direct => "direct".into(),
            Strategy::Gemm(t) => t.name(),
        }
    }
}

/// Every shader source of the GPU backend as (file name, variant name, WGSL), each generated variant included
/// (validated by naga in the tests).
pub fn shader_sources() -> Vec<(&'static str, String, String)> {
    let mut v = vec![
        (direct::SHADER_NAME, direct::SHADER_NAME.to_string(), direct::SHADER.to_string()),
        (ceilings::FMA_SHADER.0, ceilings::FMA_SHADER.0.to_string(), ceilings::FMA_SHADER.1.to_string()),
        (ceilings::COPY_SHADER.0, ceilings::COPY_SHADER.0.to_string(), ceilings::COPY_SHADER.1.to_string()),
    ];
    for (file, source) in [
        (grad_input::SHADER_NAME, grad_input::SHADER),
        (grad_input::FLIP_SHADER_NAME, grad_input::FLIP_SHADER),
        (grad_weight::SHADER_NAME, grad_weight::SHADER),
        (grad_weight::REDUCE_SHADER_NAME, grad_weight::REDUCE_SHADER),
        (grad_bias::SHADER_NAME, grad_bias::SHADER),
        (elementwise::SHADER_NAME, elementwise::SHADER),
    ] {
        v.push((file, file.to_string(), source.to_string()));
    }
    v.push((gemm::PACK_SHADER_NAME, gemm::PACK_SHADER_NAME.to_string(), gemm::PACK_SHADER.to_string()));
    v.extend(gemm::TILES.iter().map(|t| (gemm::SHADER_NAME, t.name(), t.source())));
    v
}

/// Picks the algorithm for a shape on this context's adapter: the one forced by the context's options, else
/// the autotuner's cached winner for (adapter, driver, shape), else a heuristic.
pub fn select(ctx: &GpuContext, shape: &ConvShape, has_bias: bool) -> Strategy {
    if let Some(forced) = ctx.options().strategy {
        return forced;
    }
    if let Some(tuned) = ctx.tuned().lookup(&tune::key(ctx.adapter_info(), shape, has_bias)) {
        return tuned;
    }
    // The GEMM tile wastes work when a group has few output channels, and its per-phase dispatches and
    // strided stores do not pay off when each output sums few products (few input channels per tap, large
    // stride): the gather kernel serves those (measured on the H100: kb75, kb81; docs/PERFORMANCE.md).
    let products_per_output =
        shape.in_per_group() * shape.kernel[0] * shape.kernel[1] / (shape.stride[0] * shape.stride[1]);
    if shape.out_per_group() >= 16 && shape.in_per_group() >= 8 && products_per_output >= 64 {
        Strategy::Gemm(gemm::pick_tile(shape))
    } else {
        Strategy::Direct
    }
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
    let shape = params.resolve(input.shape(), weight.shape(), bias.map(|b| b.shape()))?;
    conv_transpose2d_with(ctx, select(ctx, &shape, bias.is_some()), input, weight, bias, params, output, timer)
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
    let mut encoder = ctx.device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("convt conv_transpose2d"),
            timestamp_writes: timer.map(|(t, slot)| t.pass_writes(slot)),
        });
        match strategy {
            Strategy::Direct => direct::encode(ctx, &shape, input, weight, bias, output, &mut pass)?,
            Strategy::Gemm(tile) => gemm::encode(ctx, &shape, tile, input, weight, bias, output, &mut pass)?,
        }
    }
    ctx.scoped(|| {
        ctx.queue.submit([encoder.finish()]);
        Ok(())
    })
}

/// `conv_transpose2d` on host tensors: upload, run, read back.
pub fn conv_transpose2d_host(
    ctx: &GpuContext,
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    params: &ConvTranspose2dParams,
) -> Result<Tensor> {
    params.resolve(input.shape(), weight.shape(), bias.map(|b| b.shape()))?;
    let x = GpuTensor::upload(ctx, input)?;
    let w = GpuTensor::upload(ctx, weight)?;
    let b = bias.map(|b| GpuTensor::upload(ctx, b)).transpose()?;
    conv_transpose2d(ctx, &x, &w, b.as_ref(), params)?.download(ctx)
}
