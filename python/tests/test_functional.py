"""convt.conv_transpose2d against the float64 numpy reference, on fresh random problems."""

import os

import numpy as np
import pytest

import convt
from conftest import F32_TOLERANCE, reference, rel_l2

# (batch, in_channels, out_channels, input H, W, kernel kH, kW, stride, padding, output_padding, groups, dilation,
# bias): small problems that together take every option, per axis where PyTorch allows it.
CASES = [
    (2, 3, 4, 5, 5, 3, 3, 1, 0, 0, 1, 1, True),
    (1, 4, 6, 4, 7, 3, 5, 1, 0, 0, 1, 1, False),
    (2, 4, 3, 5, 6, 3, 4, (2, 3), (1, 2), 0, 1, 1, True),
    (1, 3, 4, 4, 5, 3, 3, (2, 3), (1, 0), (1, 2), 1, 1, True),
    (2, 3, 2, 5, 4, 3, 2, 1, (0, 1), 0, 1, (2, 3), True),
    (2, 4, 6, 5, 5, 3, 3, (1, 2), (1, 0), (0, 1), 2, 1, True),
    (2, 4, 4, 6, 5, 3, 3, 2, 1, (1, 0), 4, 1, True),
    (1, 4, 8, 5, 4, 2, 3, 1, 0, 0, 4, 1, False),
    (3, 6, 9, 4, 5, 2, 3, (3, 2), (2, 1), (1, 2), 3, (2, 3), True),
    (2, 3, 4, 5, 4, 3, 3, 1, 0, 1, 1, 2, True),
    (2, 5, 3, 4, 6, 1, 1, 2, 0, 1, 1, 1, True),
    (2, 3, 2, 2, 3, 5, 4, (1, 2), (0, 1), 0, 1, 1, True),
    (2, 3, 2, 3, 4, 3, 3, 1, (2, 0), 0, 1, 1, True),
    (2, 8, 16, 6, 9, 3, 5, (2, 3), (1, 2), 0, 4, (2, 1), False),
    (2, 4, 6, 4, 5, 3, 3, 5, 1, 0, 1, 2, False),
    (3, 4, 3, 1, 1, 3, 3, 2, 0, 0, 1, 1, True),
]


def _draw(rng, case):
    n, cin, cout, h, w, kh, kw, stride, padding, output_padding, groups, dilation, bias = case
    x = rng.standard_normal((n, cin, h, w)).astype(np.float32)
    weight = rng.standard_normal((cin, cout // groups, kh, kw)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    opts = dict(stride=stride, padding=padding, output_padding=output_padding, groups=groups, dilation=dilation)
    return x, weight, b, opts


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:7])))
def test_gpu_matches_float64_reference(rng, case):
    x, weight, b, opts = _draw(rng, case)
    out = convt.conv_transpose2d(x, weight, b, **opts)
    expected = reference(x, weight, b, **opts)
    assert out.dtype == np.float32
    assert out.shape == expected.shape
    assert rel_l2(out, expected) <= F32_TOLERANCE


@pytest.mark.parametrize("case", CASES[::3], ids=lambda c: "x".join(map(str, c[:7])))
def test_cpu_reference_matches_float64_reference(rng, case):
    x, weight, b, opts = _draw(rng, case)
    out = convt.conv_transpose2d(x, weight, b, device="cpu", **opts)
    assert rel_l2(out, reference(x, weight, b, **opts)) <= F32_TOLERANCE


def test_unbatched_input_gives_unbatched_output(rng):
    x, weight, b, opts = _draw(rng, CASES[8])
    out = convt.conv_transpose2d(x[1], weight, b, **opts)
    expected = reference(x[1], weight, b, **opts)
    assert out.shape == expected.shape and out.ndim == 3
    assert rel_l2(out, expected) <= F32_TOLERANCE


def test_empty_batch_gives_empty_output(rng):
    x = np.zeros((0, 3, 4, 4), np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    assert convt.conv_transpose2d(x, w, stride=2).shape == (0, 2, 9, 9)


def test_fast_precision_within_its_bound(rng):
    x, weight, b, opts = _draw(rng, CASES[2])
    out = convt.conv_transpose2d(x, weight, b, precision="fast", **opts)
    assert rel_l2(out, reference(x, weight, b, **opts)) <= 1e-3


def test_float16_runs_in_float16(rng):
    x, weight, b, opts = _draw(rng, CASES[5])
    x16, w16, b16 = x.astype(np.float16), weight.astype(np.float16), b.astype(np.float16)
    out = convt.conv_transpose2d(x16, w16, b16, **opts)
    assert out.dtype == np.float16
    # The float64 answer for the float16 values, rounded once to float16: within half a float16 unit in the last
    # place, plus float32's summation error.
    expected = reference(x16, w16, b16, **opts)
    half_ulp = np.spacing(np.abs(expected).astype(np.float16)).astype(np.float64) / 2
    slack = 1e-6 * np.abs(expected).max()
    assert np.all(np.abs(out.astype(np.float64) - expected) <= half_ulp + slack)


def test_mixed_dtypes_are_refused_as_pytorch_does(rng):
    x, weight, b, opts = _draw(rng, CASES[0])
    with pytest.raises(TypeError, match="^convt: weight has dtype float32, but input has float16"):
        convt.conv_transpose2d(x.astype(np.float16), weight, b, **opts)
    with pytest.raises(TypeError, match="^convt: bias has dtype float16, but input has float32"):
        convt.conv_transpose2d(x, weight, b.astype(np.float16), **opts)
    # A list has no dtype of its own: it takes the input's.
    out = convt.conv_transpose2d(x.astype(np.float16), weight.astype(np.float16), b.tolist(), **opts)
    same = convt.conv_transpose2d(x.astype(np.float16), weight.astype(np.float16), b.astype(np.float16), **opts)
    np.testing.assert_array_equal(out, same)


def test_bad_inputs_name_the_argument(rng):
    x, weight, b, opts = _draw(rng, CASES[0])
    for kwargs, name in [(dict(stride=2**63), "stride"), (dict(padding=(0, -(2**63) - 1)), "padding"),
                         (dict(groups=2**64), "groups")]:
        with pytest.raises(ValueError, match=f"^{name} is out of range: .* does not fit in 64 bits"):
            convt.conv_transpose2d(x, weight, **kwargs)
    with pytest.raises(ValueError, match="^convt: input holds 1e\\+39, beyond float32's range"):
        big = x.astype(np.float64)
        big[0, 0, 0, 0] = 1e39
        convt.conv_transpose2d(big, weight.astype(np.float64), **opts)

    class BrokenDLPack:
        def __dlpack__(self, *args, **kwargs):
            raise KeyError("no such stream")

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(TypeError, match="^convt: cannot read input through DLPack: 'no such stream'"):
        convt.conv_transpose2d(BrokenDLPack(), weight)


def test_float64_input_computes_in_float32_returns_float64(rng):
    x, weight, b, opts = _draw(rng, CASES[3])
    out = convt.conv_transpose2d(x.astype(np.float64), weight.astype(np.float64), b.astype(np.float64), **opts)
    assert out.dtype == np.float64
    assert rel_l2(out, reference(x, weight, b, **opts)) <= F32_TOLERANCE


def test_non_contiguous_and_list_inputs(rng):
    x, weight, b, opts = _draw(rng, CASES[0])
    xt = np.asfortranarray(x)[:, :, ::1, :]
    wt = weight.transpose(1, 0, 2, 3).copy().transpose(1, 0, 2, 3)
    expected = reference(x, weight, b, **opts)
    assert rel_l2(convt.conv_transpose2d(xt, wt, b.tolist(), **opts), expected) <= F32_TOLERANCE


class ArrayLike:
    """Exposes only ``__array__``, as CPU torch tensors do."""

    def __init__(self, a):
        self._a = a

    def __array__(self, dtype=None, copy=None):
        return self._a if dtype is None else self._a.astype(dtype)


class DLPackOnly:
    """Exposes only the DLPack protocol."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, *args, **kwargs):
        return self._a.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_array_protocol_and_dlpack_inputs(rng):
    x, weight, b, opts = _draw(rng, CASES[1])
    expected = reference(x, weight, b, **opts)
    assert rel_l2(convt.conv_transpose2d(ArrayLike(x), ArrayLike(weight), **opts), expected) <= F32_TOLERANCE
    assert rel_l2(convt.conv_transpose2d(DLPackOnly(x), DLPackOnly(weight), **opts), expected) <= F32_TOLERANCE


def test_torch_tensors_match_torch():
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 4, 5, 6, requires_grad=True)
    w = torch.randn(4, 3, 3, 2)
    b = torch.randn(6)
    expected = torch.nn.functional.conv_transpose2d(x, w, b, stride=(2, 1), padding=1, groups=2, dilation=(1, 2))
    out = convt.conv_transpose2d(x, w, b, stride=(2, 1), padding=1, groups=2, dilation=(1, 2))
    assert rel_l2(out, expected.detach().numpy()) <= F32_TOLERANCE


# Each invalid call and the start of the library's message for it (PyTorch's wording).
INVALID = [
    (dict(groups=2), (3, 2, 3, 3), "in_channels must be divisible by groups"),
    (dict(stride=2, output_padding=2), (4, 2, 3, 3), "output padding must be smaller than either stride or dilation"),
    (dict(stride=0), (4, 2, 3, 3), "non-positive stride is not supported"),
    (dict(padding=-1), (4, 2, 3, 3), "negative padding is not supported"),
    (dict(dilation=(1, 0)), (4, 2, 3, 3), "dilation should be greater than zero"),
    (dict(groups=0), (4, 2, 3, 3), "non-positive groups is not supported"),
    (dict(), (3, 2, 3, 3), "in_channels mismatch"),
    (dict(padding=5), (4, 2, 3, 3), "output size is too small"),
    (dict(), (4, 2, 3), "expected a 4D weight"),
    (dict(precision="tf32"), (4, 2, 3, 3), "precision must be `f32` or `fast`"),
    (dict(device="cuda"), (4, 2, 3, 3), 'device must be "gpu" or "cpu"'),
]


@pytest.mark.parametrize("kwargs,weight_shape,message", INVALID, ids=[m for _, _, m in INVALID])
def test_invalid_arguments_raise_value_error(kwargs, weight_shape, message):
    x = np.ones((1, 4, 5, 5), np.float32)
    with pytest.raises(ValueError, match="^" + message):
        convt.conv_transpose2d(x, np.ones(weight_shape, np.float32), **kwargs)


def test_bad_bias_and_input_rank():
    x = np.ones((1, 4, 5, 5), np.float32)
    w = np.ones((4, 2, 3, 3), np.float32)
    with pytest.raises(ValueError, match="expected bias to be 1-dimensional with 2 elements"):
        convt.conv_transpose2d(x, w, np.ones(3, np.float32))
    with pytest.raises(ValueError, match="expected 3D \\(unbatched\\) or 4D \\(batched\\) input"):
        convt.conv_transpose2d(x[0, 0], w)


def test_non_float_input_raises_type_error():
    with pytest.raises(TypeError, match="floating-point"):
        convt.conv_transpose2d(np.ones((1, 4, 5, 5), np.int64), np.ones((4, 2, 3, 3), np.float32))
    with pytest.raises(TypeError, match="stride must be an int or a pair"):
        convt.conv_transpose2d(np.ones((1, 4, 5, 5), np.float32), np.ones((4, 2, 3, 3), np.float32), stride=1.5)


def test_concurrent_calls_share_one_context(rng):
    # The GIL is released while the GPU works and the context is shared: calls from several threads at once
    # must each get their own right answer.
    from concurrent.futures import ThreadPoolExecutor

    problems = [_draw(rng, CASES[i]) for i in (0, 2, 5, 9, 0, 2, 5, 9)]

    def call(problem):
        x, weight, b, opts = problem
        return rel_l2(convt.conv_transpose2d(x, weight, b, **opts), reference(x, weight, b, **opts))

    with ThreadPoolExecutor(max_workers=4) as pool:
        errors = list(pool.map(call, problems))
    assert max(errors) <= F32_TOLERANCE


def _bfloat16_values(bits):
    """float64 values of bfloat16 bits (uint16)."""
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _within_half_a_bfloat16_unit(out_bits, expected):
    # The float64 answer for the bfloat16 values, rounded once to bfloat16: within half a bfloat16 unit in the
    # last place (8 significant bits), plus float32's summation error.
    out = _bfloat16_values(out_bits)
    half_ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(expected), 1e-30))) - 8)
    assert np.all(np.abs(out - expected) <= half_ulp + 1e-6 * np.abs(expected).max())


def test_ml_dtypes_bfloat16_runs_in_bfloat16(rng):
    import ml_dtypes  # installed by scripts/test_python.sh
    x, weight, b, opts = _draw(rng, CASES[5])
    x16, w16, b16 = (a.astype(ml_dtypes.bfloat16) for a in (x, weight, b))
    for device in ("gpu", "cpu"):
        out = convt.conv_transpose2d(x16, w16, b16, device=device, **opts)
        assert out.dtype == ml_dtypes.bfloat16 and out.shape == reference(x, weight, b, **opts).shape
        values = [a.astype(np.float64) for a in (x16, w16, b16)]
        _within_half_a_bfloat16_unit(out.view(np.uint16), reference(*values, **opts))
    with pytest.raises(TypeError, match="^convt: weight has dtype float32, but input has bfloat16"):
        convt.conv_transpose2d(x16, weight, b16, **opts)


def test_torch_bfloat16_runs_in_bfloat16_and_stays_torch():
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    # A strided, non-contiguous input: read in logical order.
    x = torch.randn(1, 2, 3, 6, generator=gen).bfloat16()[:, :, :, ::2]
    w = torch.randn(2, 2, 2, 2, generator=gen).bfloat16()
    b = torch.randn(2, generator=gen).bfloat16()
    out = convt.conv_transpose2d(x, w, b, stride=2)
    assert out.dtype == torch.bfloat16 and tuple(out.shape) == (1, 2, 6, 6)
    expected = reference(*(t.double().numpy() for t in (x, w, b)), stride=2)
    _within_half_a_bfloat16_unit(out.view(torch.int16).numpy().view(np.uint16), expected)


def test_no_driver_noise_on_stderr_without_xdg_runtime_dir(tmp_path):
    """Where XDG_RUNTIME_DIR is unset (servers, containers), using convt prints nothing on stderr: Mesa's
    Wayland probe would print an error line per adapter, which the package keeps off."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    code = "import convt, numpy as np; convt.conv_transpose2d(np.ones((1, 1, 2, 2), np.float32), np.ones((1, 1, 2, 2), np.float32))"
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
