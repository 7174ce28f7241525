//! The result of a backward pass: the gradients of a loss with respect to the input, the weight and the bias,
//! given the gradient of that loss with respect to the output (`grad_output`), as PyTorch's autograd returns them.

use crate::tensor::Tensor;

/// The gradients of a backward pass as host tensors ([`crate::ConvTranspose2d::backward`],
/// [`crate::cpu::conv_transpose2d_backward`]); [`crate::GpuGradients`] holds them on the GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Gradients {
    /// The input's size: `[N, Cin, H, W]` (or `[Cin, H, W]` for an unbatched input).
    pub grad_input: Tensor,
    /// `[Cin, Cout/groups, kH, kW]`, the weight's size.
    pub grad_weight: Tensor,
    /// `[Cout]`; `None` when the layer has no bias.
    pub grad_bias: Option<Tensor>,
}
