#!/usr/bin/python3
"""Train the bundled hierarchical example (issues 10 and 46) on Fashion-MNIST and write its dump.

Two hierarchical models as the papers' ones, with the recipe of train_fashion_mnist.py (default
initialisation), each on the 14 x 14 grid of patch 2 on the 28x28 images:
- "swinpvt": stage 1 is two FLatten-Swin blocks (focused linear attention inside 7 x 7 windows,
  the second shifted by 3 without a mask, as the released linear Swin code; the dwc inside each
  window); a 2 x 2 patch merge gives 7 x 7 with twice the channels and heads; stage 2 is two PVT
  blocks (softmax spatial-reduction attention with sr 2, keys on 3 x 3, then FLatten-PVT with sr 2
  and its dwc on V interpolated back to the 49 tokens).
- "cswin": CSwin's cross-shaped windows (per-head stripes, format.md 1b): stage 1 is two CSwin
  blocks with softmax and LePE, half the heads in vertical 14 x 2 stripes and half in horizontal
  2 x 14 ones; CSwin's merge to 7 x 7; stage 2 one CSwin block over the whole grid.
Every layer is exported for the example's test images (the first test image of each class) into
resources/examples/attnlens-example-hierarchical.h5, layers "<model>.s<stage>.b<block>", with a
JSON sidecar of the recipe and each model's test accuracy.

    /usr/bin/python3 resources/exporter/train_hierarchical.py                  # the committed file
    /usr/bin/python3 resources/exporter/train_hierarchical.py --steps 20 --test-subset 500 \\
        --out /tmp/quick.h5                                                    # a smoke run

Data: the Debian package dataset-fashion-mnist (/usr/share/datasets/fashion-mnist/*.gz).
"""

import argparse
import json
import os
import platform
import sys
import time

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attnlens_export as ax  # noqa: E402
import reference_attention as ra  # noqa: E402
import train_fashion_mnist as tfm  # noqa: E402


class PvtBlock(nn.Module):
    """PVT's block: x + attn(norm(x), H, W), then x + mlp(norm(x))."""

    def __init__(self, dim, attn, mlp_ratio=2.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = attn
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = ra.Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x, feat):
        y = self.norm1(x)
        x = x + (self.attn(y, feat) if isinstance(self.attn, ra.PvtAttention) else self.attn(y, *feat))
        return x + self.mlp(self.norm2(x))


class SwinPvt(nn.Module):
    """Stage 1: FLatten-Swin on 14 x 14 (windows 7 x 7); merge; stage 2: PVT on 7 x 7 (keys 3 x 3)."""

    def __init__(self, dim=48, heads=2, num_classes=10, mlp_ratio=2.0):
        super().__init__()
        self.patch_embed = nn.Conv2d(1, dim, kernel_size=2, stride=2)
        self.s1 = nn.ModuleList([
            ra.SwinTransformerBlock(dim, (14, 14), heads, window_size=7, shift_size=shift,
                                    mlp_ratio=mlp_ratio, attn_layer=ra.WindowFocusedLinearAttention)
            for shift in (0, 3)])
        self.merge = nn.Conv2d(dim, 2 * dim, kernel_size=2, stride=2)
        self.merge_norm = nn.LayerNorm(2 * dim)
        self.s2 = nn.ModuleList([
            PvtBlock(2 * dim, ra.PvtAttention(2 * dim, 2 * heads, sr_ratio=2), mlp_ratio),
            PvtBlock(2 * dim, ra.PvtFocusedLinearAttention(2 * dim, 2 * heads, grid=(7, 7), sr_ratio=2),
                     mlp_ratio)])
        self.norm = nn.LayerNorm(2 * dim)
        self.head = nn.Linear(2 * dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x).permute(0, 2, 3, 1)  # [B, 14, 14, C]
        for block in self.s1:
            x = block(x)
        x = self.merge(x.permute(0, 3, 1, 2))  # [B, 2C, 7, 7]
        feat = tuple(x.shape[-2:])
        x = self.merge_norm(x.flatten(2).transpose(1, 2))
        for block in self.s2:
            x = block(x, feat)
        return self.head(self.norm(x).mean(dim=1))


class CSwinStages(nn.Module):
    """Stage 1: two CSwin blocks on 14 x 14 (in each, half the heads attend inside vertical 14 x 2
    stripes and half inside horizontal 2 x 14 ones, with LePE on V); CSwin's merge (3 x 3 stride-2
    conv, LayerNorm); stage 2: one CSwin block on 7 x 7 (one attention over the grid, as CSwin's
    last stage)."""

    def __init__(self, dim=48, heads=4, num_classes=10, mlp_ratio=2.0, split_size=2):
        super().__init__()
        self.patch_embed = nn.Conv2d(1, dim, kernel_size=2, stride=2)
        self.s1 = nn.ModuleList([ra.CSWinBlock(dim, 14, heads, split_size=split_size,
                                               mlp_ratio=mlp_ratio) for _ in range(2)])
        self.merge = nn.Conv2d(dim, 2 * dim, kernel_size=3, stride=2, padding=1)
        self.merge_norm = nn.LayerNorm(2 * dim)
        self.s2 = nn.ModuleList([ra.CSWinBlock(2 * dim, 7, 2 * heads, split_size=7,
                                               mlp_ratio=mlp_ratio)])
        self.norm = nn.LayerNorm(2 * dim)
        self.head = nn.Linear(2 * dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x)  # [B, C, 14, 14]
        b, c = x.shape[:2]
        x = x.flatten(2).transpose(1, 2)
        for block in self.s1:
            x = block(x)
        x = self.merge(x.transpose(1, 2).reshape(b, c, 14, 14))  # [B, 2C, 7, 7]
        x = self.merge_norm(x.flatten(2).transpose(1, 2))
        for block in self.s2:
            x = block(x)
        return self.head(self.norm(x).mean(dim=1))


# The dump's models, in dump order: layer names "<model>.s<stage>.b<block>".
MODELS = {
    "swinpvt": lambda a: SwinPvt(a.embed_dim, a.heads, 10, a.mlp_ratio),
    "cswin": lambda a: CSwinStages(a.embed_dim, a.cswin_heads, 10, a.mlp_ratio, a.cswin_split),
}


def layer_name(model, path):
    """stage and block of a module path: s1.0 -> <model>.s1.b0, s2.1.attn -> <model>.s2.b1."""
    parts = path.split(".")
    return f"{model}.{parts[0]}.b{parts[1]}"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join(tfm.REPO_ROOT, "resources", "examples",
                                                 "attnlens-example-hierarchical.h5"))
    p.add_argument("--steps", type=int, default=220)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--weight-decay", type=float, default=0.05)
    p.add_argument("--embed-dim", type=int, default=48)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--mlp-ratio", type=float, default=2.0)
    p.add_argument("--cswin-heads", type=int, default=4,
                   help="heads of the CSwin model's first stage (half per stripe direction)")
    p.add_argument("--cswin-split", type=int, default=2, help="the CSwin model's stripe width")
    p.add_argument("--train-subset", type=int, default=0)
    p.add_argument("--test-subset", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default=tfm.DATA_DIR)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    t0 = time.time()

    def log(msg):
        print(f"[{time.time() - t0:7.1f} s] {msg}", flush=True)

    train_images, train_labels = tfm.load_split(args.data_dir, "train")
    test_images, test_labels = tfm.load_split(args.data_dir, "test")
    eval_images, eval_labels = (test_images[:args.test_subset], test_labels[:args.test_subset]) \
        if args.test_subset else (test_images, test_labels)
    chosen = tfm.example_indices(test_labels, 1)
    models = []
    with ax.DumpWriter(args.out, grid=(14, 14), prefix_tokens=0, dtype="float16",
                       class_names=tfm.CLASSES,
                       model=f"Fashion-MNIST hierarchical models ({', '.join(MODELS)}), patch 2, "
                             f"dim {args.embed_dim} then {2 * args.embed_dim}") as writer:
        index = 0
        for m, (name, make) in enumerate(MODELS.items()):
            model, train_s = tfm.train(name, args, train_images, train_labels, log,
                                       build=lambda _p, a, make=make: make(a))
            e0 = time.time()
            acc = tfm.evaluate(model, eval_images, eval_labels)
            eval_s = time.time() - e0
            log(f"{name}: test accuracy {acc:.4f} on {eval_images.shape[0]} images (train "
                f"{train_s:.0f} s, eval {eval_s:.0f} s)")
            exporter = ax.Exporter(model, writer=writer, index_start=index,
                                   layer_name=lambda path, name=name: layer_name(name, path))
            pred = exporter.run(tfm.to_input(test_images[chosen]),
                                labels=test_labels[chosen] if m == 0 else None,
                                images=test_images[chosen] if m == 0 else None)
            index += len(exporter.recorder.layers)
            models.append({"name": name, "structure": type(model).__doc__, "test_accuracy": acc,
                           "test_images": int(eval_images.shape[0]),
                           "train_seconds": round(train_s, 1), "eval_seconds": round(eval_s, 1),
                           "parameters": sum(p.numel() for p in model.parameters()),
                           "example_predictions": pred.argmax(dim=1).tolist()})
    summary = ax.validate(args.out)
    sidecar = {
        "file": os.path.basename(args.out),
        "size_bytes": os.path.getsize(args.out),
        "total_seconds": round(time.time() - t0, 1),
        "recipe": {k: v for k, v in vars(args).items() if k not in ("out", "data_dir")},
        "models": models,
        "exported_test_indices": chosen.tolist(),
        "exported_labels": test_labels[chosen].tolist(),
        "layers": [l["name"] for l in summary["layers"]],
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
                   f"{args.threads} threads",
    }
    with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
        json.dump(sidecar, f, indent=2)
        f.write("\n")
    log(f"wrote {args.out} ({sidecar['size_bytes'] / 1e6:.2f} MB), accuracies "
        + ", ".join(f"{m['name']} {m['test_accuracy']:.4f}" for m in models))
    return 0


if __name__ == "__main__":
    sys.exit(main())
