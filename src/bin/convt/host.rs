//! The forward and backward on host tensors, for the commands that read them from files: validate, upload, run,
//! read back.

use convt::gpu::{self, BackwardRun, GpuGradients, GradInputKernel, GradWeightKernel, Run, Strategy};
use convt::{ConvTranspose2dOptions, GpuContext, GpuTensor, Gradients, Precision, Tensor};

/// The forward at `precision` and the kernel that ran.
pub fn forward(
    ctx: &GpuContext,
    precision: Precision,
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    options: &ConvTranspose2dOptions,
) -> convt::Result<(Tensor, Strategy)> {
    let options = options.precision(precision);
    let shape = options.resolve(input.shape(), weight.shape(), bias.map(|b| b.shape()))?;
    let (x, w) = (GpuTensor::upload(ctx, input)?, GpuTensor::upload(ctx, weight)?);
    let b = bias.map(|b| GpuTensor::upload(ctx, b)).transpose()?;
    let y = GpuTensor::empty_with(ctx, &shape.output_dims_as_given(), input.dtype())?;
    let ran = gpu::conv_transpose2d_into(ctx, &x, &w, b.as_ref(), &options, &y, Run::default())?;
    Ok((y.download(ctx)?, ran))
}

/// The gradients of the forward given `grad_output` at `options.precision`, and the kernels that computed
/// grad_input and grad_weight.
pub fn backward(
    ctx: &GpuContext,
    input: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    grad_output: &Tensor,
    options: &ConvTranspose2dOptions,
) -> convt::Result<(Gradients, GradInputKernel, GradWeightKernel)> {
    options.resolve(input.shape(), weight.shape(), bias.map(|b| b.shape()))?.check_grad_output(grad_output.shape())?;
    let (x, w) = (GpuTensor::upload(ctx, input)?, GpuTensor::upload(ctx, weight)?);
    let b = bias.map(|b| GpuTensor::upload(ctx, b)).transpose()?;
    let go = GpuTensor::upload(ctx, grad_output)?;
    let grads = GpuGradients::empty(ctx, &x, &w, b.as_ref(), options)?;
    let run = BackwardRun::default();
    let (gi, gw) = gpu::conv_transpose2d_backward_into(ctx, &x, &w, b.as_ref(), &go, options, &grads, run)?;
    Ok((grads.download(ctx)?, gi, gw))
}
