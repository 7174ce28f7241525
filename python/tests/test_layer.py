"""convt.ConvTranspose2d: forward (with output_size), backward, parameters, state_dict, repr."""

import numpy as np
import pytest

import convt
from conftest import F32_TOLERANCE, output_hw, reference, reference_backward, rel_l2

# (in, out, kernel, stride, padding, output_padding, groups, bias, dilation)
LAYERS = [
    (3, 4, 3, 1, 0, 0, 1, True, 1),
    (4, 6, (3, 2), (2, 1), (1, 0), (1, 0), 2, True, (1, 2)),
    (6, 9, (2, 3), (3, 2), (2, 1), (1, 1), 3, False, (2, 3)),
    (4, 4, 3, 2, 1, 1, 4, True, 1),
]


def _layer(spec, seed):
    cin, cout, k, s, p, op, g, bias, d = spec
    return convt.ConvTranspose2d(cin, cout, k, stride=s, padding=p, output_padding=op, groups=g, bias=bias,
                                 dilation=d, seed=seed)


def _opts(layer, output_padding=None):
    return dict(stride=layer.stride, padding=layer.padding,
                output_padding=layer.output_padding if output_padding is None else output_padding,
                groups=layer.groups, dilation=layer.dilation)


@pytest.mark.parametrize("spec", LAYERS, ids=lambda s: "-".join(map(str, s)))
def test_forward_and_backward_match_reference(rng, spec):
    layer = _layer(spec, int(rng.integers(1 << 62)))
    x = rng.standard_normal((2, spec[0], 4, 5)).astype(np.float32)
    y = layer(x)
    expected = reference(x, layer.weight, layer.bias, **_opts(layer))
    assert rel_l2(y, expected) <= F32_TOLERANCE

    go = rng.standard_normal(y.shape).astype(np.float32)
    gi, gw, gb = layer.backward(x, go)
    ri, rw, rb = reference_backward(x, layer.weight, go, layer.bias is not None, **_opts(layer))
    assert gi.shape == x.shape and gw.shape == layer.weight.shape
    assert rel_l2(gi, ri) <= F32_TOLERANCE
    assert rel_l2(gw, rw) <= F32_TOLERANCE
    if layer.bias is None:
        assert gb is None
    else:
        assert rel_l2(gb, rb) <= F32_TOLERANCE


def test_gradients_are_the_adjoint_of_the_forward(rng):
    # The forward is linear in the input, in the weight and in the bias, so the gradients of <y, go> are exact
    # adjoints: <F(x), go> = <x, grad_input> = <w, grad_weight> + (the bias term), independent of any reference.
    layer = _layer(LAYERS[1], int(rng.integers(1 << 62)))
    x = rng.standard_normal((2, 4, 5, 4)).astype(np.float64)
    y_no_bias = reference(x, layer.weight, None, **_opts(layer))
    go = rng.standard_normal(y_no_bias.shape)
    gi, gw, gb = layer.backward(x, go)
    total = np.sum(y_no_bias * go)
    # float32 rounding is relative to the terms' magnitudes, not to their (cancelling) sum.
    scale = np.sum(np.abs(y_no_bias * go))
    assert gi.dtype == np.float64
    assert abs(np.sum(x * gi) - total) <= 1e-5 * scale
    assert abs(np.sum(layer.weight * gw) - total) <= 1e-5 * scale
    assert abs(np.sum(gb) - go.sum()) <= 1e-5 * np.sum(np.abs(go))


def test_gradients_match_finite_differences(rng):
    layer = _layer(LAYERS[0], int(rng.integers(1 << 62)))
    x = rng.standard_normal((1, 3, 3, 4))
    go = rng.standard_normal(layer(x).shape)
    gi, gw, gb = layer.backward(x, go)
    loss = lambda x, w, b: np.sum(reference(x, w, b, **_opts(layer)) * go)  # noqa: E731
    w, b = layer.weight.astype(np.float64), layer.bias.astype(np.float64)
    eps = 1e-3
    for _ in range(4):
        i = tuple(rng.integers(s) for s in x.shape)
        dx = np.zeros_like(x)
        dx[i] = eps
        numeric = (loss(x + dx, w, b) - loss(x - dx, w, b)) / (2 * eps)
        assert abs(numeric - gi[i]) <= 1e-4 * max(1.0, abs(numeric))
        j = tuple(rng.integers(s) for s in w.shape)
        dw = np.zeros_like(w)
        dw[j] = eps
        numeric = (loss(x, w + dw, b) - loss(x, w - dw, b)) / (2 * eps)
        assert abs(numeric - gw[j]) <= 1e-4 * max(1.0, abs(numeric))
    db = np.zeros_like(b)
    db[1] = eps
    assert abs((loss(x, w, b + db) - loss(x, w, b - db)) / (2 * eps) - gb[1]) <= 1e-4 * max(1.0, abs(gb[1]))


def test_forward_with_output_size_and_its_backward(rng):
    layer = convt.ConvTranspose2d(4, 3, (3, 2), stride=(3, 2), padding=1, seed=int(rng.integers(1 << 62)))
    x = rng.standard_normal((2, 4, 4, 5)).astype(np.float32)
    smallest = output_hw((4, 5), (3, 2), (3, 2), (1, 1), (0, 0), (1, 1))
    for extra in [(0, 0), (2, 1), (1, 0)]:
        size = [smallest[0] + extra[0], smallest[1] + extra[1]]
        for given in (size, [2, 3] + size):
            y = layer(x, output_size=given)
            assert y.shape == (2, 3, *size)
            expected = reference(x, layer.weight, layer.bias, **_opts(layer, output_padding=extra))
            assert rel_l2(y, expected) <= F32_TOLERANCE
        go = rng.standard_normal(y.shape).astype(np.float32)
        gi, gw, gb = layer.backward(x, go)
        ri, rw, rb = reference_backward(x, layer.weight, go, True, **_opts(layer, output_padding=extra))
        assert max(rel_l2(gi, ri), rel_l2(gw, rw), rel_l2(gb, rb)) <= F32_TOLERANCE


def test_unreachable_output_size_is_pytorchs_value_error(rng):
    layer = convt.ConvTranspose2d(4, 3, 3, stride=2, padding=1, seed=1)
    x = np.zeros((1, 4, 5, 5), np.float32)
    with pytest.raises(ValueError, match=r"^requested an output size of \[12, 9\], but valid sizes range from "
                                         r"\[9, 9\] to \[10, 10\] \(for an input of \[5, 5\]\)"):
        layer(x, output_size=[12, 9])
    with pytest.raises(ValueError, match="output_size must have 2 or 4 elements"):
        layer(x, output_size=[1, 3, 9])


def test_unbatched_and_cpu_device(rng):
    layer = _layer(LAYERS[2], 5)
    cpu = _layer(LAYERS[2], 5)
    cpu.device = "cpu"
    x = rng.standard_normal((6, 3, 4)).astype(np.float32)
    expected = reference(x, layer.weight, None, **_opts(layer))
    assert layer(x).shape == expected.shape
    assert rel_l2(layer(x), expected) <= F32_TOLERANCE
    assert rel_l2(cpu(x), expected) <= F32_TOLERANCE
    go = rng.standard_normal(expected.shape).astype(np.float32)
    for got, want in zip(layer.backward(x, go)[:2], cpu.backward(x, go)[:2]):
        assert rel_l2(got, want) <= F32_TOLERANCE


def test_float16_forward_and_backward(rng):
    layer = _layer(LAYERS[3], 9)
    x = rng.standard_normal((2, 4, 4, 4)).astype(np.float16)
    y = layer(x)
    assert y.dtype == np.float16
    w16, b16 = layer.weight.astype(np.float16), layer.bias.astype(np.float16)
    expected = reference(x, w16, b16, **_opts(layer))
    half_ulp = np.spacing(np.abs(expected).astype(np.float16)).astype(np.float64) / 2
    assert np.all(np.abs(y.astype(np.float64) - expected) <= half_ulp + 1e-6 * np.abs(expected).max())
    go = rng.standard_normal(y.shape).astype(np.float16)
    grads = layer.backward(x, go)
    assert all(g.dtype == np.float16 for g in grads)
    for got, want in zip(grads, reference_backward(x, w16, go, True, **_opts(layer))):
        assert rel_l2(got, want) <= 2 ** -10


def test_bfloat16_forward_and_backward(rng):
    import ml_dtypes  # installed by scripts/test_python.sh
    layer = _layer(LAYERS[3], 9)
    x = rng.standard_normal((2, 4, 4, 4)).astype(ml_dtypes.bfloat16)
    y = layer(x)
    assert y.dtype == ml_dtypes.bfloat16
    w16, b16 = layer.weight.astype(ml_dtypes.bfloat16), layer.bias.astype(ml_dtypes.bfloat16)
    values = lambda a: a.astype(np.float64)  # noqa: E731
    expected = reference(values(x), values(w16), values(b16), **_opts(layer))
    assert rel_l2(y.astype(np.float64), expected) <= 2**-8
    go = rng.standard_normal(y.shape).astype(ml_dtypes.bfloat16)
    grads = layer.backward(x, go)
    assert all(g.dtype == ml_dtypes.bfloat16 for g in grads)
    for got, want in zip(grads, reference_backward(values(x), values(w16), values(go), True, **_opts(layer))):
        assert rel_l2(got.astype(np.float64), want) <= 2**-8


def test_initialisation_is_pytorchs_and_seeded():
    a = convt.ConvTranspose2d(8, 6, (3, 2), groups=2, seed=3)
    b = convt.ConvTranspose2d(8, 6, (3, 2), groups=2, seed=3)
    np.testing.assert_array_equal(a.weight, b.weight)
    bound = 1 / np.sqrt(3 * 3 * 2)
    assert a.weight.shape == (8, 3, 3, 2) and a.bias.shape == (6,)
    assert np.abs(a.weight).max() <= bound and np.abs(a.bias).max() <= bound
    assert a.weight.dtype == np.float32
    assert not np.array_equal(convt.ConvTranspose2d(8, 6, 3).weight, convt.ConvTranspose2d(8, 6, 3).weight)


def test_parameters_are_settable_with_shape_checks(rng):
    layer = convt.ConvTranspose2d(4, 2, 3, seed=0)
    x = rng.standard_normal((1, 4, 3, 3)).astype(np.float32)
    layer(x)  # the parameters are now on the GPU: a new weight must replace them there too
    w = rng.standard_normal((4, 2, 3, 3))
    layer.weight = w
    layer.bias = np.array([1.0, -1.0])
    np.testing.assert_array_equal(layer.weight, w.astype(np.float32))
    assert rel_l2(layer(x), reference(x, w, [1.0, -1.0])) <= F32_TOLERANCE
    with pytest.raises(ValueError, match=r"^expected a tensor of size \[4, 2, 3, 3\], but got \[4, 2, 3, 2\]"):
        layer.weight = np.zeros((4, 2, 3, 2))
    with pytest.raises(ValueError, match="expected a tensor of size"):
        layer.bias = np.zeros(3)
    no_bias = convt.ConvTranspose2d(4, 2, 3, bias=False)
    with pytest.raises(ValueError, match="the layer was built without a bias"):
        no_bias.bias = np.zeros(2)


def test_state_dict_round_trip(rng):
    a = convt.ConvTranspose2d(6, 4, (3, 2), stride=(2, 1), groups=2, seed=int(rng.integers(1 << 62)))
    b = convt.ConvTranspose2d(6, 4, (3, 2), stride=(2, 1), groups=2, seed=int(rng.integers(1 << 62)))
    state = a.state_dict()
    assert sorted(state) == ["bias", "weight"] and all(v.dtype == np.float32 for v in state.values())
    b.load_state_dict(state)
    np.testing.assert_array_equal(b.weight, a.weight)
    np.testing.assert_array_equal(b.bias, a.bias)
    x = rng.standard_normal((1, 6, 4, 4)).astype(np.float32)
    np.testing.assert_array_equal(a(x), b(x))
    assert list(convt.ConvTranspose2d(6, 4, 3, bias=False).state_dict()) == ["weight"]


def test_load_state_dict_is_strict_and_atomic():
    layer = convt.ConvTranspose2d(4, 2, 3, seed=0)
    before = layer.weight
    with pytest.raises(ValueError, match='Missing key\\(s\\) in state_dict: "bias"'):
        layer.load_state_dict({"weight": np.zeros((4, 2, 3, 3))})
    with pytest.raises(ValueError, match='Unexpected key\\(s\\) in state_dict: "extra"'):
        layer.load_state_dict({"weight": np.zeros((4, 2, 3, 3)), "bias": np.zeros(2), "extra": np.zeros(1)})
    with pytest.raises(ValueError, match="size mismatch for bias"):
        layer.load_state_dict({"weight": np.zeros((4, 2, 3, 3)), "bias": np.zeros(3)})
    np.testing.assert_array_equal(layer.weight, before)
    layer.load_state_dict({"weight": np.ones((4, 2, 3, 3))}, strict=False)
    assert np.all(layer.weight == 1)


def test_load_state_dict_checks_every_value_before_assigning_any():
    layer = convt.ConvTranspose2d(4, 2, 3, seed=0)
    before = layer.state_dict()
    with pytest.raises(TypeError, match="weight must be a floating-point tensor, got dtype int32"):
        layer.load_state_dict({"weight": np.zeros((4, 2, 3, 3), np.int32), "bias": np.ones(2, np.float32)})
    for key, value in layer.state_dict().items():
        np.testing.assert_array_equal(value, before[key])
    for not_a_dict in [None, [("weight", before["weight"]), ("bias", before["bias"])]]:
        with pytest.raises(TypeError, match="^Expected state_dict to be dict-like, got "):
            layer.load_state_dict(not_a_dict)


def test_integers_beyond_64_bits_name_the_argument(rng):
    with pytest.raises(ValueError, match="^in_channels is out of range"):
        convt.ConvTranspose2d(2**63, 3, 2)
    layer = convt.ConvTranspose2d(2, 3, 2, seed=2**70)  # any int seeds, modulo 2**64
    with pytest.raises(ValueError, match="^output_size is out of range"):
        layer(rng.standard_normal((1, 2, 3, 3)).astype(np.float32), output_size=[2**64, 7])


def test_assigning_parameters_during_a_call_in_another_thread_is_refused_clearly(rng):
    import threading

    layer = convt.ConvTranspose2d(32, 32, 3, seed=1)
    x = rng.standard_normal((8, 32, 64, 64)).astype(np.float32)
    done = threading.Event()
    results = []

    def run():
        for _ in range(3):
            results.append(layer(x))
        done.set()

    worker = threading.Thread(target=run)
    worker.start()
    outcomes = set()
    weight = layer.weight
    while not done.is_set():
        try:
            layer.weight = weight
            outcomes.add("assigned")
        except RuntimeError as e:
            assert str(e).startswith("convt: the layer is running a call in another thread"), str(e)
            outcomes.add("refused")
    worker.join()
    assert len(results) == 3 and outcomes
    expected = reference(x, weight, layer.bias, **_opts(layer))
    assert all(rel_l2(r, expected) <= F32_TOLERANCE for r in results)


def test_the_package_ships_type_stubs_and_refuses_its_source_tree_clearly(tmp_path):
    import pathlib
    import subprocess
    import sys

    installed = pathlib.Path(convt.__file__).parent
    assert (installed / "py.typed").exists() and (installed / "__init__.pyi").exists()
    assert convt.ConvTranspose2d.__init__.__doc__ and "Parameters" in convt.conv_transpose2d.__doc__
    source = pathlib.Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-c", "import convt"], cwd=source, capture_output=True, text=True)
    assert r.returncode != 0 and "install it (pip install ./python)" in r.stderr, r.stderr


def test_torch_state_dict_loads():
    torch = pytest.importorskip("torch")
    ref = torch.nn.ConvTranspose2d(6, 4, (3, 2), stride=(2, 1), padding=(1, 0), output_padding=(1, 0), groups=2,
                                   dilation=(1, 2))
    layer = convt.ConvTranspose2d(6, 4, (3, 2), stride=(2, 1), padding=(1, 0), output_padding=(1, 0), groups=2,
                                  dilation=(1, 2))
    layer.load_state_dict(ref.state_dict())
    x = torch.randn(2, 6, 5, 4)
    assert rel_l2(layer(x), ref(x).detach().numpy()) <= F32_TOLERANCE
    assert repr(layer) == repr(ref)


def test_output_size_and_backward_match_torch_autograd():
    torch = pytest.importorskip("torch")
    args = dict(stride=(2, 3), padding=(1, 0), groups=2, dilation=(2, 1))
    ref = torch.nn.ConvTranspose2d(4, 6, (3, 2), **args)
    layer = convt.ConvTranspose2d(4, 6, (3, 2), **args)
    layer.load_state_dict(ref.state_dict())
    x = torch.randn(2, 4, 5, 4, requires_grad=True)
    y = ref(x, output_size=[12, 13])
    go = torch.randn_like(y)
    y.backward(go)
    assert rel_l2(layer(x, output_size=[12, 13]), y.detach().numpy()) <= F32_TOLERANCE
    gi, gw, gb = layer.backward(x, go)
    assert rel_l2(gi, x.grad.numpy()) <= F32_TOLERANCE
    assert rel_l2(gw, ref.weight.grad.numpy()) <= F32_TOLERANCE
    assert rel_l2(gb, ref.bias.grad.numpy()) <= F32_TOLERANCE


def test_repr_is_pytorchs():
    assert repr(convt.ConvTranspose2d(16, 8, 3, stride=2, padding=1, output_padding=1)) == (
        "ConvTranspose2d(16, 8, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), output_padding=(1, 1))"
    )
    assert repr(convt.ConvTranspose2d(4, 4, (3, 2), groups=2, bias=False, dilation=(1, 2))) == (
        "ConvTranspose2d(4, 4, kernel_size=(3, 2), stride=(1, 1), dilation=(1, 2), groups=2, bias=False)"
    )
    assert convt.ConvTranspose2d(2, 2, 1, precision="fast").extra_repr().endswith("precision='fast'")


def test_invalid_layers_raise_value_error(rng):
    with pytest.raises(ValueError, match="out_channels must be divisible by groups"):
        convt.ConvTranspose2d(4, 3, 3, groups=2)
    with pytest.raises(ValueError, match="in_channels must be divisible by groups"):
        convt.ConvTranspose2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="kernel size should be greater than zero"):
        convt.ConvTranspose2d(3, 4, (3, 0))
    with pytest.raises(ValueError, match="output padding must be smaller"):
        convt.ConvTranspose2d(3, 4, 3, stride=2, output_padding=2)
    layer = convt.ConvTranspose2d(4, 2, 3, seed=0)
    with pytest.raises(ValueError, match="in_channels mismatch"):
        layer(np.zeros((1, 3, 4, 4), np.float32))
    with pytest.raises(ValueError, match=r"^grad_output must have the output's size \[1, 2, 6, 6\]"):
        layer.backward(np.zeros((1, 4, 4, 4), np.float32), np.zeros((1, 2, 6, 5), np.float32))
    with pytest.raises(ValueError, match=r"^grad_output must have the output's size \[1, 2, 6, 6\]"):
        layer.backward(np.zeros((1, 4, 4, 4), np.float32), np.zeros((1, 3, 6, 6), np.float32))


def test_info_describes_the_adapter():
    info = convt.info()
    for key in ("name", "backend", "device_type", "driver", "adapters", "limits", "features"):
        assert key in info
    assert isinstance(info["name"], str) and info["name"]
    assert info["chosen"]["name"] == info["name"]
    assert info["limits"]["max_storage_buffer_binding_size"] > 0
