//! `convt bench --train`: one training step of a suite case's layer, as a mixed-precision training loop runs it
//! (examples/train_mixed.rs): the f32 master weight and bias cast to the activations' dtype (none for f32
//! activations), the forward, the backward from a given grad_output with the weight's and the bias's gradients in
//! f32, and an SGD step on the master copy; each a call of its own, as a caller makes them. Timed from a GPU
//! timestamp before the step's first submission to one after its last (`GpuTimer::mark`): the step's kernels and
//! the gaps between its submissions, as CUDA events around PyTorch's step measure (`scripts/torch_bench.py
//! --train`, an autocast step with `torch.optim.SGD`). With `--layer` (f32 activations) the step goes through a
//! `GpuConvTranspose2d` instead (`forward_into`, `backward_into`, `sgd_step`): the layer's weight is updated in
//! place, so each step prepares it again for the forward and flips it again for the backward.

use std::time::Duration;

use anyhow::Result;
use convt::gpu::elementwise::axpby;
use convt::gpu::{
    conv_transpose2d_backward_into, conv_transpose2d_into, BackwardRun, GpuGradients, GpuTimer, GradInputKernel,
    GradWeightKernel, Run, Strategy,
};
use convt::suite::Case;
use convt::{
    cpu, ConvShape, ConvTranspose2d, DType, ErrorStats, GpuContext, GpuConvTranspose2d, GpuTensor, Precision, Tensor,
};

/// An error where a step through a layer (`--layer`) has activations other than f32: a layer's weight has its
/// input's dtype, so only the functional step (an f32 master weight cast per step) runs half activations.
pub fn check_layer(layer: bool, dtype: DType) -> Result<()> {
    if layer && dtype != DType::F32 {
        anyhow::bail!(
            "--train --layer takes f32 activations, not {dtype} (a layer's weight has its input's dtype; --train \
             without --layer times the mixed-precision step, an f32 master weight cast to {dtype})"
        );
    }
    Ok(())
}

/// The SGD step's learning rate: small, so that the master weight stays in range over many timed steps.
const LR: f32 = 1e-4;

/// A case's training step on the GPU: the master parameters (f32), the activations and grad_output (of the
/// activations' dtype), and where the step writes.
pub struct Step {
    pub shape: ConvShape,
    case: Case,
    dtype: DType,
    precision: Precision,
    params: Params,
    input: GpuTensor,
    grad_output: GpuTensor,
    output: GpuTensor,
    /// The gradients: grad_input in the activations' dtype, the weight's and the bias's in f32.
    grads: GpuGradients,
}

/// Where the step's parameters live: an f32 master copy the functional calls read (cast where the activations are
/// half), or the layer the step goes through (`--layer`), which holds its own f32 weight and bias.
enum Params {
    Master { weight: GpuTensor, bias: Option<GpuTensor> },
    Layer(Box<GpuConvTranspose2d>),
}

/// The kernels a step ran: the forward's, grad_input's and grad_weight's.
pub type Kernels = (Strategy, GradInputKernel, GradWeightKernel);

impl Step {
    /// The case's step at `precision` with activations of `dtype`: input U(0, 1), grad_output U(-1, 1), weight and
    /// bias U(-0.1, 0.1), as `convt bench` draws them; through a layer where `layer` says so (f32 activations only:
    /// a layer's weight has its input's dtype).
    pub fn new(ctx: &GpuContext, case: &Case, precision: Precision, dtype: DType, layer: bool) -> Result<Self> {
        check_layer(layer, dtype)?;
        let bias_dims = [case.out_channels];
        let shape =
            case.params.resolve(&case.input_dims(), &case.weight_dims(), case.bias.then_some(&bias_dims[..]))?;
        let random = |dims, low, seed| Tensor::uniform(dims, low, 1.0, seed);
        let input = GpuTensor::upload(ctx, &random(shape.input_dims(), 0.0, 100)?.to_dtype(dtype))?;
        let grad_output = GpuTensor::upload(ctx, &random(shape.output_dims(), -1.0, 200)?.to_dtype(dtype))?;
        let weight = Tensor::uniform(shape.weight_dims(), -0.1, 0.1, 1)?;
        let bias = case.bias.then(|| Tensor::uniform(vec![shape.out_channels], -0.1, 0.1, 2)).transpose()?;
        let output = GpuTensor::empty_with(ctx, &shape.output_dims(), dtype)?;
        // The gradients' shapes and dtypes from a weight of the activations' dtype (the one the step casts).
        let weight_like = GpuTensor::empty_with(ctx, &shape.weight_dims(), dtype)?;
        let bias_like = bias.as_ref().map(|_| GpuTensor::empty_with(ctx, &bias_dims, dtype)).transpose()?;
        let options = case.params.precision(precision);
        let grads = GpuGradients::empty_with_f32_weight(ctx, &input, &weight_like, bias_like.as_ref(), &options)?;
        let params = match layer {
            true => Params::Layer(Box::new(ConvTranspose2d::from_weights(weight, bias, options)?.to_gpu(ctx)?)),
            false => Params::Master {
                weight: GpuTensor::upload(ctx, &weight)?,
                bias: bias.as_ref().map(|b| GpuTensor::upload(ctx, b)).transpose()?,
            },
        };
        Ok(Self { shape, case: *case, dtype, precision, params, input, grad_output, output, grads })
    }

    /// One step: cast, forward, backward, SGD update (or the layer's forward, backward and SGD step). Submits its
    /// work; returns the kernels that ran.
    pub fn run(&mut self, ctx: &GpuContext) -> Result<Kernels> {
        let (master_weight, master_bias) = match &mut self.params {
            Params::Layer(layer) => {
                let strategy = layer.forward_into(&self.input, &self.output, None)?;
                let (gi, gw) = layer.backward_into(&self.input, &self.grad_output, &self.grads)?;
                layer.sgd_step(&self.grads, LR)?;
                return Ok((strategy, gi, gw));
            }
            Params::Master { weight, bias } => (&*weight, bias.as_ref()),
        };
        let params = self.case.params.precision(self.precision);
        let cast = |t: &GpuTensor| t.to_dtype(ctx, self.dtype);
        let half = self.dtype != DType::F32;
        let (w_cast, b_cast) = match half {
            true => (Some(cast(master_weight)?), master_bias.map(cast).transpose()?),
            false => (None, None),
        };
        let weight = w_cast.as_ref().unwrap_or(master_weight);
        let bias = if half { b_cast.as_ref() } else { master_bias };
        let strategy = conv_transpose2d_into(ctx, &self.input, weight, bias, &params, &self.output, Run::default())?;
        let (gi, gw) = conv_transpose2d_backward_into(
            ctx,
            &self.input,
            weight,
            bias,
            &self.grad_output,
            &params,
            &self.grads,
            BackwardRun::default(),
        )?;
        axpby(ctx, -LR, &self.grads.grad_weight, 1.0, master_weight)?;
        if let (Some(gb), Some(b)) = (&self.grads.grad_bias, master_bias) {
            axpby(ctx, -LR, gb, 1.0, b)?;
        }
        Ok((strategy, gi, gw))
    }

    /// `runs` steps timed after warm-up (below): each step's GPU time, ms, the kernels of the last, and the buffers
    /// the timed steps allocated (none where the pool holds the step's working set: an allocation inside the timed
    /// steps would cost them its mapping).
    pub fn time(
        &mut self,
        ctx: &GpuContext,
        warmup: u32,
        min_warmup: Duration,
        runs: u32,
    ) -> Result<(Vec<f64>, Kernels, u64)> {
        // Warmed up as `convt bench` warms up (its clock had started before the first step, whose compiles then
        // used up the warm-up, and the timed steps began on a GPU still clocked down: docs/PERFORMANCE.md).
        crate::bench::warm_up(ctx, warmup, min_warmup, |_| self.run(ctx).map(|_| ()))?;
        let timer = GpuTimer::new(ctx, runs)?;
        let created = ctx.buffer_stats().0;
        let mut kernels = None;
        for slot in 0..runs {
            timer.mark(ctx, slot, false)?;
            kernels = Some(self.run(ctx)?);
            timer.mark(ctx, slot, true)?;
        }
        ctx.wait_idle()?;
        let created = ctx.buffer_stats().0 - created;
        let kernels = kernels.ok_or_else(|| anyhow::anyhow!("no step ran"))?;
        Ok((timer.read_ms(ctx, runs)?, kernels, created))
    }

    /// The last step's f32 grad_weight at `samples` random elements against the float64 reference (it depends
    /// on the input and grad_output alone, not on the weight the steps changed).
    pub fn grad_weight_error(&self, ctx: &GpuContext, samples: usize) -> Result<ErrorStats> {
        let (x, go) = (self.input.download(ctx)?, self.grad_output.download(ctx)?);
        let gw = self.grads.grad_weight.download(ctx)?;
        let at = |p| cpu::grad_weight_at(&self.shape, x.data(), go.data(), p);
        Ok(crate::bench::sampled_error(&gw, samples, 8, &at))
    }
}
