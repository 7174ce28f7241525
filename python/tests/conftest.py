"""Shared helpers: a float64 numpy reference of conv_transpose2d and its gradients, written straight from the
definition (scatter form), and the error measure the tests assert."""

import os

import numpy as np
import pytest

# The library's tolerance for exact f32 paths: relative L2 error against a float64 reference.
F32_TOLERANCE = 1e-5


def pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def output_hw(in_hw, kernel_hw, stride, padding, output_padding, dilation):
    return tuple(
        (in_hw[a] - 1) * stride[a] - 2 * padding[a] + dilation[a] * (kernel_hw[a] - 1) + output_padding[a] + 1
        for a in range(2)
    )


def _geometry(x_shape, w_shape, stride, padding, output_padding, dilation):
    stride, padding, output_padding, dilation = map(pair, (stride, padding, output_padding, dilation))
    H, W = x_shape[-2:]
    kH, kW = w_shape[-2:]
    Ho, Wo = output_hw((H, W), (kH, kW), stride, padding, output_padding, dilation)
    # The uncropped output: every position i*s + k*d, before padding crops pH from the top (and left) and the
    # output size decides where it ends (output_padding may reach past the last tap).
    full = tuple(max((n - 1) * s + (k - 1) * d + 1, p + o) for n, s, k, d, p, o in
                 zip((H, W), stride, (kH, kW), dilation, padding, (Ho, Wo)))
    return stride, padding, dilation, (Ho, Wo), full


def reference(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """``F.conv_transpose2d`` in float64 by scattering every input element through every kernel tap."""
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    unbatched = x.ndim == 3
    if unbatched:
        x = x[None]
    N, Cin, H, W = x.shape
    _, Cog, kH, kW = w.shape
    Cig = Cin // groups
    (sH, sW), (pH, pW), (dH, dW), (Ho, Wo), (FH, FW) = _geometry(
        x.shape, w.shape, stride, padding, output_padding, dilation
    )
    full = np.zeros((N, Cog * groups, FH, FW))
    for g in range(groups):
        xs = x[:, g * Cig:(g + 1) * Cig]
        for kh in range(kH):
            for kw in range(kW):
                # out[n, g*Cog+oc, ih*sH + kh*dH, iw*sW + kw*dW] += x[n, g*Cig+ic, ih, iw] * w[g*Cig+ic, oc, kh, kw]
                contrib = np.einsum("nchw,co->nohw", xs, w[g * Cig:(g + 1) * Cig, :, kh, kw])
                full[:, g * Cog:(g + 1) * Cog,
                     kh * dH:kh * dH + (H - 1) * sH + 1:sH,
                     kw * dW:kw * dW + (W - 1) * sW + 1:sW] += contrib
    out = full[:, :, pH:pH + Ho, pW:pW + Wo].copy()
    if b is not None:
        out += np.asarray(b, dtype=np.float64)[None, :, None, None]
    return out[0] if unbatched else out


def reference_backward(x, w, go, has_bias, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """``(grad_input, grad_weight, grad_bias)`` in float64: each scattered term x * w sends the gradient at its
    output position back to x (weighted by w) and to w (weighted by x)."""
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    go = np.asarray(go, dtype=np.float64)
    unbatched = x.ndim == 3
    if unbatched:
        x, go = x[None], go[None]
    N, Cin, H, W = x.shape
    _, Cog, kH, kW = w.shape
    Cig = Cin // groups
    (sH, sW), (pH, pW), (dH, dW), (Ho, Wo), (FH, FW) = _geometry(
        x.shape, w.shape, stride, padding, output_padding, dilation
    )
    assert go.shape == (N, Cog * groups, Ho, Wo)
    # The gradient on the uncropped output: zero where padding cropped the output away.
    go_full = np.zeros((N, Cog * groups, FH, FW))
    go_full[:, :, pH:pH + Ho, pW:pW + Wo] = go
    gi = np.zeros_like(x)
    gw = np.zeros_like(w)
    for g in range(groups):
        ci, co = slice(g * Cig, (g + 1) * Cig), slice(g * Cog, (g + 1) * Cog)
        for kh in range(kH):
            for kw in range(kW):
                tap = go_full[:, co, kh * dH:kh * dH + (H - 1) * sH + 1:sH, kw * dW:kw * dW + (W - 1) * sW + 1:sW]
                gi[:, ci] += np.einsum("nohw,co->nchw", tap, w[ci, :, kh, kw])
                gw[ci, :, kh, kw] = np.einsum("nchw,nohw->co", x[:, ci], tap)
    gb = go.sum(axis=(0, 2, 3)) if has_bias else None
    return (gi[0] if unbatched else gi), gw, gb


def rel_l2(got, expected):
    got = np.asarray(got, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    norm = np.linalg.norm(expected)
    return np.linalg.norm(got - expected) / (norm if norm > 0 else 1.0)


@pytest.fixture
def rng():
    """A generator seeded afresh on every run; the seed is printed, and pytest shows it when a test fails."""
    seed = int.from_bytes(os.urandom(8), "little")
    print(f"random seed: {seed}")
    return np.random.default_rng(seed)
