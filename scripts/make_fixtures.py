#!/usr/bin/env python3
"""Golden files from real PyTorch for convt's tests.

Writes, into the output folder (default tests/fixtures):
  * one `<case>.safetensors` per configuration, holding f32 tensors `input`, `weight`, optional `bias`
    and PyTorch's `output`, plus a random `grad_output` and autograd's `grad_input`, `grad_weight` and
    (with a bias) `grad_bias`; the configuration (stride, padding, output_padding, dilation, groups) is
    stored in the safetensors metadata as JSON under the key "params";
  * `torch_behaviour.json`: what PyTorch does with edge and invalid configurations (the error message,
    or the output shape when it accepts them), so convt's validation can be checked against PyTorch.

The output and its gradients are computed by torch.nn.functional.conv_transpose2d and autograd in float64
on the CPU from the f32 inputs, then rounded to f32: the exact operator, without TF32 or reduced-precision algorithms.

Run where PyTorch is installed:  python3 scripts/make_fixtures.py [--out DIR]
"""
import argparse
import json
import os

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

# name: (N, Cin, Cout, H, W, (kH, kW), stride, padding, output_padding, dilation, groups, bias)
CASES = {
    "basic":              (2, 3, 4, 5, 5, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), 1, True),
    "asym_kernel_no_bias": (2, 3, 5, 4, 7, (3, 5), (1, 1), (0, 0), (0, 0), (1, 1), 1, False),
    "stride_padding":     (2, 4, 3, 5, 6, (3, 4), (2, 3), (1, 2), (0, 0), (1, 1), 1, True),
    "output_padding":     (1, 3, 4, 4, 5, (3, 3), (2, 3), (1, 0), (1, 2), (1, 1), 1, True),
    "dilation":           (2, 3, 2, 5, 4, (3, 2), (1, 1), (0, 1), (0, 0), (2, 3), 1, True),
    "groups2":            (2, 4, 6, 5, 5, (3, 3), (1, 2), (1, 0), (0, 1), (1, 1), 2, True),
    "depthwise":          (2, 4, 4, 6, 5, (3, 3), (2, 2), (1, 1), (1, 0), (1, 1), 4, True),
    "groups_multiplier":  (1, 4, 8, 5, 4, (2, 3), (1, 1), (0, 0), (0, 0), (1, 1), 4, False),
    "kernel1x1_stride2":  (2, 5, 3, 4, 6, (1, 1), (2, 2), (0, 0), (1, 1), (1, 1), 1, True),
    "input1x1":           (3, 4, 3, 1, 1, (3, 3), (2, 2), (0, 0), (0, 0), (1, 1), 1, True),
    "kernel_larger_than_input": (2, 3, 2, 2, 3, (5, 4), (1, 2), (0, 1), (0, 0), (1, 1), 1, True),
    "crop_to_single_row": (2, 3, 2, 3, 4, (3, 3), (1, 1), (2, 0), (0, 0), (1, 1), 1, True),
    "output_padding_dilation_gt_stride": (2, 3, 4, 5, 4, (3, 3), (1, 1), (0, 0), (1, 1), (2, 2), 1, True),
    "kb75_like":          (2, 8, 16, 6, 9, (3, 5), (2, 3), (1, 2), (0, 0), (2, 1), 4, False),
    "kb81_like":          (2, 4, 6, 4, 5, (3, 3), (5, 5), (1, 1), (0, 0), (2, 2), 1, False),
    "up2x_like":          (2, 16, 8, 6, 7, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1, True),
    "dcgan_like":         (2, 16, 8, 4, 4, (4, 4), (2, 2), (1, 1), (0, 0), (1, 1), 1, False),
    "wide_channels":      (1, 32, 16, 9, 11, (3, 5), (2, 1), (1, 2), (1, 0), (1, 1), 1, True),
    "everything":         (3, 6, 9, 4, 5, (2, 3), (3, 2), (2, 1), (1, 2), (2, 3), 3, True),
    "asym_padding_heavy": (1, 2, 3, 7, 3, (5, 2), (1, 2), (3, 0), (0, 1), (1, 1), 1, True),
}


def output_size(h, w, k, stride, padding, output_padding, dilation):
    return [(i - 1) * s - 2 * p + d * (kk - 1) + op + 1
            for i, kk, s, p, op, d in zip((h, w), k, stride, padding, output_padding, dilation)]


def make_case(seed, n, cin, cout, h, w, k, stride, padding, output_padding, dilation, groups, bias):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, cin, h, w, generator=g) * 2 - 1
    wt = torch.rand(cin, cout // groups, k[0], k[1], generator=g) * 2 - 1
    b = (torch.rand(cout, generator=g) * 2 - 1) if bias else None
    # Drawn after the forward's operands, so adding it left input, weight and bias unchanged.
    go = torch.rand(n, cout, *output_size(h, w, k, stride, padding, output_padding, dilation), generator=g) * 2 - 1
    xd = x.double().requires_grad_()
    wd = wt.double().requires_grad_()
    bd = None if b is None else b.double().requires_grad_()
    y = F.conv_transpose2d(xd, wd, bd, stride=stride, padding=padding, output_padding=output_padding,
                           groups=groups, dilation=dilation)
    y.backward(go.double())
    tensors = {"input": x.contiguous(), "weight": wt.contiguous(), "output": y.detach().float().contiguous(),
               "grad_output": go.contiguous(), "grad_input": xd.grad.float().contiguous(),
               "grad_weight": wd.grad.float().contiguous()}
    if b is not None:
        tensors["bias"] = b.contiguous()
        tensors["grad_bias"] = bd.grad.float().contiguous()
    params = {"stride": list(stride), "padding": list(padding), "output_padding": list(output_padding),
              "dilation": list(dilation), "groups": groups}
    return tensors, params


def probe(name, input_shape, weight_shape, bias_len, stride=1, padding=0, output_padding=0, dilation=1, groups=1):
    """Ask PyTorch's functional op what it does with one configuration."""
    rec = {"name": name, "input": list(input_shape), "weight": list(weight_shape), "bias": bias_len,
           "stride": stride, "padding": padding, "output_padding": output_padding, "dilation": dilation,
           "groups": groups}
    try:
        x = torch.rand(*input_shape)
        wt = torch.rand(*weight_shape)
        b = None if bias_len is None else torch.rand(bias_len)
        y = F.conv_transpose2d(x, wt, b, stride=stride, padding=padding, output_padding=output_padding,
                               groups=groups, dilation=dilation)
        rec["ok"] = True
        rec["output_shape"] = list(y.shape)
    except Exception as e:  # PyTorch raises RuntimeError or ValueError
        rec["ok"] = False
        rec["error"] = str(e).strip().splitlines()[0]
    return rec


def probe_layer(name, *args, **kwargs):
    rec = {"name": name, "layer_args": list(args), "layer_kwargs": kwargs}
    try:
        torch.nn.ConvTranspose2d(*args, **kwargs)
        rec["ok"] = True
    except Exception as e:
        rec["ok"] = False
        rec["error"] = str(e).strip().splitlines()[0]
    return rec


def behaviour():
    return {
        "torch_version": torch.__version__,
        "functional": [
            probe("valid", (1, 4, 5, 5), (4, 2, 3, 3), 2),
            probe("unbatched_3d", (4, 5, 5), (4, 2, 3, 3), 2),
            probe("empty_batch", (0, 4, 5, 5), (4, 2, 3, 3), 2),
            probe("zero_in_channels", (1, 0, 5, 5), (0, 2, 3, 3), 2),
            probe("zero_height", (1, 4, 0, 5), (4, 2, 3, 3), 2),
            probe("zero_width", (1, 4, 5, 0), (4, 2, 3, 3), 2),
            probe("zero_out_channels", (1, 4, 5, 5), (4, 0, 3, 3), None),
            probe("zero_kernel", (1, 4, 5, 5), (4, 2, 0, 3), 2),
            probe("groups_not_dividing_cin", (1, 3, 5, 5), (3, 2, 3, 3), 4, groups=2),
            probe("groups_zero", (1, 4, 5, 5), (4, 2, 3, 3), 2, groups=0),
            probe("stride_zero", (1, 4, 5, 5), (4, 2, 3, 3), 2, stride=(0, 1)),
            probe("stride_negative", (1, 4, 5, 5), (4, 2, 3, 3), 2, stride=(1, -1)),
            probe("dilation_zero", (1, 4, 5, 5), (4, 2, 3, 3), 2, dilation=(1, 0)),
            probe("padding_negative", (1, 4, 5, 5), (4, 2, 3, 3), 2, padding=(-1, 0)),
            probe("output_padding_negative", (1, 4, 5, 5), (4, 2, 3, 3), 2, output_padding=(0, -1)),
            probe("output_padding_equal_stride", (1, 4, 5, 5), (4, 2, 3, 3), 2, stride=2, output_padding=2),
            probe("output_padding_lt_dilation", (1, 4, 5, 5), (4, 2, 3, 3), 2, stride=1, dilation=2,
                  output_padding=1),
            probe("output_padding_eq_max", (1, 4, 5, 5), (4, 2, 3, 3), 2, stride=2, dilation=3,
                  output_padding=3),
            probe("non_positive_output", (1, 4, 1, 1), (4, 2, 1, 1), 2, padding=1),
            probe("zero_output", (1, 4, 2, 2), (4, 2, 1, 1), 2, padding=1),
            probe("weight_cin_mismatch", (1, 4, 5, 5), (3, 2, 3, 3), 2),
            probe("bias_length_mismatch", (1, 4, 5, 5), (4, 2, 3, 3), 3),
            probe("input_rank_2", (4, 5), (4, 2, 3, 3), 2),
            probe("input_rank_5", (1, 1, 4, 5, 5), (4, 2, 3, 3), 2),
            probe("weight_rank_3", (1, 4, 5, 5), (4, 2, 3), 2),
        ],
        "layer": [
            probe_layer("in_channels_not_divisible", 3, 4, 3, groups=2),
            probe_layer("out_channels_not_divisible", 4, 3, 3, groups=2),
            probe_layer("groups_zero", 4, 4, 3, groups=0),
            probe_layer("ok", 4, 6, (3, 5), stride=(2, 1), padding=1, output_padding=(1, 0), groups=2,
                        bias=False, dilation=1),
        ],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    total = 0
    for i, (name, cfg) in enumerate(CASES.items()):
        tensors, params = make_case(1000 + i, *cfg)
        path = os.path.join(args.out, f"{name}.safetensors")
        save_file(tensors, path, metadata={"params": json.dumps(params)})
        total += os.path.getsize(path)
    with open(os.path.join(args.out, "torch_behaviour.json"), "w") as f:
        json.dump(behaviour(), f, indent=1)
    print(f"wrote {len(CASES)} fixtures, {total} bytes, to {args.out}")


if __name__ == "__main__":
    main()
