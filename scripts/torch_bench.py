#!/usr/bin/env python3
"""PyTorch's side of the benchmark: the suite cases of convt (src/suite.rs) through torch.nn.functional.
conv_transpose2d on CUDA, in four modes: fp32 (cuDNN with TF32 off), tf32 (PyTorch's default for
convolutions), fp16 and bf16 (the tensors of that dtype, as autocast runs convolutions). CUDA events around each call, warm-up, median of --runs, cudnn.benchmark on, inputs
torch.rand (as KernelBench draws them). Also reports each mode's relative L2 error against a float64 result
computed from the values that mode's tensors hold (fp16 and bf16 ones rounded from the fp32 draws), as `convt
bench` measures its own: the error of the computation, not of the rounding of its inputs.

--train times a training step instead, as `convt bench --train` does (`train_row`: the forward under autocast
for fp16 and bf16 with fp32 parameters, the backward from a grad_output drawn U(-1,1), an SGD step), with
grad_weight's error against float64 (`{mode}_rel_l2` and `{mode}_grad_weight_rel_l2`).

--backward times the backward pass instead, as `convt bench --backward` does: the gradients of the input, the
weight and (when the case has one) the bias from a grad_output drawn U(-1,1), one call of
torch.ops.aten.convolution_backward (what autograd runs for conv_transpose2d; the forward is not timed). Its
errors against float64: grad_input on sample 0 (`{mode}_rel_l2`, also `{mode}_grad_input_rel_l2`), grad_weight on
the whole batch (`{mode}_grad_weight_rel_l2`; its float64 reference is computed on the GPU, and the error is null
when that does not fit in memory) and grad_bias (`{mode}_grad_bias_rel_l2`, bias cases only).

    python3 scripts/torch_bench.py [--case kb57 ...] [--runs 30] [--backward | --train] [--json out.json]
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F

# name: (N, Cin, Cout, H, W, (kH, kW), stride, padding, output_padding, dilation, groups, bias); as src/suite.rs
CASES = {
    "kb57": (8, 64, 64, 1024, 1024, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), 1, False),
    "kb65": (8, 64, 64, 512, 512, (3, 7), (1, 1), (0, 0), (0, 0), (1, 1), 1, False),
    "kb69": (64, 64, 128, 128, 256, (3, 5), (1, 1), (0, 0), (0, 0), (1, 1), 1, False),
    "kb71": (8, 32, 32, 512, 1024, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), 1, False),
    "kb75": (16, 32, 64, 128, 256, (3, 5), (2, 3), (1, 2), (0, 0), (2, 1), 4, False),
    "kb78": (8, 32, 32, 512, 1024, (3, 7), (1, 1), (1, 3), (0, 0), (1, 1), 1, False),
    "kb81": (16, 32, 64, 64, 128, (3, 3), (5, 5), (1, 1), (0, 0), (2, 2), 1, False),
    "up2x": (32, 256, 128, 64, 64, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1, True),
    "dcgan": (128, 512, 256, 8, 8, (4, 4), (2, 2), (1, 1), (0, 0), (1, 1), 1, False),
}


MODES = ("fp32", "tf32", "fp16", "bf16")
# The tensors' dtype in each mode.
DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def time_ms(fn, warmup, runs):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times), times


def rel_l2(y, ref):
    return float(torch.linalg.vector_norm(y.double() - ref) / torch.linalg.vector_norm(ref))


def output_size(h, w, k, s, p, op, d):
    """ConvTranspose2d's output height and width."""
    return tuple((i - 1) * s[j] - 2 * p[j] + d[j] * (k[j] - 1) + op[j] + 1 for j, i in enumerate((h, w)))


def conv_backward(go, x, wt, has_bias, kw, mask):
    """(grad_input, grad_weight, grad_bias) of conv_transpose2d, those that `mask` asks for (the others None)."""
    return torch.ops.aten.convolution_backward(
        go, x, wt, [wt.shape[1] * kw["groups"]] if has_bias else None, kw["stride"], kw["padding"], kw["dilation"],
        True, kw["output_padding"], kw["groups"], mask)


def forward_row(x, wt, b, kw, warmup, runs):
    row = {}
    ref = None
    for mode in MODES:
        torch.backends.cudnn.allow_tf32 = mode == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
        xm, wm, bm = (t if t is None else t.to(DTYPES[mode]) for t in (x, wt, b))
        if mode != "tf32":
            # float64 reference for the errors from the values this mode's tensors hold (fp32 and tf32 share it),
            # sample 0 only (keeps memory and time small).
            ref = F.conv_transpose2d(xm[:1].double(), wm.double(), None if bm is None else bm.double(), **kw)
        fn = lambda: F.conv_transpose2d(xm, wm, bm, **kw)
        ms, times = time_ms(fn, warmup, runs)
        row[f"{mode}_ms"] = ms
        row[f"{mode}_times_ms"] = times
        row[f"{mode}_rel_l2"] = rel_l2(F.conv_transpose2d(xm[:1], wm, bm, **kw), ref)
    return row


def backward_references(x, wt, has_bias, go, kw):
    """float64 references from these tensors' values: grad_input of sample 0 (it depends on that sample's
    grad_output only), grad_weight of the whole batch on the GPU (None when that does not fit), grad_bias (None
    without a bias)."""
    ref_gi = conv_backward(go[:1].double(), x[:1].double(), wt.double(), False, kw, [True, False, False])[0]
    ref_gb = go.double().sum(dim=(0, 2, 3)) if has_bias else None
    try:
        ref_gw = conv_backward(go.double(), x.double(), wt.double(), False, kw, [False, True, False])[1]
    except torch.cuda.OutOfMemoryError:
        ref_gw = None
        print("  (float64 grad_weight reference does not fit in GPU memory: no grad_weight error)")
    torch.cuda.empty_cache()
    return ref_gi, ref_gw, ref_gb


def backward_row(x, wt, has_bias, go, kw, warmup, runs):
    row = {}
    refs = None
    for mode in MODES:
        torch.backends.cudnn.allow_tf32 = mode == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
        xm, wm, gom = (t.to(DTYPES[mode]) for t in (x, wt, go))
        if mode != "tf32":
            # From the values this mode's tensors hold (fp32 and tf32 share them); the last mode's freed first.
            refs = ref_gi = ref_gw = ref_gb = None
            torch.cuda.empty_cache()
            refs = backward_references(xm, wm, has_bias, gom, kw)
        ref_gi, ref_gw, ref_gb = refs
        fn = lambda: conv_backward(gom, xm, wm, has_bias, kw, [True, True, has_bias])
        ms, times = time_ms(fn, warmup, runs)
        gi, gw, gb = fn()
        row[f"{mode}_ms"] = ms
        row[f"{mode}_times_ms"] = times
        row[f"{mode}_grad_input_rel_l2"] = row[f"{mode}_rel_l2"] = rel_l2(gi[:1], ref_gi)
        row[f"{mode}_grad_weight_rel_l2"] = None if ref_gw is None else rel_l2(gw, ref_gw)
        if has_bias:
            row[f"{mode}_grad_bias_rel_l2"] = rel_l2(gb, ref_gb)
        del xm, wm, gom, gi, gw, gb
    return row


def train_row(x, wt, b, go, kw, warmup, runs):
    """A training step in each mode, as `convt bench --train` times it: fp32 parameters (the master copy), the
    forward (under autocast for fp16 and bf16, whose activations have that dtype: autocast casts the weight), the
    backward from grad_output (the input requires its gradient, as a layer inside a network does), and an SGD step
    (torch.optim.SGD, lr 1e-4). CUDA events around the whole step. Its error: grad_weight of one more step against
    a float64 one from the values the mode's tensors hold."""
    row = {}
    ref_gw = None
    for mode in MODES:
        torch.backends.cudnn.allow_tf32 = mode == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
        half = DTYPES[mode] if mode in ("fp16", "bf16") else None
        w = torch.nn.Parameter(wt.clone())
        bb = torch.nn.Parameter(b.clone()) if b is not None else None
        opt = torch.optim.SGD([p for p in (w, bb) if p is not None], lr=1e-4)
        # A leaf of its own in each mode (x itself is left without a gradient).
        xm = x.detach().to(DTYPES[mode]).clone().requires_grad_(True)
        gom = go.to(DTYPES[mode])

        def step():
            with torch.autocast("cuda", dtype=half or torch.float16, enabled=half is not None):
                y = F.conv_transpose2d(xm, w, bb, **kw)
            y.backward(gom)
            opt.step()
            opt.zero_grad(set_to_none=True)
            xm.grad = None

        ms, times = time_ms(step, warmup, runs)
        with torch.autocast("cuda", dtype=half or torch.float16, enabled=half is not None):
            y = F.conv_transpose2d(xm, w, bb, **kw)
        y.backward(gom)
        gw = w.grad.detach().clone()
        del y
        opt.zero_grad(set_to_none=True)
        xm.grad = None
        if mode != "tf32":
            # grad_weight depends on the input and grad_output alone (fp32 and tf32 share their values).
            ref_gw = None
            torch.cuda.empty_cache()
            try:
                ref_gw = conv_backward(gom.double(), xm.detach().double(), wt.double(), False, kw,
                                       [False, True, False])[1]
            except torch.cuda.OutOfMemoryError:
                print("  (float64 grad_weight reference does not fit in GPU memory: no grad_weight error)")
        row[f"{mode}_ms"] = ms
        row[f"{mode}_times_ms"] = times
        row[f"{mode}_grad_weight_rel_l2"] = row[f"{mode}_rel_l2"] = None if ref_gw is None else rel_l2(gw, ref_gw)
        del w, bb, opt, xm, gom, gw
        torch.cuda.empty_cache()
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", nargs="*", default=list(CASES))
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--backward", action="store_true", help="time the backward pass (all three gradients)")
    ap.add_argument("--train", action="store_true",
                    help="time a training step (forward, backward, SGD step; autocast for fp16 and bf16)")
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    if args.backward and args.train:
        ap.error("--backward and --train time different things: give one")
    pass_name = "train" if args.train else "backward" if args.backward else "forward"
    out = {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "gpu": torch.cuda.get_device_name(),
           "pass": pass_name, "runs": args.runs, "cases": []}
    errors = "grad_input errors" if args.backward else "grad_weight errors" if args.train else "errors"
    print(f"{pass_name} pass")
    print(f"{'case':<6} {'fp32 ms':>9} {'tf32 ms':>9} {'fp16 ms':>9} {'bf16 ms':>9}  {errors} (fp32 / tf32 / fp16 / bf16)")
    for name in args.case:
        n, cin, cout, h, w, k, s, p, op, d, g, bias = CASES[name]
        torch.manual_seed(0)
        x = torch.rand(n, cin, h, w, device=dev)
        wt = torch.empty(cin, cout // g, *k, device=dev).uniform_(-0.1, 0.1)
        b = torch.empty(cout, device=dev).uniform_(-0.1, 0.1) if bias else None
        kw = dict(stride=s, padding=p, output_padding=op, dilation=d, groups=g)
        if args.backward or args.train:
            go = torch.empty(n, cout, *output_size(h, w, k, s, p, op, d), device=dev).uniform_(-1.0, 1.0)
            if args.train:
                row = {"case": name, **train_row(x, wt, b, go, kw, args.warmup, args.runs)}
            else:
                row = {"case": name, **backward_row(x, wt, bias, go, kw, args.warmup, args.runs)}
            del go
        else:
            row = {"case": name, **forward_row(x, wt, b, kw, args.warmup, args.runs)}
        out["cases"].append(row)
        fmt = lambda e: "-" if e is None else f"{e:.1e}"
        line = (f"{name:<6} " + " ".join(f"{row[m + '_ms']:>9.3f}" for m in MODES) + "  "
                + " / ".join(fmt(row[m + "_rel_l2"]) for m in MODES))
        if args.backward:
            line += "; grad_weight " + " / ".join(fmt(row[f"{m}_grad_weight_rel_l2"]) for m in MODES)
            if bias:
                line += "; grad_bias " + " / ".join(fmt(row[f"{m}_grad_bias_rel_l2"]) for m in MODES)
        print(line)
        del x, wt, b
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
