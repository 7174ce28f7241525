//! `ConvTranspose2d`, the nn-style layer: built from the same arguments as PyTorch's
//! `nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0,
//! groups=1, bias=True, dilation=1)`, initialised the same way, run on the CPU or the GPU.

use crate::error::{ConvtError, Result};
use crate::gpu::{self, GpuContext, GpuTensor};
use crate::params::{ConvTranspose2dParams, Hw};
use crate::tensor::Tensor;

/// The keyword arguments of `nn.ConvTranspose2d`, with PyTorch's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvTranspose2dOptions {
    pub stride: Hw,
    pub padding: Hw,
    pub output_padding: Hw,
    pub groups: i64,
    pub bias: bool,
    pub dilation: Hw,
}

impl Default for ConvTranspose2dOptions {
    fn default() -> Self {
        Self {
            stride: Hw([1, 1]),
            padding: Hw([0, 0]),
            output_padding: Hw([0, 0]),
            groups: 1,
            bias: true,
            dilation: Hw([1, 1]),
        }
    }
}

impl ConvTranspose2dOptions {
    pub fn params(&self) -> ConvTranspose2dParams {
        ConvTranspose2dParams {
            stride: self.stride.0,
            padding: self.padding.0,
            output_padding: self.output_padding.0,
            dilation: self.dilation.0,
            groups: self.groups,
        }
    }
}

/// A transposed-convolution layer: weight `[Cin, Cout/groups, kH, kW]`, optional bias `[Cout]`, options.
#[derive(Debug, Clone)]
pub struct ConvTranspose2d {
    params: ConvTranspose2dParams,
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
        let params = options.params();
        params.validate()?;
        let groups = params.groups as usize;
        if in_channels % groups != 0 {
            return Err(ConvtError::InChannelsNotDivisible { in_channels, groups: params.groups });
        }
        if out_channels % groups != 0 {
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
    pub fn from_weights(weight: Tensor, bias: Option<Tensor>, params: ConvTranspose2dParams) -> Result<Self> {
        params.validate()?;
        params.check_weight(weight.shape(), bias.as_ref().map(|b| b.shape()))?;
        Ok(Self { params, weight, bias })
    }

    pub fn params(&self) -> &ConvTranspose2dParams {
        &self.params
    }
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }
    pub fn in_channels(&self) -> usize {
        self.weight.shape()[0]
    }
    pub fn out_channels(&self) -> usize {
        self.weight.shape()[1] * self.params.groups as usize
    }

    /// Runs on the CPU reference (f64 accumulation).
    pub fn forward_cpu(&self, input: &Tensor) -> Result<Tensor> {
        crate::cpu::conv_transpose2d(input, &self.weight, self.bias.as_ref(), &self.params)
    }

    /// Runs on the GPU: upload the input, run, read back. For several calls, keep the weights resident with
    /// [`Self::to_gpu`].
    pub fn forward(&self, ctx: &GpuContext, input: &Tensor) -> Result<Tensor> {
        gpu::conv_transpose2d_host(ctx, input, &self.weight, self.bias.as_ref(), &self.params)
    }

    /// The layer with its weights uploaded once, for GPU-resident inputs and outputs.
    pub fn to_gpu<'c>(&self, ctx: &'c GpuContext) -> Result<GpuConvTranspose2d<'c>> {
        Ok(GpuConvTranspose2d {
            ctx,
            params: self.params,
            weight: GpuTensor::upload(ctx, &self.weight)?,
            bias: self.bias.as_ref().map(|b| GpuTensor::upload(ctx, b)).transpose()?,
        })
    }
}

/// A [`ConvTranspose2d`] whose weights live on the GPU.
pub struct GpuConvTranspose2d<'c> {
    ctx: &'c GpuContext,
    params: ConvTranspose2dParams,
    weight: GpuTensor,
    bias: Option<GpuTensor>,
}

impl GpuConvTranspose2d<'_> {
    /// GPU tensor in, GPU tensor out: chain layers without reading back in between.
    pub fn forward(&self, input: &GpuTensor) -> Result<GpuTensor> {
        gpu::conv_transpose2d(self.ctx, input, &self.weight, self.bias.as_ref(), &self.params)
    }
}
