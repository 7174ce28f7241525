//! The backward pass on the GPU: [`conv_transpose2d_backward`] computes the gradients of the input, the weight
//! and the bias from `grad_output` with three kernels ([`super::grad_input`], [`super::grad_weight`],
//! [`super::grad_bias`]) in one compute pass, through the same slice plan as the forward, so tensors larger
//! than one storage binding work the same way. The weight and bias gradients are reductions in a fixed order
//! (no float atomics): the same inputs give the same bits on every run.

pub mod grad_bias;
pub mod grad_input;
pub mod grad_weight;

use crate::error::{ConvtError, Result};
use crate::gpu::backward::grad_input::GradInputKernel;
use crate::gpu::backward::grad_weight::GradWeightKernel;
use crate::gpu::context::GpuContext;
use crate::gpu::memory::{GpuTensor, InFlight};
use crate::gpu::select;
use crate::gpu::timing::GpuTimer;
use crate::gradients::Gradients;
use crate::params::ConvTranspose2dParams;
use crate::tensor::Tensor;

/// The three gradients, resident on the GPU.
pub struct GpuGradients {
    pub grad_input: GpuTensor,
    pub grad_weight: GpuTensor,
    pub grad_bias: Option<GpuTensor>,
}

impl GpuGradients {
    /// Uninitialised gradients (NaN-poisoned when the context asks for it) for this problem.
    pub fn empty(
        ctx: &GpuContext,
        input: &GpuTensor,
        weight: &GpuTensor,
        bias: Option<&GpuTensor>,
        params: &ConvTranspose2dParams,
    ) -> Result<Self> {
        let shape = params.resolve(input.shape(), weight.shape(), bias.map(|b| b.shape()))?;
        Ok(Self {
            grad_input: GpuTensor::empty(ctx, &shape.input_dims_as_given())?,
            grad_weight: GpuTensor::empty(ctx, &shape.weight_dims())?,
            grad_bias: bias.map(|_| GpuTensor::empty(ctx, &[shape.out_channels])).transpose()?,
        })
    }

    /// Copies the gradients back to the host.
    pub fn download(&self, ctx: &GpuContext) -> Result<Gradients> {
        Ok(Gradients {
            grad_input: self.grad_input.download(ctx)?,
            grad_weight: self.grad_weight.download(ctx)?,
            grad_bias: self.grad_bias.as_ref().map(|b| b.download(ctx)).transpose()?,
        })
    }
}

/// The gradients of `conv_transpose2d(input, weight, bias)` given `grad_output`, on GPU-resident tensors.
/// `bias` only says whether there is one (its values do not enter the gradients).
pub fn conv_transpose2d_backward(
    ctx: &GpuContext,
    input: &GpuTensor,
    weight: &GpuTensor,
    bias: Option<&GpuTensor>,
    grad_output: &GpuTensor,
    params: &ConvTranspose2dParams,
) -> Result<GpuGradients> {
    let grads = GpuGradients::empty(ctx, input, weight, bias, params)?;
    conv_transpose2d_backward_into(ctx, input, weight, bias, grad_output, params, &grads, None)?;
    Ok(grads)
}

/// [`conv_transpose2d_backward`] into existing gradient tensors, optionally timed into a [`GpuTimer`] slot.
/// Submits the work; it completes in queue order.
#[allow(clippy::too_many_arguments)]
pub fn conv_transpose2d_backward_into(
    ctx: &GpuContext,
    input: &GpuTensor,
    weight: &GpuTensor,
    bias: Option<&GpuTensor>,
    grad_output: &GpuTensor,
    params: &ConvTranspose2dParams,
    grads: &GpuGradients,
    timer: Option<(&GpuTimer, u32)>,
) -> Result<()> {
    conv_transpose2d_backward_with(
        ctx,
        BackwardKernels::default(),
        input,
        weight,
        bias,
        grad_output,
        params,
        grads,
        timer,
    )
    .map(|_| ())
}

/// The kernels a backward call runs where the caller picks them (`convt tune --backward` times each candidate this
/// way); `None` leaves the choice to [`crate::gpu::select`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackwardKernels {
    pub grad_input: Option<GradInputKernel>,
    pub grad_weight: Option<GradWeightKernel>,
}

/// [`conv_transpose2d_backward_into`] with the kernels `kernels` names (the selector's elsewhere). Returns the
/// kernels that ran; a kernel that does not compute this shape on this device is an error.
#[allow(clippy::too_many_arguments)]
pub fn conv_transpose2d_backward_with(
    ctx: &GpuContext,
    kernels: BackwardKernels,
    input: &GpuTensor,
    weight: &GpuTensor,
    bias: Option<&GpuTensor>,
    grad_output: &GpuTensor,
    params: &ConvTranspose2dParams,
    grads: &GpuGradients,
    timer: Option<(&GpuTimer, u32)>,
) -> Result<(GradInputKernel, GradWeightKernel)> {
    let shape = params.resolve(input.shape(), weight.shape(), bias.map(|b| b.shape()))?;
    shape.check_grad_output(grad_output.shape())?;
    let cannot =
        |name: String| Err(ConvtError::InvalidArgument(format!("{name} does not compute this shape on this adapter")));
    let kernel = match kernels.grad_input {
        None => select::grad_input(ctx, &shape),
        Some(k) if k.computes(ctx, &shape) => k,
        Some(k) => return cannot(format!("grad_input kernel {}", k.name())),
    };
    let chunks = [input.chunks().len(), grad_output.chunks().len()];
    let gw_kernel = match kernels.grad_weight {
        None => select::grad_weight(ctx, &shape, chunks),
        Some(k) if k.computes(ctx, &shape, chunks) => k,
        Some(k) => return cannot(format!("grad_weight kernel {}", k.name())),
    };
    let expect = |t: &GpuTensor, dims: Vec<usize>| {
        if t.shape() == dims {
            Ok(())
        } else {
            Err(ConvtError::ShapeMismatch { expected: dims, actual: t.shape().to_vec() })
        }
    };
    expect(&grads.grad_input, shape.input_dims_as_given())?;
    expect(&grads.grad_weight, shape.weight_dims())?;
    let grad_bias = match (bias, &grads.grad_bias) {
        (Some(_), Some(gb)) => {
            expect(gb, vec![shape.out_channels])?;
            Some(gb)
        }
        (None, None) => None,
        (Some(_), None) => return Err(ConvtError::InvalidArgument("a layer with a bias needs a grad_bias".into())),
        (None, Some(_)) => return Err(ConvtError::InvalidArgument("grad_bias given for a layer without bias".into())),
    };

    grads.grad_input.mark_written();
    grads.grad_weight.mark_written();
    if let Some(gb) = grad_bias {
        gb.mark_written();
    }
    let mut encoder = ctx.device.create_command_encoder(&Default::default());
    let mut in_flight = InFlight::default();
    // Reductions split over several slices add up in place, from zero; an empty batch sums nothing: zero.
    let empty = shape.batch == 0;
    if empty || grad_weight::accumulates(&shape, input, grad_output) {
        encoder.clear_buffer(grads.grad_weight.single_buffer("grad_weight", ctx)?, 0, None);
    }
    if let Some(gb) = grad_bias.filter(|_| empty || grad_bias::accumulates(grad_output)) {
        encoder.clear_buffer(gb.single_buffer("grad_bias", ctx)?, 0, None);
    }
    {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("convt conv_transpose2d backward"),
            timestamp_writes: timer.map(|(t, slot)| t.pass_writes(slot)),
        });
        grad_input::encode(ctx, &shape, kernel, weight, grad_output, &grads.grad_input, &mut pass, &mut in_flight)?;
        grad_weight::encode(ctx, &shape, gw_kernel, input, grad_output, &grads.grad_weight, &mut pass, &mut in_flight)?;
        if let Some(gb) = grad_bias {
            grad_bias::encode(ctx, &shape, grad_output, gb, &mut pass)?;
        }
    }
    in_flight.submit(ctx, encoder)?;
    Ok((kernel, gw_kernel))
}

/// The backward pass on host tensors: upload, run, read back.
pub fn conv_transpose2d_backward_host(
    ctx: &GpuContext,
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    grad_output: &Tensor,
    params: &ConvTranspose2dParams,
) -> Result<Gradients> {
    // Validate before any upload, so bad input fails the same way as on the CPU.
    params.resolve(input.shape(), weight.shape(), bias.map(|b| b.shape()))?.check_grad_output(grad_output.shape())?;
    let x = GpuTensor::upload(ctx, input)?;
    let w = GpuTensor::upload(ctx, weight)?;
    let b = bias.map(|b| GpuTensor::upload(ctx, b)).transpose()?;
    let go = GpuTensor::upload(ctx, grad_output)?;
    conv_transpose2d_backward(ctx, &x, &w, b.as_ref(), &go, params)?.download(ctx)
}
