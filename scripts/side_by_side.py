#!/usr/bin/env python3
"""Joins `convt bench --json` and `scripts/torch_bench.py --json` into the side-by-side table (markdown, with
ratios: > 1 means convt is faster) and, where matplotlib is available, a PNG chart. Both files must time the same
pass (forward; with --backward, backward; with --train, a training step: grad_weight's error and the kernels of
its forward, grad_input and grad_weight); the table is titled with it when the files name it. When convt's
file carries each case's error (`convt bench` checks sampled outputs), the table lists it next to PyTorch's
errors in each mode, and the precision convt ran at. For the backward, where both files carry each gradient's
error (convt's `grad_input_rel_l2`, `grad_weight_rel_l2`, `grad_bias_rel_l2`; PyTorch's `{mode}_grad_input_rel_l2`
and so on), the table lists the three side by side, and names the kernels convt ran for grad_input and
grad_weight.

--torch-mode keeps one of PyTorch's modes (fp32, tf32, fp16, bf16): convt's run beside its twin alone.

    python3 scripts/side_by_side.py convt.json torch.json [--torch-mode MODE] [--md table.md] [--png chart.png]
"""
import argparse
import json

MODES = ("fp32", "tf32", "fp16", "bf16")
LABEL = {"fp32": "fp32", "tf32": "TF32", "fp16": "fp16", "bf16": "bf16"}
GRADIENTS = ("grad_input", "grad_weight", "grad_bias")


def fmt_err(v):
    return "-" if v is None else f"{v:.1e}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("convt")
    ap.add_argument("torch")
    ap.add_argument("--torch-mode", choices=MODES, help="only this PyTorch mode (convt's twin)")
    ap.add_argument("--md")
    ap.add_argument("--png")
    a = ap.parse_args()
    c = json.load(open(a.convt))
    tj = json.load(open(a.torch))
    t = {r["case"]: r for r in tj["cases"]}
    # Files from before `--backward` carry no "pass" (they are forward); a backward file says so.
    pc, pt = c.get("pass"), tj.get("pass")
    if (pc or "forward") != (pt or "forward"):
        raise SystemExit(f"{a.convt} times the {pc or 'forward'} pass but {a.torch} the {pt or 'forward'} pass")
    pass_name = pc or pt
    ceil = c.get("ceilings") or {}
    precision = c.get("precision")
    dtype = c.get("dtype", "f32")
    # PyTorch's modes in the file (older files have no bf16), or the one asked for.
    modes = [m for m in MODES if all(f"{m}_ms" in r for r in tj["cases"])]
    if a.torch_mode:
        if a.torch_mode not in modes:
            raise SystemExit(f"{a.torch} has no {a.torch_mode} times")
        modes = [a.torch_mode]
    # The errors convt's file carries: each gradient's (backward files since they carry them), or one per case
    # (the forward's output; grad_input's in older backward files).
    per_gradient = [g for g in GRADIENTS if any(r.get(f"{g}_rel_l2") is not None for r in c["cases"])]
    errors = bool(per_gradient) or any(r.get("rel_l2") is not None for r in c["cases"])
    err_columns = [(f"{g}_rel_l2", g + " ") for g in per_gradient] or [("rel_l2", "")]

    header = ["case", "convt ms", "TFLOP/s", "GB/s", "%FMA", "%copy"]
    header += [f"torch {LABEL[m]} ms" for m in modes] + [f"vs {LABEL[m]}" for m in modes]
    if errors:
        header.append("convt kernels" if per_gradient else "convt kernel")
        for _, name in err_columns:
            header += [f"convt {name}err"] + [f"{LABEL[m]} {name}err" for m in modes]
    title = []
    if pass_name:
        title = [f"### {pass_name} pass" + (f", precision {precision}" if precision else "") + f", {dtype} tensors"
                 + (f" vs PyTorch {LABEL[modes[0]]}" if a.torch_mode else ""), ""]
    lines = [
        *title,
        f"adapter: {c['adapter']} ({c['backend']}, driver {c['driver']} {c['driver_info']}), shader checks "
        f"{c['shader_checks']}, median of {c['runs']} runs"
        + (f"; ceilings: FMA {ceil['fma_tflops']:.1f} TFLOP/s, copy {ceil['copy_gbs']:.0f} GB/s" if ceil else ""),
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    names, ratios = [], []
    for r in c["cases"]:
        tr = t.get(r["case"])
        if tr is None:
            continue
        pf = f"{100 * r['tflops'] / ceil['fma_tflops']:.0f}%" if ceil else "-"
        # (A training step's file has no bytes moved.)
        pb = f"{100 * r['gbs'] / ceil['copy_gbs']:.0f}%" if ceil and "gbs" in r else "-"
        rat = [tr[f"{m}_ms"] / r["ms"] for m in modes]
        cells = [r["case"], f"{r['ms']:.3f}", f"{r['tflops']:.2f}", f"{r['gbs']:.0f}" if "gbs" in r else "-", pf, pb]
        cells += [f"{tr[m + '_ms']:.3f}" for m in modes] + [f"{x:.2f}x" for x in rat]
        if errors:
            if "grad_input_kernel" in r and pass_name != "train":
                cells.append(f"{r['grad_input_kernel']}; {r['grad_weight_kernel']}")
            else:
                cells.append(r.get("algorithm", "-"))
            for key, _ in err_columns:
                cells += [fmt_err(r.get(key))] + [fmt_err(tr.get(f"{m}_{key}")) for m in modes]
        lines.append("| " + " | ".join(cells) + " |")
        names.append(r["case"])
        ratios.append(rat)
    text = "\n".join(lines)
    print(text)
    if a.md:
        open(a.md, "w").write(text + "\n")
    if a.png and names:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("matplotlib not available: no chart")
            return
        fig, ax = plt.subplots(figsize=(10, 4))
        width = 0.8 / len(modes)
        for i, m in enumerate(modes):
            ax.bar([j + (i - (len(modes) - 1) / 2) * width for j in range(len(names))], [r[i] for r in ratios], width,
                   label=f"vs PyTorch {LABEL[m]}")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(names)), names)
        ax.set_yscale("log")
        ax.set_ylabel("speed-up of convt (PyTorch ms / convt ms)")
        ax.set_title(f"convt ({precision}, {dtype} tensors) vs PyTorch, {c['adapter']}"
                     + (f", {pass_name} pass" if pass_name else ""))
        ax.legend()
        fig.tight_layout()
        fig.savefig(a.png, dpi=120)


if __name__ == "__main__":
    main()
