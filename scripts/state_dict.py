#!/usr/bin/env python3
"""PyTorch's side of convt's state_dict interchange: an nn.ConvTranspose2d's state_dict is a safetensors file
holding `weight` [Cin, Cout/groups, kH, kW] and (with a bias) `bias` [Cout], nothing else. convt reads and writes
exactly that (`ConvTranspose2d::load_state_dict` / `save_state_dict`), so in PyTorch it is two lines:

    from safetensors.torch import save_file, load_file
    save_file(layer.state_dict(), "layer.safetensors")            # PyTorch -> convt
    layer.load_state_dict(load_file("learned.safetensors"))       # convt -> PyTorch (strict)

This script does both ends for the tests and the training example:

    python3 scripts/state_dict.py export DIR     # a seeded torch layer: DIR/layer.safetensors (its state_dict)
                                                 # and DIR/layer_io.safetensors (input, output, config metadata)
    python3 scripts/state_dict.py check FILE     # load a state_dict written by convt into nn.ConvTranspose2d
                                                 # (config from its "convt" metadata) and, with --io IO, check
                                                 # PyTorch's output on IO's input against IO's output
    python3 scripts/state_dict.py model DIR      # a whole decoder's state_dict (BatchNorm counters and all, its
                                                 # layers in f16 and f64): DIR/model.safetensors, and for its
                                                 # layer `3.` DIR/layer3_io.safetensors (input, PyTorch's output);
                                                 # prints the convt command that runs that one layer and the
                                                 # check of its output

A model's checkpoint needs no conversion for convt: save the state_dict as it is and name the layer by prefix.

    save_file(model.state_dict(), "model.safetensors")
    convt forward --tensors x.safetensors --weights model.safetensors --prefix 3. --stride 2 --padding 1 --out y.safetensors
"""
import argparse
import json
import os

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

# The layer exported for the tests: every option away from its default.
CONFIG = {"in_channels": 6, "out_channels": 4, "kernel_size": [3, 2], "stride": [2, 1], "padding": [1, 0],
          "output_padding": [1, 0], "groups": 2, "bias": True, "dilation": [1, 2]}


def layer_from(config):
    return torch.nn.ConvTranspose2d(config["in_channels"], config["out_channels"], tuple(config["kernel_size"]),
                                    stride=tuple(config["stride"]), padding=tuple(config["padding"]),
                                    output_padding=tuple(config["output_padding"]), groups=config["groups"],
                                    bias=config["bias"], dilation=tuple(config["dilation"]))


def export(out):
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(7)
    layer = layer_from(CONFIG).double()
    x = torch.rand(2, CONFIG["in_channels"], 5, 4, dtype=torch.float64) * 2 - 1
    # The state_dict exactly as a PyTorch user saves it (f32), and the float64 output of those f32 values.
    state = {k: v.float().contiguous() for k, v in layer.state_dict().items()}
    layer.load_state_dict({k: v.double() for k, v in state.items()})
    x = x.float()
    y = layer(x.double()).float()
    save_file(state, os.path.join(out, "layer.safetensors"))
    save_file({"input": x.contiguous(), "output": y.detach().contiguous()}, os.path.join(out, "layer_io.safetensors"),
              metadata={"config": json.dumps(CONFIG)})
    print(f"wrote {out}/layer.safetensors ({', '.join(state)}) and {out}/layer_io.safetensors")


def check(path, io):
    with safe_open(path, "pt") as f:
        meta = f.metadata() or {}
    if "convt" not in meta:
        raise SystemExit(f"{path}: no 'convt' metadata with the layer's configuration")
    config = json.loads(meta["convt"])
    layer = layer_from(config)
    layer.load_state_dict(load_file(path), strict=True)  # raises on any missing, extra or mis-shaped key
    print(f"{path}: loaded into nn.ConvTranspose2d({config})")
    if io:
        t = load_file(io)
        with torch.no_grad():
            y = layer.double()(t["input"].double())
        err = float(torch.linalg.vector_norm(y - t["output"].double()) / torch.linalg.vector_norm(y))
        print(f"PyTorch's output vs convt's on {io}: relative L2 {err:.2e}")
        if not err <= 1e-5:
            raise SystemExit("mismatch")


def model(out):
    """A small decoder as a user would train it; its state_dict saved as it is (layers in mixed dtypes)."""
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(11)
    net = torch.nn.Sequential(
        torch.nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1),   # 0.
        torch.nn.BatchNorm2d(8),                                    # 1. (num_batches_tracked: int64)
        torch.nn.ReLU(),                                            # 2.
        torch.nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1, groups=2),  # 3.
    )
    net[0].half()      # checkpoints mix dtypes: an f16 layer, an f64 one
    net[3].double()
    net.train()
    with torch.no_grad():
        net[1](torch.rand(4, 8, 6, 6))    # one step of BatchNorm statistics: num_batches_tracked = 1
    state = {k: v.contiguous() for k, v in net.state_dict().items()}
    save_file(state, os.path.join(out, "model.safetensors"))
    x = torch.rand(2, 8, 7, 5, dtype=torch.float64) * 2 - 1
    # convt reads the f64 layer as f32: the reference is the float64 output of those f32 values.
    layer = net[3].float().double()
    with torch.no_grad():
        y = layer(x.float().double())
    save_file({"input": x.float().contiguous(), "output": y.float().contiguous()},
              os.path.join(out, "layer3_io.safetensors"))
    print(f"wrote {out}/model.safetensors ({', '.join(f'{k} {v.dtype}' for k, v in state.items())})")
    print("run layer 3. with convt and compare with PyTorch's output:")
    print(f"  convt forward --tensors {out}/layer3_io.safetensors --weights {out}/model.safetensors --prefix 3. "
          f"--stride 2 --padding 1 --output-padding 1 --groups 2 --out {out}/layer3_convt.safetensors")
    print(f"  python3 -c \"from safetensors.torch import load_file as l; import torch; "
          f"a = l('{out}/layer3_convt.safetensors')['output'].double(); b = l('{out}/layer3_io.safetensors')['output'].double(); "
          f"print('relative L2', float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b)))\"")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("dir")
    c = sub.add_parser("check")
    c.add_argument("file")
    c.add_argument("--io")
    m = sub.add_parser("model")
    m.add_argument("dir")
    a = ap.parse_args()
    if a.cmd == "export":
        export(a.dir)
    elif a.cmd == "model":
        model(a.dir)
    else:
        check(a.file, a.io)


if __name__ == "__main__":
    main()
