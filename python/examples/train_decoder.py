"""Trains a small decoder (two ConvTranspose2d layers) in a plain torch loop (Adam, MSE loss) three times from one
initialisation to imitate a hidden decoder: with torch.nn.ConvTranspose2d in float32, with
convt.torch.ConvTranspose2d in float32, and with convt's layers on float16 activations and float32 master
weights (autocast's rule). Prints the three loss curves and how far convt's are from PyTorch's; exits with an
error unless every run learns (the loss falls 10x) and convt's float32 curve stays within 1e-3 of PyTorch's at
every step (its float16 curve within 3e-2).

    python python/examples/train_decoder.py [--steps 100]
"""

import argparse
import copy
import sys

import torch
from torch import nn

import convt.torch as ct


def decoder(conv):
    return nn.Sequential(conv(16, 8, 4, stride=2, padding=1), nn.ReLU(), conv(8, 3, 3, padding=1))


def train(model, data, target, steps, dtype):
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(data.to(dtype)).float(), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    steps = ap.parse_args().steps
    torch.manual_seed(0)
    # The target is what a hidden decoder of the same form makes of the data: the loss can fall far.
    data = torch.randn(8, 16, 8, 8)
    with torch.no_grad():
        target = decoder(nn.ConvTranspose2d)(data)
    ours = decoder(ct.ConvTranspose2d)
    theirs = decoder(nn.ConvTranspose2d)
    theirs.load_state_dict(ours.state_dict())
    runs = {
        "torch f32": train(theirs, data, target, steps, torch.float32),
        "convt f32": train(copy.deepcopy(ours), data, target, steps, torch.float32),
        "convt f16": train(copy.deepcopy(ours), data, target, steps, torch.float16),
    }
    print("step " + "".join(f"{name:>14}" for name in runs))
    for i in range(0, steps, max(1, steps // 10)):
        print(f"{i:4d} " + "".join(f"{losses[i]:14.6f}" for losses in runs.values()))
    reference = runs["torch f32"]
    failed = False
    for name, bound in (("convt f32", 1e-3), ("convt f16", 3e-2)):
        worst = max(abs(a - b) / abs(b) for a, b in zip(runs[name], reference))
        print(f"{name}: largest relative difference from torch f32's loss over {steps} steps {worst:.1e}")
        failed |= not worst <= bound
    for name, losses in runs.items():
        if not losses[-1] * 10 <= losses[0]:
            print(f"{name} did not learn: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
            failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
