"""The golden files PyTorch wrote (tests/fixtures/*.safetensors at the repository's root): convt must reproduce
PyTorch's output and autograd's gradients within the tolerance the Rust tests use (1e-5 relative L2)."""

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open

import convt
from conftest import F32_TOLERANCE, reference, rel_l2

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures"
FILES = sorted(FIXTURES.glob("*.safetensors"))


def test_fixtures_are_there():
    assert len(FILES) >= 20, f"expected the PyTorch fixtures in {FIXTURES}"


def load(path):
    with safe_open(str(path), framework="np") as f:
        tensors = {name: f.get_tensor(name) for name in f.keys()}
        params = json.loads(f.metadata()["params"])
    opts = {k: tuple(params[k]) for k in ("stride", "padding", "output_padding", "dilation")}
    opts["groups"] = params["groups"]
    return tensors, opts


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_forward_and_gradients_match_pytorch(path):
    t, opts = load(path)
    bias = t.get("bias")
    out = convt.conv_transpose2d(t["input"], t["weight"], bias, **opts)
    assert rel_l2(out, t["output"]) <= F32_TOLERANCE
    # The numpy reference of these tests agrees with PyTorch too.
    assert rel_l2(reference(t["input"], t["weight"], bias, **opts), t["output"]) <= F32_TOLERANCE

    cin, cog, kh, kw = t["weight"].shape
    layer = convt.ConvTranspose2d(cin, cog * opts["groups"], (kh, kw), bias=bias is not None, **opts)
    layer.load_state_dict({"weight": t["weight"], **({} if bias is None else {"bias": bias})})
    np.testing.assert_array_equal(layer(t["input"]), out)
    gi, gw, gb = layer.backward(t["input"], t["grad_output"])
    assert rel_l2(gi, t["grad_input"]) <= F32_TOLERANCE
    assert rel_l2(gw, t["grad_weight"]) <= F32_TOLERANCE
    assert (gb is None) == ("grad_bias" not in t)
    if gb is not None:
        assert rel_l2(gb, t["grad_bias"]) <= F32_TOLERANCE


@pytest.mark.parametrize("path", FILES[::4], ids=lambda p: p.stem)
def test_cpu_reference_matches_pytorch(path):
    t, opts = load(path)
    out = convt.conv_transpose2d(t["input"], t["weight"], t.get("bias"), device="cpu", **opts)
    assert rel_l2(out, t["output"]) <= F32_TOLERANCE


def test_state_dict_file_written_by_pytorch():
    # A layer's state_dict saved by PyTorch (safetensors.torch.save_file) and the output PyTorch computed with it.
    with safe_open(str(FIXTURES / "state_dict" / "layer.safetensors"), framework="np") as f:
        state = {k: f.get_tensor(k) for k in f.keys()}
    with safe_open(str(FIXTURES / "state_dict" / "layer_io.safetensors"), framework="np") as f:
        x, expected = f.get_tensor("input"), f.get_tensor("output")
        config = json.loads(f.metadata()["config"])
    layer = convt.ConvTranspose2d(**config)
    layer.load_state_dict(state)
    assert rel_l2(layer(x), expected) <= F32_TOLERANCE
