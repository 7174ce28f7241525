//! `ConvTranspose2d`, the nn-style layer: built from the same arguments as PyTorch's
//! `nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0,
//! groups=1, bias=True, dilation=1)`, initialised the same way, run forward and backward on the CPU or the GPU,
//! its parameters exchanged with PyTorch as a `state_dict` in a safetensors file (`weight`, `bias`).

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::dtype::DType;
use crate::error::{ConvtError, Result};
use crate::gpu::kernel::Weight;
use crate::gpu::plan::{PreparedBackward, PreparedWeights};
use crate::gpu::{self, GpuContext, GpuGradients, GpuTensor};
use crate::gradients::Gradients;
use crate::io::{save_tensors, TensorFile};
use crate::params::{ConvTranspose2dOptions, Hw};
use crate::precision::Precision;
use crate::tensor::Tensor;

/// A transposed-convolution layer: weight `[Cin, Cout/groups, kH, kW]`, optional bias `[Cout]`, options.
#[derive(Debug, Clone)]
pub struct ConvTranspose2d {
    /// Its options; `bias` is whether `bias` holds a tensor.
    params: ConvTranspose2dOptions,
    weight: Tensor,
    bias: Option<Tensor>,
}

impl ConvTranspose2d {
    /// A layer initialised like PyTorch's: weight and bias from U(-b, b), b = 1/sqrt(fan_in) with
    /// fan_in = (out_channels/groups) * kH * kW (what `kaiming_uniform_(a=sqrt(5))` reduces to), drawn from `seed`.
    pub fn new(
        in_channels: usize,
        out_channels: usize,
        kernel_size: impl Into<Hw>,
        options: ConvTranspose2dOptions,
        seed: u64,
    ) -> Result<Self> {
        let params = options;
        params.validate()?;
        let groups = params.groups as usize;
        if !in_channels.is_multiple_of(groups) {
            return Err(ConvtError::InChannelsNotDivisible { in_channels, groups: params.groups });
        }
        if !out_channels.is_multiple_of(groups) {
            return Err(ConvtError::OutChannelsNotDivisible { out_channels, groups: params.groups });
        }
        let k = kernel_size.into().0;
        if k.iter().any(|&v| v < 1) {
            return Err(ConvtError::NonPositiveKernel { kernel: k });
        }
        let kernel = k.map(|v| v as usize);
        let weight_dims = vec![in_channels, out_channels / groups, kernel[0], kernel[1]];
        if weight_dims.contains(&0) {
            return Err(ConvtError::EmptyWeight { shape: weight_dims });
        }
        let fan_in = (out_channels / groups * kernel[0] * kernel[1]) as f32;
        let bound = 1.0 / fan_in.sqrt();
        let weight = Tensor::uniform(weight_dims, -bound, bound, seed)?;
        let bias = options
            .bias
            .then(|| Tensor::uniform(vec![out_channels], -bound, bound, seed.wrapping_add(0x9e37_79b9_7f4a_7c15)))
            .transpose()?;
        Ok(Self { params, weight, bias })
    }

    /// A layer with the given weight `[Cin, Cout/groups, kH, kW]` and optional bias `[Cout]`.
    pub fn from_weights(weight: Tensor, bias: Option<Tensor>, params: ConvTranspose2dOptions) -> Result<Self> {
        params.validate()?;
        params.check_weight(weight.shape(), bias.as_ref().map(|b| b.shape()))?;
        Ok(Self { params: ConvTranspose2dOptions { bias: bias.is_some(), ..params }, weight, bias })
    }

    /// The layer with its parameters in `dtype` (PyTorch's `layer.to(dtype)`, `.half()`, `.bfloat16()`), each value
    /// rounded to it. Its GPU calls then take inputs of that dtype and return results in it.
    pub fn to_dtype(self, dtype: DType) -> Self {
        Self { weight: self.weight.to_dtype(dtype), bias: self.bias.map(|b| b.to_dtype(dtype)), ..self }
    }

    /// The dtype of its parameters.
    pub fn dtype(&self) -> DType {
        self.weight.dtype()
    }

    /// The arithmetic on the GPU, forward and backward (see [`ConvTranspose2dOptions::precision`]).
    pub fn precision(&self) -> Precision {
        self.params.precision
    }
    /// Sets the arithmetic on the GPU, forward and backward, for later calls (see [`ConvTranspose2dOptions::precision`]).
    pub fn set_precision(&mut self, precision: Precision) {
        self.params.precision = precision;
    }

    /// The layer's options; `bias` is true exactly when the layer holds a bias tensor.
    pub fn options(&self) -> &ConvTranspose2dOptions {
        &self.params
    }
    /// The weight, `[Cin, Cout/groups, kH, kW]` (PyTorch's `layer.weight`).
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }
    /// The bias, `[Cout]`, or `None` for a layer built without one (PyTorch's `layer.bias`).
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }
    /// Input channels, `Cin` (the weight's first dimension).
    pub fn in_channels(&self) -> usize {
        self.weight.shape()[0]
    }
    /// Output channels, `Cout` (the weight's second dimension times `groups`).
    pub fn out_channels(&self) -> usize {
        self.weight.shape()[1] * self.params.groups as usize
    }

    /// Runs on the CPU reference (f64 accumulation).
    pub fn forward_cpu(&self, input: &Tensor) -> Result<Tensor> {
        crate::cpu::conv_transpose2d(input, &self.weight, self.bias.as_ref(), &self.params)
    }

    /// [`Self::forward_cpu`] with PyTorch's `output_size` (`[H, W]` or the whole output shape): the output_padding
    /// that reaches it replaces the layer's for this call ([`ConvTranspose2dOptions::for_output_size`]).
    pub fn forward_cpu_with_output_size(&self, input: &Tensor, output_size: &[usize]) -> Result<Tensor> {
        let params = self.params.for_output_size(input.shape(), self.weight.shape(), output_size)?;
        crate::cpu::conv_transpose2d(input, &self.weight, self.bias.as_ref(), &params)
    }

    /// The gradients with respect to the input, the weight and the bias (when the layer has one) given the
    /// gradient of the output, on the CPU reference (f64 accumulation).
    pub fn backward_cpu(&self, input: &Tensor, grad_output: &Tensor) -> Result<Gradients> {
        crate::cpu::conv_transpose2d_backward(input, &self.weight, self.bias.as_ref(), grad_output, &self.params)
    }

    /// [`Self::backward_cpu`] on the GPU: upload, run, read back.
    pub fn backward(&self, ctx: &GpuContext, input: &Tensor, grad_output: &Tensor) -> Result<Gradients> {
        // Validated before any upload, so bad input fails the same way as on the CPU.
        let bias = self.bias.as_ref();
        self.params
            .resolve(input.shape(), self.weight.shape(), bias.map(|b| b.shape()))?
            .check_grad_output(grad_output.shape())?;
        let (x, w) = (GpuTensor::upload(ctx, input)?, GpuTensor::upload(ctx, &self.weight)?);
        let b = bias.map(|b| GpuTensor::upload(ctx, b)).transpose()?;
        let go = GpuTensor::upload(ctx, grad_output)?;
        gpu::conv_transpose2d_backward(ctx, &x, &w, b.as_ref(), &go, &self.params)?.download(ctx)
    }

    /// Replaces the weight with one of the same size.
    pub fn set_weight(&mut self, weight: Tensor) -> Result<()> {
        if weight.shape() != self.weight.shape() {
            return Err(ConvtError::ShapeMismatch {
                expected: self.weight.shape().to_vec(),
                actual: weight.shape().to_vec(),
            });
        }
        self.weight = weight;
        Ok(())
    }

    /// Replaces the bias of a layer that has one with one of the same size.
    pub fn set_bias(&mut self, bias: Tensor) -> Result<()> {
        match &self.bias {
            Some(b) if b.shape() == bias.shape() => {
                self.bias = Some(bias);
                Ok(())
            }
            Some(b) => Err(ConvtError::ShapeMismatch { expected: b.shape().to_vec(), actual: bias.shape().to_vec() }),
            None => Err(ConvtError::InvalidArgument("the layer was built without a bias".into())),
        }
    }

    /// The constructor arguments of the equivalent `nn.ConvTranspose2d`.
    pub fn config(&self) -> LayerConfig {
        let p = &self.params;
        LayerConfig {
            in_channels: self.in_channels(),
            out_channels: self.out_channels(),
            kernel_size: [self.weight.shape()[2], self.weight.shape()[3]],
            stride: p.stride,
            padding: p.padding,
            output_padding: p.output_padding,
            groups: p.groups,
            bias: self.bias.is_some(),
            dilation: p.dilation,
        }
    }

    /// The parameters by PyTorch's names, as `nn.ConvTranspose2d.state_dict()` lists them.
    pub fn state_dict(&self) -> Vec<(&'static str, &Tensor)> {
        std::iter::once(("weight", &self.weight)).chain(self.bias.as_ref().map(|b| ("bias", b))).collect()
    }

    /// Writes the state_dict to a safetensors file PyTorch loads with
    /// `layer.load_state_dict(safetensors.torch.load_file(path))`; the layer's configuration goes into the
    /// file's metadata under "convt" (JSON with `nn.ConvTranspose2d`'s argument names).
    pub fn save_state_dict(&self, path: impl AsRef<Path>) -> Result<()> {
        let config = serde_json::to_string(&self.config()).map_err(|e| ConvtError::InvalidArgument(e.to_string()))?;
        save_tensors(path, &self.state_dict(), Some(HashMap::from([("convt".to_string(), config)])))
    }

    /// A layer with `options` whose parameters come from a PyTorch state_dict saved as safetensors
    /// (`safetensors.torch.save_file(layer.state_dict(), path)`). Channels and kernel size are read from the
    /// weight; strict like PyTorch's `load_state_dict`: `weight` must be there, `bias` exactly when
    /// `options.bias` is set, and no other tensor.
    pub fn from_state_dict(path: impl AsRef<Path>, options: ConvTranspose2dOptions) -> Result<Self> {
        let path = path.as_ref();
        Self::from_tensor_file(TensorFile::load(path)?, "", options, path)
    }

    /// [`Self::from_state_dict`] for one layer of a larger model's state_dict: the tensors `{prefix}weight` and
    /// `{prefix}bias` (e.g. prefix `"decoder.0."`), other names ignored.
    pub fn from_state_dict_prefixed(
        path: impl AsRef<Path>,
        prefix: &str,
        options: ConvTranspose2dOptions,
    ) -> Result<Self> {
        let path = path.as_ref();
        Self::from_tensor_file(TensorFile::load(path)?, prefix, options, path)
    }

    fn from_tensor_file(file: TensorFile, prefix: &str, options: ConvTranspose2dOptions, path: &Path) -> Result<Self> {
        let bad = |message: String| ConvtError::StateDict { path: path.into(), message };
        let weight_key = format!("{prefix}weight");
        let bias_key = format!("{prefix}bias");
        let weight = file.get(&weight_key)?;
        let bias = file.get_optional(&bias_key)?;
        if prefix.is_empty() {
            let extra: Vec<&str> = file.names().filter(|k| *k != weight_key && *k != bias_key).collect();
            if !extra.is_empty() {
                return Err(bad(format!(
                    "unexpected tensors {extra:?} (an nn.ConvTranspose2d has only weight and bias)"
                )));
            }
        }
        match (options.bias, &bias) {
            (true, None) => return Err(bad(format!("`{bias_key}` is missing but the options ask for a bias"))),
            (false, Some(_)) => return Err(bad(format!("`{bias_key}` is present but the options say bias = false"))),
            _ => {}
        }
        if weight.shape().len() != 4 {
            return Err(bad(format!(
                "`{weight_key}` has size {:?}, expected [in, out/groups, kH, kW]",
                weight.shape()
            )));
        }
        Self::from_weights(weight, bias, options)
    }

    /// Replaces the parameters with those of a state_dict file, strictly: the same tensors with the same sizes.
    pub fn load_state_dict(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let options = *self.options();
        let loaded = Self::from_state_dict(path, options)?;
        if loaded.weight.shape() != self.weight.shape() {
            return Err(ConvtError::StateDict {
                path: path.into(),
                message: format!(
                    "`weight` has size {:?}, the layer's is {:?}",
                    loaded.weight.shape(),
                    self.weight.shape()
                ),
            });
        }
        *self = loaded;
        Ok(())
    }

    /// Runs on the GPU: upload the input, run, read back. For several calls, keep the weights resident with
    /// [`Self::to_gpu`].
    pub fn forward(&self, ctx: &GpuContext, input: &Tensor) -> Result<Tensor> {
        self.forward_as(ctx, input, &self.params)
    }

    /// [`Self::forward`] with PyTorch's `output_size` (`[H, W]` or the whole output shape): the output_padding that
    /// reaches it replaces the layer's for this call ([`ConvTranspose2dOptions::for_output_size`]).
    pub fn forward_with_output_size(&self, ctx: &GpuContext, input: &Tensor, output_size: &[usize]) -> Result<Tensor> {
        let params = self.params.for_output_size(input.shape(), self.weight.shape(), output_size)?;
        self.forward_as(ctx, input, &params)
    }

    fn forward_as(&self, ctx: &GpuContext, input: &Tensor, params: &ConvTranspose2dOptions) -> Result<Tensor> {
        let bias = self.bias.as_ref();
        params.resolve(input.shape(), self.weight.shape(), bias.map(|b| b.shape()))?;
        let (x, w) = (GpuTensor::upload(ctx, input)?, GpuTensor::upload(ctx, &self.weight)?);
        let b = bias.map(|b| GpuTensor::upload(ctx, b)).transpose()?;
        gpu::conv_transpose2d(ctx, &x, &w, b.as_ref(), params)?.download(ctx)
    }

    /// The layer with its weights uploaded once, for GPU-resident inputs and outputs. It keeps a clone of `ctx`
    /// (a reference count), so it can be stored and moved to other threads freely.
    pub fn to_gpu(&self, ctx: &GpuContext) -> Result<GpuConvTranspose2d> {
        Ok(GpuConvTranspose2d {
            ctx: ctx.clone(),
            params: self.params,
            weight: GpuTensor::upload(ctx, &self.weight)?,
            bias: self.bias.as_ref().map(|b| GpuTensor::upload(ctx, b)).transpose()?,
            prepared: Default::default(),
            prepared_backward: Default::default(),
        })
    }
}

/// A [`ConvTranspose2d`] whose weights live on the GPU.
pub struct GpuConvTranspose2d {
    ctx: GpuContext,
    params: ConvTranspose2dOptions,
    weight: GpuTensor,
    bias: Option<GpuTensor>,
    /// The weight as the kernels that ran read it, prepared once and reused while it does not change.
    prepared: PreparedWeights,
    /// The backward's flipped weight and its prepared form, likewise.
    prepared_backward: PreparedBackward,
}

impl std::fmt::Debug for GpuConvTranspose2d {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuConvTranspose2d")
            .field("params", &self.params)
            .field("weight", &self.weight)
            .field("bias", &self.bias)
            .finish_non_exhaustive()
    }
}

impl GpuConvTranspose2d {
    /// GPU tensor in, GPU tensor out: chain layers without reading back in between.
    pub fn forward(&self, input: &GpuTensor) -> Result<GpuTensor> {
        self.forward_as(input, &self.params)
    }

    /// [`Self::forward`] with PyTorch's `output_size` (`[H, W]` or the whole output shape): the output_padding that
    /// reaches it replaces the layer's for this call ([`ConvTranspose2dOptions::for_output_size`]).
    pub fn forward_with_output_size(&self, input: &GpuTensor, output_size: &[usize]) -> Result<GpuTensor> {
        let params = self.params.for_output_size(input.shape(), self.weight.shape(), output_size)?;
        self.forward_as(input, &params)
    }

    fn forward_as(&self, input: &GpuTensor, params: &ConvTranspose2dOptions) -> Result<GpuTensor> {
        let shape = params.resolve(input.shape(), self.weight.shape(), self.bias.as_ref().map(|b| b.shape()))?;
        let output = GpuTensor::empty_with(&self.ctx, &shape.output_dims_as_given(), input.dtype())?;
        self.forward_into_as(input, &output, None, params)?;
        Ok(output)
    }

    /// [`GpuConvTranspose2d::forward`] into an existing output tensor (of the output's exact shape), optionally timed
    /// into a [`gpu::GpuTimer`] slot; returns the kernel that ran. Submits the work; it completes in queue order.
    /// The weight is prepared for that kernel on the first call and reused by later ones until it changes.
    pub fn forward_into(
        &self,
        input: &GpuTensor,
        output: &GpuTensor,
        timer: Option<(&gpu::GpuTimer, u32)>,
    ) -> Result<gpu::Strategy> {
        self.forward_into_as(input, output, timer, &self.params)
    }

    fn forward_into_as(
        &self,
        input: &GpuTensor,
        output: &GpuTensor,
        timer: Option<(&gpu::GpuTimer, u32)>,
        params: &ConvTranspose2dOptions,
    ) -> Result<gpu::Strategy> {
        let bias = self.bias.as_ref();
        let shape = params.resolve(input.shape(), self.weight.shape(), bias.map(|b| b.shape()))?;
        let strategy = gpu::select::forward(&self.ctx, &shape, bias.is_some(), params.precision, input.dtype());
        let prepared = self.prepared.get(&self.ctx, strategy, &shape, &self.weight)?;
        let weight = Weight { tensor: &self.weight, prepared: prepared.as_deref() };
        gpu::forward_prepared(&self.ctx, strategy, &shape, input, weight, bias, output, timer)?;
        Ok(strategy)
    }

    /// The three gradients given the gradient of the output, on the GPU. The flipped weight grad_input reads, and
    /// its kernel's prepared form of it, are made on the first call and reused by later ones until the weight
    /// changes (an [`Self::sgd_step`], say): once per weight version, however many batches a step accumulates.
    pub fn backward(&self, input: &GpuTensor, grad_output: &GpuTensor) -> Result<GpuGradients> {
        let grads = GpuGradients::empty(&self.ctx, input, &self.weight, self.bias.as_ref(), &self.params)?;
        self.backward_into(input, grad_output, &grads)?;
        Ok(grads)
    }

    /// [`Self::backward`] into existing gradients (of the input's, the weight's and the bias's sizes and dtypes, as
    /// [`GpuGradients::empty`] makes them): a training loop reuses them from step to step. Submits the work (it
    /// completes in queue order); returns the kernels that ran for grad_input and grad_weight.
    pub fn backward_into(
        &self,
        input: &GpuTensor,
        grad_output: &GpuTensor,
        grads: &GpuGradients,
    ) -> Result<(gpu::GradInputKernel, gpu::GradWeightKernel)> {
        let (weight, bias) = (&self.weight, self.bias.as_ref());
        let run = gpu::BackwardRun::default();
        let kept = Some(&self.prepared_backward);
        gpu::backward::backward_into(&self.ctx, input, weight, bias, grad_output, &self.params, grads, run, kept)
    }

    /// One step of plain gradient descent on the GPU: `w -= lr * grad_weight`, `b -= lr * grad_bias`.
    pub fn sgd_step(&mut self, grads: &GpuGradients, lr: f32) -> Result<()> {
        gpu::elementwise::axpby(&self.ctx, -lr, &grads.grad_weight, 1.0, &self.weight)?;
        match (&self.bias, &grads.grad_bias) {
            (Some(b), Some(gb)) => gpu::elementwise::axpby(&self.ctx, -lr, gb, 1.0, b),
            (None, None) => Ok(()),
            _ => Err(ConvtError::InvalidArgument("grad_bias must be given exactly when the layer has a bias".into())),
        }
    }

    /// The weight on the GPU, `[Cin, Cout/groups, kH, kW]`.
    pub fn weight(&self) -> &GpuTensor {
        &self.weight
    }
    /// The bias on the GPU, `[Cout]`, or `None` for a layer without one.
    pub fn bias(&self) -> Option<&GpuTensor> {
        self.bias.as_ref()
    }

    /// The layer with its current parameters read back to the host (e.g. to save them).
    pub fn to_host(&self) -> Result<ConvTranspose2d> {
        ConvTranspose2d::from_weights(
            self.weight.download(&self.ctx)?,
            self.bias.as_ref().map(|b| b.download(&self.ctx)).transpose()?,
            self.params,
        )
    }
}

/// The constructor arguments of an `nn.ConvTranspose2d`, under PyTorch's names: what convt writes into a
/// state_dict file's metadata so the layer can be rebuilt on either side (`scripts/state_dict.py`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerConfig {
    /// `in_channels`: input channels, `Cin`.
    pub in_channels: usize,
    /// `out_channels`: output channels, `Cout`.
    pub out_channels: usize,
    /// `kernel_size`: the kernel's `[kH, kW]`.
    pub kernel_size: [usize; 2],
    /// `stride`, `[height, width]` ([`ConvTranspose2dOptions::stride`]).
    pub stride: [i64; 2],
    /// `padding`, `[height, width]` ([`ConvTranspose2dOptions::padding`]).
    pub padding: [i64; 2],
    /// `output_padding`, `[height, width]` ([`ConvTranspose2dOptions::output_padding`]).
    pub output_padding: [i64; 2],
    /// `groups` ([`ConvTranspose2dOptions::groups`]).
    pub groups: i64,
    /// `bias`: whether the layer has a bias.
    pub bias: bool,
    /// `dilation`, `[height, width]` ([`ConvTranspose2dOptions::dilation`]).
    pub dilation: [i64; 2],
}
