"""convt inside PyTorch models: ``ConvTranspose2d`` is ``torch.nn.ConvTranspose2d`` (its constructor, parameters,
initialisation, state_dict, ``output_size``) whose forward and backward run on convt, and ``conv_transpose2d`` is
``torch.nn.functional.conv_transpose2d`` on convt. Both go through the operator
``torch.ops.convt.conv_transpose2d``, registered with ``torch.library``: autograd differentiates it (its backward
is convt's), and ``torch.compile`` traces it without a graph break.

Tensors are CPU torch tensors of float32, float16 or bfloat16, computed in their dtype (convt runs on its own wgpu
device and reads and writes the tensors' memory through the host; a tensor on another device is a ``TypeError``).
The layer keeps its parameters in the dtype it was made with and casts them to the input's dtype for each call,
as autocast does: f16 activations with an f32 master weight train as under ``torch.autocast``, the weight's
gradient arriving in f32. Inside ``torch.autocast("cpu", dtype=...)`` both forms follow autocast's rule for
PyTorch's own conv_transpose2d on the CPU: float32, float16 and bfloat16 tensors are cast to the region's dtype
before the call (differentiably: gradients return in each tensor's own dtype) and the output is in that dtype.
``precision="fast"`` (an attribute of the layer, a keyword of the functional call) allows 1e-3 relative error for
speed, like PyTorch's TF32.

Requires torch (an optional dependency of convt: ``import convt.torch`` fails without it).
"""

from typing import List, Optional, Tuple

import torch
from torch import Tensor

import convt as _convt

__all__ = ["ConvTranspose2d", "conv_transpose2d"]

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _check(what: str, t: Optional[Tensor]) -> None:
    if t is None:
        return
    if t.device.type != "cpu":
        raise TypeError(f"convt: {what} is on {t.device}; convt takes CPU tensors (it computes on its own GPU device)")
    if t.dtype not in _DTYPES:
        raise TypeError(f"convt: {what} has dtype {t.dtype}; convt computes float32, float16 and bfloat16")


def _autocast(*tensors: Optional[Tensor]) -> Tuple[Optional[Tensor], ...]:
    """Autocast's rule for conv_transpose2d on the CPU (a lower-precision op): inside ``torch.autocast("cpu")``,
    every float32, float16 or bfloat16 tensor in the region's dtype, cast with ``Tensor.to`` before the operator so
    that autograd records the casts; float64 and the rest as they are (PyTorch's autocast casts no float64)."""
    if not torch.is_autocast_enabled("cpu"):
        return tensors
    dtype = torch.get_autocast_dtype("cpu")
    return tuple(t.to(dtype) if t is not None and t.dtype in _DTYPES and t.dtype != dtype else t for t in tensors)


def _torch(out) -> Tensor:
    """A result of the numpy API (a numpy array, or for bfloat16 already a torch tensor) as a torch tensor."""
    return out if isinstance(out, Tensor) else torch.from_numpy(out)


def _options(stride, padding, output_padding, groups, dilation, precision) -> dict:
    return dict(
        stride=tuple(stride),
        padding=tuple(padding),
        output_padding=tuple(output_padding),
        groups=groups,
        dilation=tuple(dilation),
        precision=precision,
    )


@torch.library.custom_op("convt::conv_transpose2d", mutates_args=())
def _forward_op(
    input: Tensor,
    weight: Tensor,
    bias: Optional[Tensor],
    stride: List[int],
    padding: List[int],
    output_padding: List[int],
    groups: int,
    dilation: List[int],
    precision: str,
) -> Tensor:
    for what, t in (("input", input), ("weight", weight), ("bias", bias)):
        _check(what, t)
    opts = _options(stride, padding, output_padding, groups, dilation, precision)
    return _torch(_convt.conv_transpose2d(input, weight, bias, **opts))


def _output_shape(input, weight, stride, padding, output_padding, groups, dilation) -> Tuple[int, ...]:
    (h, w), (kh, kw) = input.shape[-2:], weight.shape[-2:]
    size = [
        (n - 1) * stride[a] - 2 * padding[a] + dilation[a] * (k - 1) + output_padding[a] + 1
        for a, (n, k) in enumerate(((h, kh), (w, kw)))
    ]
    return (*input.shape[:-3], weight.shape[1] * groups, *size)


@_forward_op.register_fake
def _(input, weight, bias, stride, padding, output_padding, groups, dilation, precision):
    return input.new_empty(_output_shape(input, weight, stride, padding, output_padding, groups, dilation))


@torch.library.custom_op("convt::conv_transpose2d_backward", mutates_args=())
def _backward_op(
    input: Tensor,
    weight: Tensor,
    grad_output: Tensor,
    has_bias: bool,
    stride: List[int],
    padding: List[int],
    output_padding: List[int],
    groups: int,
    dilation: List[int],
    precision: str,
) -> Tuple[Tensor, Tensor, Tensor]:
    """(grad_input, grad_weight, grad_bias); grad_bias is empty where there is no bias."""
    for what, t in (("input", input), ("weight", weight), ("grad_output", grad_output)):
        _check(what, t)
    opts = _options(stride, padding, output_padding, groups, dilation, precision)
    bias = weight.new_empty(weight.shape[1] * groups) if has_bias else None  # only whether there is one counts
    gi, gw, gb = _convt._backward(input, weight, bias, grad_output, **opts)
    return _torch(gi), _torch(gw), _torch(gb) if has_bias else weight.new_empty(0)


@_backward_op.register_fake
def _(input, weight, grad_output, has_bias, stride, padding, output_padding, groups, dilation, precision):
    bias = weight.new_empty(weight.shape[1] * groups if has_bias else 0)
    return input.new_empty(input.shape), weight.new_empty(weight.shape), bias


def _setup_context(ctx, inputs, output):
    input, weight, bias, stride, padding, output_padding, groups, dilation, precision = inputs
    ctx.save_for_backward(input, weight)
    ctx.has_bias = bias is not None
    ctx.options = (stride, padding, output_padding, groups, dilation, precision)


def _differentiate(ctx, grad):
    input, weight = ctx.saved_tensors
    gi, gw, gb = _backward_op(input, weight, grad.contiguous(), ctx.has_bias, *ctx.options)
    return gi, gw, gb if ctx.has_bias else None, None, None, None, None, None, None


_forward_op.register_autograd(_differentiate, setup_context=_setup_context)


def _pair(v, name) -> List[int]:
    return list(_convt._pair(v, name))


def conv_transpose2d(
    input: Tensor,
    weight: Tensor,
    bias: Optional[Tensor] = None,
    stride=1,
    padding=0,
    output_padding=0,
    groups: int = 1,
    dilation=1,
    precision: str = "f32",
) -> Tensor:
    """``torch.nn.functional.conv_transpose2d`` on convt, differentiable.

    Parameters
    ----------
    input, weight, bias : torch.Tensor
        CPU tensors of one dtype (float32, float16 or bfloat16): ``[N, Cin, H, W]`` or ``[Cin, H, W]``,
        ``[Cin, Cout/groups, kH, kW]``, ``[Cout]`` (bias optional).
    stride, padding, output_padding, dilation : int or (int, int)
    groups : int
    precision : {"f32", "fast"}

    Returns
    -------
    torch.Tensor
        The output, in the input's dtype (inside ``torch.autocast("cpu")``, the region's: the tensors are cast to
        it first, as autocast casts them for PyTorch's conv_transpose2d).

    Raises
    ------
    TypeError
        A tensor not on the CPU, of another dtype, or of dtypes that differ.
    ValueError
        Invalid options or shapes, in PyTorch's words.
    """
    input, weight, bias = _autocast(input, weight, bias)
    return _forward_op(
        input,
        weight,
        bias,
        _pair(stride, "stride"),
        _pair(padding, "padding"),
        _pair(output_padding, "output_padding"),
        _convt._int(groups, "groups"),
        _pair(dilation, "dilation"),
        str(precision),
    )


class ConvTranspose2d(torch.nn.ConvTranspose2d):
    """``torch.nn.ConvTranspose2d`` computed by convt: the same constructor (``padding_mode="zeros"``,
    ``device``, ``dtype`` as PyTorch takes them), parameters, initialisation and state_dict, plus ``precision``
    (``"f32"`` exact, ``"fast"`` 1e-3 relative error allowed), a keyword of the constructor and an attribute.

    Its parameters are cast to the input's dtype for each call (autocast's rule), so a float32 layer runs
    float16 or bfloat16 activations in their dtype and accumulates its gradients in float32; inside
    ``torch.autocast("cpu", dtype=...)`` the input and the parameters are cast to the region's dtype, as for
    ``torch.nn.ConvTranspose2d``.
    """

    def __init__(self, *args, precision: str = "f32", **kwargs):
        super().__init__(*args, **kwargs)
        self.precision = precision

    @property
    def precision(self) -> str:
        return self._precision

    @precision.setter
    def precision(self, value: str) -> None:
        if value not in ("f32", "fast"):
            raise ValueError(f"precision must be `f32` or `fast`, got {value!r}")
        self._precision = value

    def forward(self, input: Tensor, output_size: Optional[List[int]] = None) -> Tensor:
        output_padding = self._output_padding(
            input, output_size, self.stride, self.padding, self.kernel_size, 2, self.dilation
        )
        input, weight, bias = _autocast(input, self.weight, self.bias)
        cast = lambda p: p if p is None or p.dtype == input.dtype else p.to(input.dtype)  # noqa: E731
        return _forward_op(
            input,
            cast(weight),
            cast(bias),
            list(self.stride),
            list(self.padding),
            list(output_padding),
            self.groups,
            list(self.dilation),
            self.precision,
        )

    def extra_repr(self) -> str:
        s = super().extra_repr()
        return s if self.precision == "f32" else s + f", precision={self.precision!r}"
