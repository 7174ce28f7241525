//! # convt
//!
//! PyTorch's `torch.nn.functional.conv_transpose2d` (every option: asymmetric kernels, per-axis stride,
//! padding, output_padding and dilation, groups, optional bias) as WGSL compute shaders on wgpu, with a float64
//! CPU reference that defines the expected answer.
//!
//! ```no_run
//! use convt::{ConvTranspose2d, ConvTranspose2dOptions, GpuContext, Tensor};
//! # fn main() -> convt::Result<()> {
//! let ctx = GpuContext::new()?;                         // picks a GPU (Vulkan first), or Mesa's software one
//! let layer = ConvTranspose2d::new(16, 8, 3, ConvTranspose2dOptions {
//!     stride: 2.into(), padding: 1.into(), output_padding: 1.into(), ..Default::default()
//! }, /* seed */ 0)?;
//! let x = Tensor::uniform(vec![2, 16, 32, 32], -1.0, 1.0, 7)?;
//! let y = layer.forward(&ctx, &x)?;                     // [2, 8, 64, 64]
//! let y_ref = layer.forward_cpu(&x)?;                   // the f64 reference
//! # Ok(()) }
//! ```
//!
//! Layout: [`params`] (shape math and validation, shared by all backends), [`tensor`] and [`io`] (host
//! tensors, safetensors), [`cpu`] (the reference), [`gpu`] (context, buffers, kernels, selection), [`layer`]
//! (the nn-style layer), [`suite`] (the benchmark cases).

pub mod cpu;
pub mod error;
pub mod gpu;
pub mod gradients;
pub mod io;
pub mod layer;
pub mod params;
pub mod precision;
pub mod suite;
pub mod tensor;

pub use error::{ConvtError, Result};
pub use gpu::{GpuContext, GpuGradients, GpuOptions, GpuTensor};
pub use gradients::Gradients;
pub use layer::{ConvTranspose2d, ConvTranspose2dOptions, GpuConvTranspose2d, LayerConfig};
pub use params::{ConvShape, ConvTranspose2dParams, Hw};
pub use precision::Precision;
pub use tensor::{ErrorStats, Tensor};
