#!/usr/bin/env python3
"""Joins `convt bench --json` and `scripts/torch_bench.py --json` into the side-by-side table (markdown, with
ratios: > 1 means convt is faster) and, where matplotlib is available, a PNG chart. Both files must time the same
pass (forward or, with --backward, backward); the table is titled with it when the files name it. When convt's
file carries each case's error (`convt bench` checks sampled outputs), the table lists it next to PyTorch's
errors in each mode, and the precision convt ran at.

    python3 scripts/side_by_side.py convt.json torch.json [--md table.md] [--png chart.png]
"""
import argparse
import json


def fmt_err(v):
    return "-" if v is None else f"{v:.1e}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("convt")
    ap.add_argument("torch")
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
    errors = any(r.get("rel_l2") is not None for r in c["cases"])
    precision = c.get("precision")
    dtype = c.get("dtype", "f32")
    # PyTorch's modes in the file (older files have no bf16).
    modes = [m for m in ("fp32", "tf32", "fp16", "bf16") if all(f"{m}_ms" in r for r in tj["cases"])]
    label = {"fp32": "fp32", "tf32": "TF32", "fp16": "fp16", "bf16": "bf16"}
    lines = [
        *([f"### {pass_name} pass" + (f", precision {precision}" if precision else "") + f", {dtype} tensors", ""]
          if pass_name else []),
        f"adapter: {c['adapter']} ({c['backend']}, driver {c['driver']} {c['driver_info']}), shader checks "
        f"{c['shader_checks']}, median of {c['runs']} runs"
        + (f"; ceilings: FMA {ceil['fma_tflops']:.1f} TFLOP/s, copy {ceil['copy_gbs']:.0f} GB/s" if ceil else ""),
        "",
        "| case | convt ms | TFLOP/s | GB/s | %FMA | %copy | " + " | ".join(f"torch {label[m]} ms" for m in modes)
        + " | " + " | ".join(f"vs {label[m]}" for m in modes) + " |"
        + (" convt kernel | convt err | " + " | ".join(f"{label[m]} err" for m in modes) + " |" if errors else ""),
        "|---|---|---|---|---|---|" + "---|---|" * len(modes) + ("---|---|" + "---|" * len(modes) if errors else ""),
    ]
    names, ratios = [], []
    for r in c["cases"]:
        tr = t.get(r["case"])
        if tr is None:
            continue
        pf = f"{100 * r['tflops'] / ceil['fma_tflops']:.0f}%" if ceil else "-"
        pb = f"{100 * r['gbs'] / ceil['copy_gbs']:.0f}%" if ceil else "-"
        rat = [tr[f"{m}_ms"] / r["ms"] for m in modes]
        lines.append(f"| {r['case']} | {r['ms']:.3f} | {r['tflops']:.2f} | {r['gbs']:.0f} | {pf} | {pb} | "
                     + " | ".join(f"{tr[m + '_ms']:.3f}" for m in modes) + " | "
                     + " | ".join(f"{x:.2f}x" for x in rat) + " |"
                     + (f" {r.get('algorithm', '-')} | {fmt_err(r.get('rel_l2'))} | "
                        + " | ".join(fmt_err(tr.get(f"{m}_rel_l2")) for m in modes) + " |"
                        if errors else ""))
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
                   label=f"vs PyTorch {label[m]}")
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
