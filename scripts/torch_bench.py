#!/usr/bin/env python3
"""PyTorch's side of the benchmark: the suite cases of convt (src/suite.rs) through torch.nn.functional.
conv_transpose2d on CUDA, in three modes: fp32 (cuDNN with TF32 off), tf32 (PyTorch's default for
convolutions) and fp16. CUDA events around each call, warm-up, median of --runs, cudnn.benchmark on, inputs
torch.rand (as KernelBench draws them). Also reports each mode's relative L2 error against a float64 result.

    python3 scripts/torch_bench.py [--case kb57 ...] [--runs 30] [--json out.json]
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", nargs="*", default=list(CASES))
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    out = {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "gpu": torch.cuda.get_device_name(),
           "runs": args.runs, "cases": []}
    print(f"{'case':<6} {'fp32 ms':>9} {'tf32 ms':>9} {'fp16 ms':>9}  errors (fp32 / tf32 / fp16)")
    for name in args.case:
        n, cin, cout, h, w, k, s, p, op, d, g, bias = CASES[name]
        torch.manual_seed(0)
        x = torch.rand(n, cin, h, w, device=dev)
        wt = torch.empty(cin, cout // g, *k, device=dev).uniform_(-0.1, 0.1)
        b = torch.empty(cout, device=dev).uniform_(-0.1, 0.1) if bias else None
        kw = dict(stride=s, padding=p, output_padding=op, dilation=d, groups=g)
        row = {"case": name}
        # float64 reference for the errors, sample 0 only (keeps memory and time small).
        ref = F.conv_transpose2d(x[:1].double(), wt.double(), None if b is None else b.double(), **kw)
        for mode in ("fp32", "tf32", "fp16"):
            torch.backends.cudnn.allow_tf32 = mode == "tf32"
            torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
            xm, wm, bm = (x, wt, b) if mode != "fp16" else (x.half(), wt.half(), None if b is None else b.half())
            fn = lambda: F.conv_transpose2d(xm, wm, bm, **kw)
            ms, times = time_ms(fn, args.warmup, args.runs)
            row[f"{mode}_ms"] = ms
            row[f"{mode}_times_ms"] = times
            row[f"{mode}_rel_l2"] = rel_l2(F.conv_transpose2d(xm[:1], wm, bm, **kw), ref)
        out["cases"].append(row)
        print(f"{name:<6} {row['fp32_ms']:>9.3f} {row['tf32_ms']:>9.3f} {row['fp16_ms']:>9.3f}  "
              f"{row['fp32_rel_l2']:.1e} / {row['tf32_rel_l2']:.1e} / {row['fp16_rel_l2']:.1e}")
        del x, wt, b, ref
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
