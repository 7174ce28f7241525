//! # convt
//!
//! PyTorch's `torch.nn.ConvTranspose2d` / `F.conv_transpose2d` (every option: asymmetric kernels, per-axis stride,
//! padding, output_padding and dilation, groups, optional bias), forward and backward, as WGSL compute shaders on
//! wgpu, with a float64 CPU reference ([`cpu`]) that defines the expected answer.
//!
//! ```no_run
//! use convt::{ConvTranspose2d, ConvTranspose2dOptions, GpuContext, Tensor};
//! # fn main() -> convt::Result<()> {
//! let ctx = GpuContext::new()?; // picks a GPU (Vulkan first), or Mesa's software one
//! let options = ConvTranspose2dOptions::default().stride(2).padding(1).output_padding(1);
//! let layer = ConvTranspose2d::new(16, 8, 3, options, /* seed */ 0)?;
//! let x = Tensor::uniform(vec![2, 16, 32, 32], -1.0, 1.0, 7)?;
//! let y = layer.forward(&ctx, &x)?; // [2, 8, 64, 64]
//! let y_ref = layer.forward_cpu(&x)?; // the f64 reference
//!
//! // On GPU-resident tensors: the layer keeps its weight on the GPU, prepared once for the kernel that runs.
//! let gpu_layer = layer.to_gpu(&ctx)?;
//! let y = gpu_layer.forward(&convt::GpuTensor::upload(&ctx, &x)?)?;
//! # Ok(()) }
//! ```
//!
//! The API: the layer ([`ConvTranspose2d`], [`GpuConvTranspose2d`]); the functional calls ([`conv_transpose2d`],
//! [`conv_transpose2d_backward`] and their `_into` forms, which take a [`Run`] or [`BackwardRun`]: forced kernels,
//! GPU timer); one
//! options type ([`ConvTranspose2dOptions`]) for all of them and the CLI; [`GpuContext`], [`GpuTensor`],
//! [`Tensor`] and their [`DType`] (f32, f16, bf16); [`io`] for safetensors files. `gpu::select` says which kernel
//! a call would run, `gpu::tune` holds
//! the tuning cache. docs/DESIGN.md describes the inside.

#![warn(missing_docs)]

pub mod cpu;
mod dtype;
mod error;
pub mod gpu;
mod gradients;
pub mod io;
mod layer;
mod params;
mod precision;
pub mod suite;
mod tensor;

pub use dtype::DType;
pub use error::{ConvtError, Result};
pub use gpu::{
    conv_transpose2d, conv_transpose2d_backward, conv_transpose2d_backward_into, conv_transpose2d_into, BackwardRun,
    GpuContext, GpuGradients, GpuOptions, GpuTensor, GpuTimer, GradInputKernel, GradWeightKernel, Run, Strategy,
};
pub use gradients::Gradients;
pub use layer::{ConvTranspose2d, GpuConvTranspose2d, LayerConfig};
pub use params::{checked_numel, ConvShape, ConvTranspose2dOptions, Hw, MAX_TENSOR_BYTES};
pub use precision::Precision;
pub use tensor::{ErrorStats, Tensor};
/// The wgpu convt is built on (its `Device`, `Queue`, `Buffer` and `Adapter` are what [`GpuContext::from_wgpu`] and
/// [`GpuTensor::from_buffer`] take), so an application uses the same version without naming it.
pub use wgpu;
