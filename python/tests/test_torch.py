"""convt.torch: the nn.Module and the differentiable operator against PyTorch's own ConvTranspose2d, on fresh
random problems (torch's CPU convolution in float64 is the reference)."""

import copy

import numpy as np
import pytest
import torch

import convt.torch as ct
from conftest import F32_TOLERANCE, rel_l2


def _rel(a, b):
    return rel_l2(a.detach().double().numpy(), b.detach().double().numpy())


# (in, out, kernel, stride, padding, output_padding, groups, dilation, bias, input [N, H, W]), every option.
LAYERS = [
    (4, 6, 3, 1, 0, 0, 1, 1, True, (2, 5, 6)),
    (4, 6, (3, 2), (2, 3), (1, 0), (1, 2), 2, 1, True, (2, 4, 5)),
    (6, 3, 2, 2, 1, 1, 3, (2, 1), False, (1, 5, 4)),
]


def _pair_of_layers(spec, seed):
    cin, cout, k, s, p, op, g, d, bias, _ = spec
    torch.manual_seed(seed)
    ours = ct.ConvTranspose2d(cin, cout, k, stride=s, padding=p, output_padding=op, groups=g, dilation=d, bias=bias)
    theirs = torch.nn.ConvTranspose2d(cin, cout, k, stride=s, padding=p, output_padding=op, groups=g, dilation=d, bias=bias)
    theirs.load_state_dict(ours.state_dict())  # PyTorch's own state_dict, both ways
    return ours, theirs.double()


@pytest.mark.parametrize("spec", LAYERS)
def test_module_forward_and_backward_match_pytorch(spec):
    ours, theirs = _pair_of_layers(spec, int(np.random.SeedSequence().entropy % 2**31))
    n, h, w = spec[-1]
    x = torch.randn(n, spec[0], h, w, requires_grad=True)
    x64 = x.detach().double().requires_grad_()
    y, y64 = ours(x), theirs(x64)
    assert y.dtype == torch.float32 and y.shape == y64.shape
    assert _rel(y, y64) <= F32_TOLERANCE
    go = torch.randn_like(y)
    y.backward(go)
    y64.backward(go.double())
    assert _rel(x.grad, x64.grad) <= F32_TOLERANCE
    assert _rel(ours.weight.grad, theirs.weight.grad) <= F32_TOLERANCE
    if ours.bias is not None:
        assert _rel(ours.bias.grad, theirs.bias.grad) <= F32_TOLERANCE


def test_it_is_a_module_with_real_parameters_that_an_optimizer_trains():
    torch.manual_seed(0)
    layer = ct.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1, precision="fast")
    model = torch.nn.Sequential(layer, torch.nn.ReLU())
    assert [p is q for p, q in zip(model.parameters(), [layer.weight, layer.bias])] == [True, True]
    assert "precision='fast'" in repr(layer) and layer.precision == "fast"
    before = layer.weight.detach().clone()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(torch.randn(2, 3, 4, 4)).square().mean()
    loss.backward()
    optimizer.step()
    assert not torch.equal(before, layer.weight.detach())
    with pytest.raises(ValueError, match="precision must be"):
        layer.precision = "tf32"
    with pytest.raises(ValueError, match="Only \"zeros\" padding mode is supported"):
        ct.ConvTranspose2d(3, 2, 3, padding_mode="reflect")
    assert ct.ConvTranspose2d(3, 2, 3, dtype=torch.float16).weight.dtype == torch.float16


def test_output_size_is_pytorchs():
    ours, theirs = _pair_of_layers(LAYERS[1], 3)
    x = torch.randn(2, 4, 4, 5)
    for size in ([8, 15], [2, 6, 7, 16]):
        assert _rel(ours(x, output_size=size), theirs(x.double(), output_size=size)) <= F32_TOLERANCE


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_activations_with_a_float32_master_weight(dtype):
    # Autocast's rule: the f32 parameters are cast to the activations' dtype for the call; the weight's gradient
    # comes back in f32. The errors are those of the half dtype (f16 within 1e-3; bf16 within 2x PyTorch's).
    ours, theirs = _pair_of_layers(LAYERS[0], 5)
    x = torch.randn(2, 4, 5, 6).to(dtype).requires_grad_()
    y = ours(x)
    assert y.dtype == dtype
    reference = theirs(x.detach().double())
    torch_half = torch.nn.functional.conv_transpose2d(x.detach(), ours.weight.detach().to(dtype), ours.bias.detach().to(dtype))
    bound = 1e-3 if dtype == torch.float16 else 2 * max(_rel(torch_half, reference), 2**-9)
    assert _rel(y, reference) <= bound
    y.float().square().sum().backward()
    assert ours.weight.grad.dtype == torch.float32 and x.grad.dtype == dtype


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_autocast_casts_as_for_pytorchs_layer(dtype):
    # Inside torch.autocast("cpu"), PyTorch runs its ConvTranspose2d in the region's dtype (a lower-precision op):
    # f32 activations and parameters cast to it, the output in it, the gradients back in f32. convt's layer and
    # functional form do the same, within the half dtype's error against float64 (f16 within 1e-3; bf16 within
    # twice PyTorch's own autocast error), forward and backward, and under torch.compile.
    spec = LAYERS[1]
    ours, theirs = _pair_of_layers(spec, int(np.random.SeedSequence().entropy % 2**31))
    pytorch = copy.deepcopy(theirs).float()  # PyTorch's layer in float32, the same weights
    n, h, w = spec[-1]
    x = torch.randn(n, spec[0], h, w, requires_grad=True)
    x_torch = x.detach().clone().requires_grad_()
    with torch.autocast("cpu", dtype=dtype):
        y, y_torch = ours(x), pytorch(x_torch)
        y_functional = ct.conv_transpose2d(x, ours.weight, ours.bias, stride=spec[3], padding=spec[4],
                                           output_padding=spec[5], groups=spec[6], dilation=spec[7])
    assert y.dtype == y_torch.dtype == y_functional.dtype == dtype
    x64 = x.detach().double().requires_grad_()
    y64 = theirs(x64)

    def bound(torch_error):
        return 1e-3 if dtype == torch.float16 else 2 * max(torch_error, 2**-9)

    assert _rel(y, y64) <= bound(_rel(y_torch, y64))
    assert _rel(y_functional, y64) <= bound(_rel(y_torch, y64))
    go = torch.randn(y64.shape)
    (y.float() * go).sum().backward()
    (y_torch.float() * go).sum().backward()
    y64.backward(go.double())
    assert x.grad.dtype == ours.weight.grad.dtype == torch.float32
    assert _rel(x.grad, x64.grad) <= bound(_rel(x_torch.grad, x64.grad))
    assert _rel(ours.weight.grad, theirs.weight.grad) <= bound(_rel(pytorch.weight.grad, theirs.weight.grad))
    assert _rel(ours.bias.grad, theirs.bias.grad) <= bound(_rel(pytorch.bias.grad, theirs.bias.grad))
    # Outside the region the same layer runs f32 again; float64 is not autocast's to cast, and convt refuses it.
    assert ours(x).dtype == torch.float32
    with torch.autocast("cpu", dtype=dtype), pytest.raises(TypeError, match="convt computes float32"):
        ct.conv_transpose2d(x.double(), ours.weight.double())
    compiled = torch.compile(ours, fullgraph=True, backend="aot_eager")
    with torch.autocast("cpu", dtype=dtype):
        assert compiled(x).dtype == dtype


def test_torch_compile_traces_the_operator_without_a_graph_break():
    ours, theirs = _pair_of_layers(LAYERS[0], 7)
    compiled = torch.compile(ours, fullgraph=True, backend="aot_eager")
    x = torch.randn(2, 4, 5, 6, requires_grad=True)
    y = compiled(x)
    assert _rel(y, theirs(x.detach().double())) <= F32_TOLERANCE
    y.sum().backward()
    assert x.grad is not None and ours.weight.grad is not None


def test_functional_form_and_its_refusals():
    torch.manual_seed(1)
    x, w, b = torch.randn(1, 4, 3, 3), torch.randn(4, 2, 3, 3), torch.randn(4)
    y = ct.conv_transpose2d(x, w, b, stride=2, groups=2)
    expected = torch.nn.functional.conv_transpose2d(x.double(), w.double(), b.double(), stride=2, groups=2)
    assert _rel(y, expected) <= F32_TOLERANCE
    assert torch.ops.convt.conv_transpose2d.default is not None
    with pytest.raises(TypeError, match="convt computes float32, float16 and bfloat16"):
        ct.conv_transpose2d(x.double(), w.double())
    with pytest.raises(ValueError, match="in_channels mismatch"):
        ct.conv_transpose2d(x, torch.randn(3, 2, 3, 3))
