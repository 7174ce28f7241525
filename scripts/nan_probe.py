#!/usr/bin/env python3
"""How PyTorch propagates non-finite values through conv_transpose2d, on the CPU (float64) and on CUDA (cuDNN,
fp32): an Inf or NaN in the input or in the weight, and where the outputs become non-finite. Prints, per case,
the number of non-finite outputs on each device and whether the two agree element by element.

    python3 scripts/nan_probe.py
"""
import torch
import torch.nn.functional as F

CASES = [  # (input shape, weight shape, stride, padding, output_padding, dilation, groups)
    ((2, 16, 6, 5), (16, 24, 3, 3), 2, 1, 1, 1, 1),
    ((1, 12, 7, 6), (12, 20, 3, 5), 1, (1, 2), 0, 1, 1),
    ((2, 8, 5, 6), (8, 4, 3, 5), (2, 3), (1, 2), 0, (2, 1), 4),
]


def main():
    torch.manual_seed(0)
    for i, (xs, ws, s, p, op, d, g) in enumerate(CASES):
        for where in ("input", "weight"):
            for special in (float("nan"), float("inf")):
                x = torch.rand(*xs) * 2 - 1
                w = torch.rand(*ws) * 2 - 1
                t = x if where == "input" else w
                t.view(-1)[t.numel() // 3] = special
                kw = dict(stride=s, padding=p, output_padding=op, dilation=d, groups=g)
                cpu = F.conv_transpose2d(x.double(), w.double(), **kw)
                cuda = F.conv_transpose2d(x.cuda(), w.cuda(), **kw).cpu().double()
                nf_cpu, nf_cuda = ~torch.isfinite(cpu), ~torch.isfinite(cuda)
                print(f"case {i} {where:<6} {special!s:<4}: non-finite cpu {int(nf_cpu.sum()):>4}, cuda "
                      f"{int(nf_cuda.sum()):>4}, same places {bool((nf_cpu == nf_cuda).all())}, "
                      f"nan places same {bool((cpu.isnan() == cuda.isnan()).all())}")


if __name__ == "__main__":
    main()
