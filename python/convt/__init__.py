"""convt: PyTorch's ``ConvTranspose2d`` (every option) as WGSL compute shaders on wgpu.

``conv_transpose2d`` is ``torch.nn.functional.conv_transpose2d`` and ``ConvTranspose2d`` is
``torch.nn.ConvTranspose2d`` (forward, backward, state_dict), on numpy arrays or anything ``numpy.asarray``
takes (CPU torch tensors included). Results are numpy arrays in the input's dtype (a torch bfloat16 tensor, which
numpy cannot hold, gives torch bfloat16 tensors). float16 and bfloat16 values (numpy's float16, ml_dtypes'
bfloat16, torch's) go to the GPU and come back as stored, with no float32 copy. ``device="cpu"`` runs the
library's float64 CPU reference instead of the GPU.

Errors: invalid arguments, shapes and options raise ``ValueError``, exhausted memory ``MemoryError``, GPU and
driver failures ``RuntimeError``; the messages are the library's (PyTorch's wording where PyTorch has one).
"""

import contextlib
import json
import os

import numpy as np

# Mesa's drivers connect to a Wayland display while wgpu lists adapters, and libwayland prints "error:
# XDG_RUNTIME_DIR is invalid or not set" for each one where the variable is unset (a server, a container): noise
# that looks like an error of the caller's. There is no display to find then; the temporary directory silences
# it, as the `convt` command does. Set before the extension can make its GPU context.
if os.name == "posix" and not os.environ.get("XDG_RUNTIME_DIR"):
    import tempfile

    os.environ["XDG_RUNTIME_DIR"] = tempfile.gettempdir()

try:
    from . import _convt  # noqa: E402
except ImportError as e:  # the source tree (python/convt) found before the installed package
    raise ImportError(
        f"convt: the compiled extension convt._convt is not beside {os.path.dirname(__file__)}: that is the "
        "package's source; install it (pip install ./python) and import it from another directory"
    ) from e

__all__ = ["conv_transpose2d", "ConvTranspose2d", "info"]

try:
    from importlib.metadata import version as _version

    __version__ = _version("convt")
except Exception:  # run from a source tree that was not installed
    __version__ = "unknown"

# A torch bfloat16 tensor's results: torch bfloat16 tensors (numpy has no bfloat16).
_TORCH_BFLOAT16 = "torch.bfloat16"


def _to_numpy(x, what):
    """``x`` as a numpy array: through ``__array__`` (numpy arrays, CPU torch tensors, lists), else DLPack."""
    if isinstance(x, np.ndarray):
        return x
    # A torch tensor that requires grad refuses ``__array__``; its values are what is wanted here.
    if getattr(x, "requires_grad", False) and hasattr(x, "detach"):
        x = x.detach()
    if hasattr(x, "__dlpack__") and not hasattr(x, "__array__"):
        try:
            return np.from_dlpack(x)
        except Exception as e:  # a producer's own failure, whatever its type
            raise TypeError(f"convt: cannot read {what} through DLPack: {e}") from e
    try:
        return np.asarray(x)
    except Exception as e:  # the producer's own message says why (a GPU tensor, an unsupported dtype)
        # A floating dtype numpy lacks (torch's bfloat16) is read as float32, as every such dtype computes.
        is_float = getattr(x, "is_floating_point", None)
        if callable(is_float) and is_float() and getattr(x, "device", None) is not None and str(x.device) == "cpu":
            return np.asarray(x.float())
        raise TypeError(f"convt: cannot read {what} as a numpy array: {e}") from e


def _is_float(dtype):
    # numpy's floating kinds, plus extension float types (ml_dtypes' bfloat16) that convert to float32.
    return dtype.kind == "f" or "float" in dtype.name


def _torch_bfloat16_bits(x, what):
    """The bits of a torch bfloat16 tensor as a contiguous uint16 array, or None for anything else."""
    if str(getattr(x, "dtype", "")) != _TORCH_BFLOAT16 or not hasattr(x, "view"):
        return None
    if str(getattr(x, "device", "cpu")) != "cpu":
        raise TypeError(f"convt: cannot read {what}: a torch tensor on {x.device} (move it to the CPU first)")
    import torch

    return x.detach().contiguous().view(torch.int16).numpy().view(np.uint16)


def _float_input(x, what):
    """``(argument, compute dtype code, result dtype)`` for a tensor argument: the argument is the bits of float16
    and bfloat16 values as a contiguous uint16 array (they compute in their dtype), else float32 values (float32
    computes as itself, every other floating dtype as float32)."""
    bits = _torch_bfloat16_bits(x, what)
    if bits is not None:
        return bits, "bf16", _TORCH_BFLOAT16
    a = _to_numpy(x, what)
    if not _is_float(a.dtype):
        raise TypeError(f"convt: {what} must be a floating-point tensor, got dtype {a.dtype}")
    if a.dtype == np.float16:
        return np.ascontiguousarray(a).view(np.uint16), "f16", a.dtype
    if a.dtype.name == "bfloat16" and a.dtype.itemsize == 2:  # ml_dtypes' bfloat16
        return np.ascontiguousarray(a).view(np.uint16), "bf16", a.dtype
    # Wider floats compute in float32: a finite value beyond its range becomes infinite in the conversion (looked
    # for only where the float32 copy holds an infinity, so a call without one pays a single pass), and is
    # refused below rather than warned about.
    with np.errstate(over="ignore"):
        x = np.ascontiguousarray(a, dtype=np.float32)
    if a.dtype.itemsize > 4 and np.isinf(x).any():
        overflow = np.isinf(x) & np.isfinite(a)
        if overflow.any():
            raise ValueError(
                f"convt: {what} holds {np.abs(a[overflow]).max():.6g}, beyond float32's range (largest "
                f"{np.finfo(np.float32).max:.6g}); {a.dtype} tensors compute in float32"
            )
    return x, "f32", a.dtype


def _same_dtype(x, what, code, dtype):
    """A weight or bias for a functional call on an input of ``dtype`` (compute code ``code``), which PyTorch
    requires to have the input's dtype: a mix is a ``TypeError`` naming both."""
    if getattr(x, "dtype", None) is None:  # a list or another container without a dtype: the input's
        return _operand(x, what, code)
    arg, _, given = _float_input(x, what)
    if given != dtype:
        raise TypeError(
            f"convt: {what} has dtype {given}, but input has {dtype}: give them one dtype, as PyTorch requires "
            f"(convert with .astype or .to)"
        )
    return arg


def _operand(x, what, code):
    """A weight, bias or gradient for a call computing in ``code``: its bits where it has that half-precision
    dtype, else its values as float32 (the library rounds them to ``code``)."""
    arg, own, _ = _float_input(x, what)
    if own == code or own == "f32":
        return arg
    if own == "f16":
        return arg.view(np.float16).astype(np.float32)
    return (arg.astype(np.uint32) << 16).view(np.float32)  # bfloat16: the high half of a float32


_INT64 = (-(2**63), 2**63 - 1)


def _in_int64(v, name):
    if not _INT64[0] <= v <= _INT64[1]:
        raise ValueError(f"{name} is out of range: {v} does not fit in 64 bits")
    return v


def _seed(value):
    """Any int as a 64-bit seed (modulo 2**64)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {value!r}")
    return int(value) % (1 << 64)


def _pair(value, name):
    """An int or a pair of ints as ``(h, w)``, as PyTorch's ``_pair`` takes them."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int or a pair of ints, got {value!r}")
    if isinstance(value, (int, np.integer)):
        return (_in_int64(int(value), name),) * 2
    try:
        items = tuple(value)
    except TypeError:
        raise TypeError(f"{name} must be an int or a pair of ints, got {value!r}") from None
    if len(items) == 1:
        items = items * 2
    if len(items) != 2 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in items):
        raise ValueError(f"{name} must be an int or a pair of ints, got {value!r}")
    return (_in_int64(int(items[0]), name), _in_int64(int(items[1]), name))


def _int(value, name):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {value!r}")
    return _in_int64(int(value), name)


def _result(out, dtype):
    """The library's result in the input's dtype: float32 values, or a half-precision result's uint16 bits."""
    if out.dtype == np.uint16:
        if dtype == _TORCH_BFLOAT16:
            import torch

            return torch.from_numpy(out.view(np.int16)).view(torch.bfloat16)
        return out.view(dtype)
    return out if out.dtype == dtype else out.astype(dtype)


def _call_options(stride, padding, output_padding, groups, dilation, precision, device):
    """The convolution's options as the extension's calls take them, each checked and named."""
    return (
        _pair(stride, "stride"),
        _pair(padding, "padding"),
        _pair(output_padding, "output_padding"),
        _int(groups, "groups"),
        _pair(dilation, "dilation"),
        str(precision),
        str(device),
    )


def conv_transpose2d(
    input,
    weight,
    bias=None,
    stride=1,
    padding=0,
    output_padding=0,
    groups=1,
    dilation=1,
    precision="f32",
    device="gpu",
):
    """``torch.nn.functional.conv_transpose2d``.

    Parameters
    ----------
    input : array_like
        ``[N, Cin, H, W]`` or ``[Cin, H, W]``: a numpy array, a CPU torch tensor, or anything ``numpy.asarray``
        or DLPack reads. float32, float16 and bfloat16 compute in their dtype, other floating dtypes in float32.
    weight : array_like
        ``[Cin, Cout/groups, kH, kW]``, of the input's dtype (as PyTorch requires).
    bias : array_like, optional
        ``[Cout]``, of the input's dtype.
    stride, padding, output_padding, dilation : int or (int, int)
        As PyTorch's, per axis where a pair is given.
    groups : int
        Channel groups; must divide ``Cin`` and ``Cout``.
    precision : {"f32", "fast"}
        ``"f32"`` is exact (f32 products and sums); ``"fast"`` allows 1e-3 relative error for speed (f16
        operands, f32 sums), like PyTorch's TF32.
    device : {"gpu", "cpu"}
        ``"cpu"`` runs the library's float64 CPU reference.

    Returns
    -------
    numpy.ndarray
        The output, in the input's dtype (a torch bfloat16 input gives a torch bfloat16 tensor).

    Raises
    ------
    ValueError
        Invalid options or shapes (PyTorch's wording), integers beyond 64 bits, values beyond float32's range in
        a wider input.
    TypeError
        A non-floating tensor, one that cannot be read, weight or bias of another dtype than the input.
    MemoryError
        Not enough device or host memory.
    RuntimeError
        The GPU or its driver failed.
    """
    x, code, dtype = _float_input(input, "input")
    w = _same_dtype(weight, "weight", code, dtype)
    b = None if bias is None else _same_dtype(bias, "bias", code, dtype)
    out = _convt.conv_transpose2d(
        x,
        w,
        b,
        *_call_options(stride, padding, output_padding, groups, dilation, precision, device),
        code,
    )
    return _result(out, dtype)


def _backward(
    input,
    weight,
    bias,
    grad_output,
    stride=1,
    padding=0,
    output_padding=0,
    groups=1,
    dilation=1,
    precision="f32",
    device="gpu",
):
    """``(grad_input, grad_weight, grad_bias)`` of ``conv_transpose2d`` with these arguments given the gradient of
    its output, each in the input's dtype (grad_bias None without a bias, whose values do not enter the
    gradients): what ``convt.torch`` differentiates with."""
    x, code, dtype = _float_input(input, "input")
    w = _same_dtype(weight, "weight", code, dtype)
    b = None if bias is None else _same_dtype(bias, "bias", code, dtype)
    go = _same_dtype(grad_output, "grad_output", code, dtype)
    gi, gw, gb = _convt.conv_transpose2d_backward(
        x,
        w,
        b,
        go,
        *_call_options(stride, padding, output_padding, groups, dilation, precision, device),
        code,
    )
    return _result(gi, dtype), _result(gw, dtype), None if gb is None else _result(gb, dtype)


def _output_size(size):
    if size is None:
        return None
    sizes = [_int(v, "output_size") for v in size]
    if any(v < 0 for v in sizes):
        raise ValueError(f"output_size must hold non-negative sizes, got {sizes}")
    return sizes


class ConvTranspose2d:
    """``torch.nn.ConvTranspose2d``: the same arguments, the same initialisation (U(-b, b) with
    b = 1/sqrt(out_channels/groups * kH * kW), drawn from ``seed``, random when None), the same state_dict.

    ``weight`` and ``bias`` return copies (numpy float32); assign to them to change the parameters (the shape
    must stay). A float16 or bfloat16 input runs in its dtype, with the parameters rounded to it for that call,
    and gives results in it. ``device="cpu"`` runs every call on the float64 CPU reference.
    """

    def __init__(
        self,
        in_channels,
        out_channels,
        kernel_size,
        stride=1,
        padding=0,
        output_padding=0,
        groups=1,
        bias=True,
        dilation=1,
        precision="f32",
        seed=None,
        device="gpu",
    ):
        """Builds the layer.

        Parameters
        ----------
        in_channels, out_channels : int
            Channels of the input and the output.
        kernel_size : int or (int, int)
            The kernel's ``(kH, kW)``.
        stride, padding, output_padding, dilation : int or (int, int)
            As PyTorch's.
        groups : int
            Channel groups; must divide both channel counts.
        bias : bool
            Whether the layer has a bias.
        precision : {"f32", "fast"}
            The forward's and the backward's precision (see ``conv_transpose2d``).
        seed : int, optional
            Seeds the initialisation (any int, taken modulo 2**64); random when None.
        device : {"gpu", "cpu"}
            ``"cpu"`` runs every call on the float64 CPU reference.

        Raises
        ------
        ValueError
            Invalid sizes or options (PyTorch's wording), integers beyond 64 bits.
        TypeError
            Arguments of the wrong type.
        """
        if seed is None:
            seed = int.from_bytes(os.urandom(8), "little")
        self._layer = _convt.ConvTranspose2d(
            _int(in_channels, "in_channels"),
            _int(out_channels, "out_channels"),
            _pair(kernel_size, "kernel_size"),
            _pair(stride, "stride"),
            _pair(padding, "padding"),
            _pair(output_padding, "output_padding"),
            _int(groups, "groups"),
            bool(bias),
            _pair(dilation, "dilation"),
            str(precision),
            _seed(seed),
        )
        if device not in ("gpu", "cpu"):
            raise ValueError(f'device must be "gpu" or "cpu", got {device!r}')
        self.device = device
        (
            self.in_channels,
            self.out_channels,
            self.kernel_size,
            self.stride,
            self.padding,
            self.output_padding,
            self.groups,
            _,
            self.dilation,
        ) = self._layer.config()

    @property
    def weight(self):
        """``[in_channels, out_channels/groups, kH, kW]``, float32 (a copy)."""
        return self._layer.weight

    @weight.setter
    def weight(self, value):
        value = _operand(value, "weight", "f32")
        with self._assigning():
            self._layer.set_weight(value)

    @property
    def bias(self):
        """``[out_channels]`` float32 (a copy), or None for a layer built with ``bias=False``."""
        return self._layer.bias

    @bias.setter
    def bias(self, value):
        if value is None:
            if self._layer.bias is None:
                return
            raise ValueError("cannot remove the bias of a layer built with one (build it with bias=False)")
        value = _operand(value, "bias", "f32")
        with self._assigning():
            self._layer.set_bias(value)

    @property
    def precision(self):
        """``"f32"`` (exact) or ``"fast"`` (1e-3 relative error allowed, like PyTorch's TF32), for the forward and
        the backward."""
        return self._layer.precision

    @precision.setter
    def precision(self, value):
        with self._assigning():
            self._layer.precision = str(value)

    @contextlib.contextmanager
    def _assigning(self):
        """Turns the extension's borrow error, raised when a parameter is assigned while another thread runs a
        call of this layer, into a message saying so (the assignment did not happen)."""
        try:
            yield
        except RuntimeError as e:
            if "borrow" not in str(e).lower():
                raise
            raise RuntimeError(
                "convt: the layer is running a call in another thread; assign its parameters or precision when "
                "no call of this layer is running (nothing was changed)"
            ) from None

    def forward(self, input, output_size=None):
        """The layer's output.

        Parameters
        ----------
        input : array_like
            ``[N, Cin, H, W]`` or ``[Cin, H, W]``; float16 and bfloat16 compute in their dtype.
        output_size : sequence of int, optional
            PyTorch's: ``[H, W]`` or the whole output shape, reached through output_padding.

        Returns
        -------
        numpy.ndarray
            The output, in the input's dtype (a torch bfloat16 input gives a torch bfloat16 tensor).

        Raises
        ------
        ValueError
            A shape or an output_size the layer cannot take (PyTorch's wording).
        TypeError
            An input that is not a floating tensor, or cannot be read.
        """
        x, code, dtype = _float_input(input, "input")
        out = self._layer.forward(x, code, self.device, _output_size(output_size))
        return _result(out, dtype)

    __call__ = forward

    def backward(self, input, grad_output):
        """The gradients autograd computes, given the gradient of the output.

        The output_padding is the one whose output has grad_output's size, so a forward with ``output_size`` is
        differentiated as run; the arithmetic is the layer's ``precision``.

        Parameters
        ----------
        input : array_like
            The forward's input.
        grad_output : array_like
            The gradient of the forward's output (its size).

        Returns
        -------
        tuple
            ``(grad_input, grad_weight, grad_bias)`` in the input's dtype; grad_bias is None without a bias.

        Raises
        ------
        ValueError
            A grad_output of another size than the output (it names the size expected).
        TypeError
            A tensor that is not floating, or cannot be read.
        """
        x, code, dtype = _float_input(input, "input")
        go = _operand(grad_output, "grad_output", code)
        gi, gw, gb = self._layer.backward(x, go, code, self.device)
        return _result(gi, dtype), _result(gw, dtype), None if gb is None else _result(gb, dtype)

    def parameters(self):
        """The parameters as PyTorch lists them: weight, then bias when present."""
        return [self.weight] + ([] if self.bias is None else [self.bias])

    def state_dict(self):
        """``{"weight": ..., "bias": ...}`` (no "bias" without one), float32 numpy arrays, PyTorch's keys."""
        state = {"weight": self.weight}
        if self.bias is not None:
            state["bias"] = self.bias
        return state

    def load_state_dict(self, state_dict, strict=True):
        """Loads ``weight`` and ``bias``; every value is checked before any is assigned, so a failed load leaves
        the layer as it was.

        Parameters
        ----------
        state_dict : mapping
            Arrays or CPU torch tensors by PyTorch's keys (a torch ``state_dict()`` loads as it is).
        strict : bool
            As PyTorch's: the keys must be exactly the layer's.

        Raises
        ------
        ValueError
            Missing or unexpected keys, or sizes that differ (PyTorch's messages).
        TypeError
            A state_dict that is not a mapping, or a value that is not a floating tensor.
        """
        from collections.abc import Mapping

        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        expected = set(self.state_dict())
        given = set(state_dict)
        missing = sorted(expected - given)
        unexpected = sorted(given - expected)
        errors = []
        if strict and unexpected:
            errors.append("Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + ".")
        if strict and missing:
            errors.append("Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ".")
        values = {}
        for key in sorted(expected & given):
            value = _operand(state_dict[key], key, "f32")  # a float32 copy, or a TypeError naming the key
            current = getattr(self, key)
            if tuple(value.shape) != current.shape:
                errors.append(
                    f"size mismatch for {key}: copying a param with shape {tuple(value.shape)} from checkpoint, "
                    f"the shape in current model is {current.shape}."
                )
            else:
                values[key] = value
        if errors:
            raise ValueError("Error(s) in loading state_dict for ConvTranspose2d:\n\t" + "\n\t".join(errors))
        # Checked first, assigned after: a failed load leaves the layer as it was.
        with self._assigning():
            for key, value in values.items():
                getattr(self._layer, "set_" + key)(value)

    def extra_repr(self):
        """The argument list of ``repr``, as PyTorch's ``_ConvNd.extra_repr`` writes it."""
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0, 0):
            s += f", padding={self.padding}"
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.output_padding != (0, 0):
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.precision != "f32":
            s += f", precision={self.precision!r}"
        if self.device != "gpu":
            s += f", device={self.device!r}"
        return s

    def __repr__(self):
        return f"ConvTranspose2d({self.extra_repr()})"


def info():
    """The GPU adapter convt uses, as ``convt info --json`` describes it: ``name``, ``backend``,
    ``device_type``, ``driver``, ``driver_info`` of the chosen adapter, plus ``adapters`` (every one found),
    ``chosen``, ``limits`` and ``features``. Creates the process's GPU context if it does not exist yet."""
    doc = json.loads(_convt.info_json())
    return {**doc["chosen"], **doc}
