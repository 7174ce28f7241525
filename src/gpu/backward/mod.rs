//! The backward pass on the GPU: [`conv_transpose2d_backward`] computes the gradients of the input, the weight
//! and the bias from `grad_output` with three kernels ([`super::grad_input`], [`super::grad_weight`],
//! [`super::grad_bias`]) in one compute pass, through the same slice plan as the forward, so tensors larger
//! than one storage binding work the same way. The weight and bias gradients are reductions in a fixed order
//! (no float atomics): the same inputs give the same bits on every run.

pub(crate) mod grad_bias;
pub(crate) mod grad_input;
pub(crate) mod grad_weight;
pub(crate) mod grad_weight_half;
pub(crate) mod grad_weight_nhwc;
pub(crate) mod split_k;

use crate::dtype::DType;
use crate::error::{ConvtError, Result};
use crate::gpu::backward::grad_input::GradInputKernel;
use crate::gpu::backward::grad_weight::GradWeightKernel;
use crate::gpu::context::GpuContext;
use crate::gpu::convert;
use crate::gpu::memory::{GpuTensor, InFlight};
use crate::gpu::plan::PreparedBackward;
use crate::gpu::select;
use crate::gpu::BackwardRun;
use crate::gpu::Strategy;
use crate::gradients::Gradients;
use crate::params::ConvTranspose2dOptions;

/// The three gradients, resident on the GPU.
#[derive(Debug)]
pub struct GpuGradients {
    /// The gradient of the input, of the input's size: `[N, Cin, H, W]` (or `[Cin, H, W]` for an unbatched input).
    pub grad_input: GpuTensor,
    /// The gradient of the weight, `[Cin, Cout/groups, kH, kW]`.
    pub grad_weight: GpuTensor,
    /// The gradient of the bias, `[Cout]`; `None` when there is no bias.
    pub grad_bias: Option<GpuTensor>,
}

impl GpuGradients {
    /// Uninitialised gradients (NaN-poisoned when the context asks for it) for this problem, each in the dtype of
    /// the tensor it is the gradient of.
    pub fn empty(
        ctx: &GpuContext,
        input: &GpuTensor,
        weight: &GpuTensor,
        bias: Option<&GpuTensor>,
        params: &ConvTranspose2dOptions,
    ) -> Result<Self> {
        Self::empty_as(ctx, input, weight, bias, params, None)
    }

    /// Uninitialised gradients as [`GpuGradients::empty`], but those of the weight and the bias in f32 whatever the
    /// tensors' dtype: for a mixed-precision step that updates an f32 master copy of the weight (the kernels' f32 sums
    /// are written as they are, not rounded to f16 or bf16 first).
    pub fn empty_with_f32_weight(
        ctx: &GpuContext,
        input: &GpuTensor,
        weight: &GpuTensor,
        bias: Option<&GpuTensor>,
        params: &ConvTranspose2dOptions,
    ) -> Result<Self> {
        Self::empty_as(ctx, input, weight, bias, params, Some(DType::F32))
    }

    /// Uninitialised gradients, each in the dtype of the tensor it is the gradient of, or for the weight and the bias
    /// in `params_dtype` where given.
    fn empty_as(
        ctx: &GpuContext,
        input: &GpuTensor,
        weight: &GpuTensor,
        bias: Option<&GpuTensor>,
        params: &ConvTranspose2dOptions,
        params_dtype: Option<DType>,
    ) -> Result<Self> {
        let shape = params.resolve(input.shape(), weight.shape(), bias.map(|b| b.shape()))?;
        Ok(Self {
            grad_input: GpuTensor::empty_with(ctx, &shape.input_dims_as_given(), input.dtype())?,
            grad_weight: GpuTensor::empty_with(ctx, &shape.weight_dims(), params_dtype.unwrap_or(weight.dtype()))?,
            grad_bias: bias
                .map(|b| GpuTensor::empty_with(ctx, &[shape.out_channels], params_dtype.unwrap_or(b.dtype())))
                .transpose()?,
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

/// The gradients of `conv_transpose2d(input, weight, bias, **options)` given `grad_output`, on GPU-resident
/// tensors, at `options.precision`: exact f32 sums (half-precision tensors read as f32), or for `fast` f16 operands
/// scaled by powers of two per tensor with f32 sums on tensor cores, where the adapter has cooperative matrices and
/// the shape is one the selector gives them ([`crate::gpu::select`]: grad_weight from 64 channels a side per group,
/// or 32 at stride 1; elsewhere, and on adapters without cooperative matrices, `fast` runs the exact kernels).
/// Each gradient comes back in its tensor's dtype, rounded once from f32 sums. `bias` only says whether there is one
/// (its values do not enter the gradients).
pub fn conv_transpose2d_backward(
    ctx: &GpuContext,
    input: &GpuTensor,
    weight: &GpuTensor,
    bias: Option<&GpuTensor>,
    grad_output: &GpuTensor,
    options: &ConvTranspose2dOptions,
) -> Result<GpuGradients> {
    let grads = GpuGradients::empty(ctx, input, weight, bias, options)?;
    conv_transpose2d_backward_into(ctx, input, weight, bias, grad_output, options, &grads, BackwardRun::default())?;
    Ok(grads)
}

/// [`conv_transpose2d_backward`] into existing gradient tensors, run as `run` says (its `grad_input` and
/// `grad_weight` kernels, where given, instead of the selector's, and its timer slot; `convt tune --backward` times each candidate
/// this way). Submits the work (it completes in queue order) and returns the kernels that ran; a kernel that does
/// not compute this shape on this device is an error.
#[allow(clippy::too_many_arguments)]
pub fn conv_transpose2d_backward_into(
    ctx: &GpuContext,
    input: &GpuTensor,
    weight: &GpuTensor,
    bias: Option<&GpuTensor>,
    grad_output: &GpuTensor,
    params: &ConvTranspose2dOptions,
    grads: &GpuGradients,
    run: BackwardRun<'_>,
) -> Result<(GradInputKernel, GradWeightKernel)> {
    backward_into(ctx, input, weight, bias, grad_output, params, grads, run, None)
}

/// [`conv_transpose2d_backward_into`] with the flipped weight grad_input reads, and its prepared form, taken from
/// `kept` (made there where its weight changed since: a layer's, [`crate::GpuConvTranspose2d::backward`]) instead
/// of made in the call's pass.
#[allow(clippy::too_many_arguments)]
pub(crate) fn backward_into(
    ctx: &GpuContext,
    input: &GpuTensor,
    weight: &GpuTensor,
    bias: Option<&GpuTensor>,
    grad_output: &GpuTensor,
    params: &ConvTranspose2dOptions,
    grads: &GpuGradients,
    run: BackwardRun<'_>,
    kept: Option<&PreparedBackward>,
) -> Result<(GradInputKernel, GradWeightKernel)> {
    let timer = run.timer;
    let shape = params.resolve(input.shape(), weight.shape(), bias.map(|b| b.shape()))?;
    shape.check_grad_output(grad_output.shape())?;
    let others = [("the weight", weight), ("grad_output", grad_output), ("grad_input", &grads.grad_input)];
    crate::gpu::check_dtypes(input, &others, bias)?;
    // The weight's and the bias's gradients may also be f32 (an f32 master copy: GpuGradients::empty_with_f32_weight).
    let master = |t: &GpuTensor, what: &str| match t.dtype() {
        DType::F32 => Ok(()),
        _ => t.expect_dtype(what, input.dtype()),
    };
    master(&grads.grad_weight, "grad_weight (or f32: GpuGradients::empty_with_f32_weight)")?;
    if let Some(gb) = &grads.grad_bias {
        master(gb, "grad_bias (or f32: GpuGradients::empty_with_f32_weight)")?;
    }
    let cannot =
        |name: String| Err(ConvtError::InvalidArgument(format!("{name} does not compute this shape on this adapter")));
    let kernel = match run.grad_input {
        // The selector's choice follows a forced strategy (`GpuOptions::strategy`) where it names one; one this
        // adapter cannot run is refused here, as the forward refuses it, not by the device.
        None => match select::grad_input(ctx, &shape, params.precision, input.dtype()) {
            k if k.computes(ctx, &shape) => k,
            k => {
                return Err(ConvtError::InvalidArgument(format!(
                    "grad_input kernel {} cannot run on {} (the strategy forced by GpuOptions::strategy or \
                     CONVT_STRATEGY needs what this adapter lacks)",
                    k.name(),
                    ctx.adapter_info().name
                )))
            }
        },
        Some(k) if k.computes(ctx, &shape) => k,
        Some(k) => return cannot(format!("grad_input kernel {}", k.name())),
    };
    let chunks = [input.chunks().len(), grad_output.chunks().len()];
    let gw_kernel = match run.grad_weight {
        None => select::grad_weight(ctx, &shape, chunks, params.precision, input.dtype()),
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

    // The kept flipped weight and its prepared form, made now (in submissions of their own, ahead of this call's)
    // where the weight changed; held until this call's submission.
    let flipped = match (kept, grad_input::flipped_problem(&shape, kernel)?) {
        (Some(k), Some((problem, strategy))) => {
            Some(k.get(ctx, &shape, weight, strategy, &problem, || grad_input::flipped_weight(ctx, &shape, weight))?)
        }
        _ => None,
    };
    let flipped_ref = flipped.as_ref().map(|(t, p)| (&**t, p.as_deref()));

    let written = || {
        grads.grad_input.mark_written();
        grads.grad_weight.mark_written();
        if let Some(gb) = grad_bias {
            gb.mark_written();
        }
    };
    written();
    let mut encoder = ctx.device.create_command_encoder(&Default::default());
    let mut in_flight = InFlight::default();
    // Every kernel reads the tensors as stored and writes the gradients' dtypes; only a gradient that several
    // slices add up in place goes through an f32 result, rounded once at the end (src/gpu/convert.rs).
    let gi_sums = grad_input::accumulates(&shape, grad_output, &grads.grad_input);
    let gi = convert::f32_result(ctx, &grads.grad_input, gi_sums)?;
    let gw = convert::f32_result(ctx, &grads.grad_weight, grad_weight::accumulates(&shape, input, grad_output))?;
    let gb = match grad_bias {
        Some(gb) => convert::f32_result(ctx, gb, grad_bias::accumulates(grad_output))?,
        None => None,
    };
    let (gi_out, gw_out) = (gi.as_ref().unwrap_or(&grads.grad_input), gw.as_ref().unwrap_or(&grads.grad_weight));
    let gb_out = gb.as_ref().or(grad_bias);
    // Reductions split over several slices add up in place, from zero; an empty batch sums nothing: zero.
    let empty = shape.batch == 0;
    if empty || grad_weight::accumulates(&shape, input, grad_output) {
        gw_out.single_buffer("grad_weight", ctx)?.clear(&mut encoder);
    }
    if let Some(gb) = gb_out.filter(|_| empty || grad_bias::accumulates(grad_output)) {
        gb.single_buffer("grad_bias", ctx)?.clear(&mut encoder);
    }
    {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("convt conv_transpose2d backward"),
            timestamp_writes: timer.map(|(t, slot)| t.pass_writes(slot)),
        });
        // Each gradient's dispatches under its name, for a profiler (`convt bench --profile`); the guard names no
        // part again when it goes, whether the call encoded or failed.
        let _sections = ctx.profile_sections();
        ctx.profile_section(Some("grad_input"));
        // At stride 1 with both gradients on the NHWC tensor-core kernels, grad_input's copy of grad_output is laid
        // out for grad_weight's kernel too, which reads it instead of making a second one.
        let needs = match (kernel, gw_kernel) {
            (GradInputKernel::Transposed(Strategy::CoopNhwc(_)), GradWeightKernel::Nhwc(_)) => {
                Some(grad_weight_nhwc::grad_output_needs(&shape))
            }
            _ => None,
        };
        let needs = needs.as_ref();
        let (gy, flipped) = (grad_output, flipped_ref);
        let shared =
            grad_input::encode(ctx, &shape, kernel, weight, flipped, gy, gi_out, needs, &mut pass, &mut in_flight)?;
        convert::finish(ctx, gi, &grads.grad_input, &mut pass, &mut in_flight)?;
        ctx.profile_section(Some("grad_weight"));
        let shared = shared.as_ref();
        grad_weight::encode(ctx, &shape, gw_kernel, input, grad_output, gw_out, shared, &mut pass, &mut in_flight)?;
        convert::finish(ctx, gw, &grads.grad_weight, &mut pass, &mut in_flight)?;
        if let (Some(sums), Some(out)) = (gb_out, grad_bias) {
            ctx.profile_section(Some("grad_bias"));
            grad_bias::encode(ctx, &shape, grad_output, sums, &mut pass, &mut in_flight)?;
            convert::finish(ctx, gb, out, &mut pass, &mut in_flight)?;
        }
    }
    in_flight.submit(ctx, encoder)?;
    written();
    Ok((kernel, gw_kernel))
}
