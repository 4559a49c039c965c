#!/usr/bin/python3
"""Train one tiny ViT per attention paradigm on Fashion-MNIST and write the bundled example dump.

Every model has the same size and recipe (only the attention module differs): patch size 2 on the
28x28 images gives DeiT-T's token layout, a 14x14 grid plus a CLS token, N = 197. After training,
Q/K/V of every layer of every model are exported for the same fixed test images (the first test
image of each class, in class order) into ONE dump whose layer groups are "<paradigm>.block<i>",
ordered model by model. The layers of the focused, inline and mala models also get their local
branch (format.md 1a: FLatten's DWC, InLine's per-image residual, MALA's LePE; float32 weights in
the float16 dump), through the modules' attnlens_local_branch protocol. A JSON sidecar records the
recipe, the accuracies, the timings and the layers' local branches.

    /usr/bin/python3 resources/exporter/train_fashion_mnist.py            # the committed example
    /usr/bin/python3 resources/exporter/train_fashion_mnist.py --steps 20 --test-subset 500 \
        --out /tmp/quick.h5                                               # a quick smoke run

Data: the Debian package dataset-fashion-mnist (/usr/share/datasets/fashion-mnist/*.gz).
"""

import argparse
import ctypes
import gzip
import json
import math
import os
import platform
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attnlens_export as ax  # noqa: E402
import reference_attention as ra  # noqa: E402

DATA_DIR = "/usr/share/datasets/fashion-mnist"
CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
           "Bag", "Ankle boot")
# Mean and standard deviation of the Fashion-MNIST training pixels (scaled to [0, 1]).
PIXEL_MEAN, PIXEL_STD = 0.2860, 0.3530
# The sidecar's words for the recipe's initialisation (issue 46 item 7).
INITIALISATION = {
    ("sincos", "mimetic"): "learned position embedding started at MAE's 2D sin-cos table (CLS row zero, "
                           "still learnable); mimetic W_q/W_k: W_k := W_q, both x{gain}, q/k biases zero; "
                           "everything else PyTorch's default",
    ("sincos", "default"): "learned position embedding started at MAE's 2D sin-cos table (CLS row zero, "
                           "still learnable); everything else PyTorch's default",
    ("random", "mimetic"): "learned position embedding started at N(0, 0.02); mimetic W_q/W_k: W_k := W_q, "
                           "both x{gain}, q/k biases zero; everything else PyTorch's default",
    ("random", "default"): "learned position embedding started at N(0, 0.02); everything else PyTorch's "
                           "default",
}
REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def read_idx(path):
    """An IDX file (gzip) as a numpy array: magic 0x00 0x00 dtype ndim, big-endian int32 dims."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    if data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    array = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if array.size != int(np.prod(dims)):
        raise ValueError(f"{path}: {array.size} bytes of data for dims {dims}")
    return array.reshape(dims)


def load_split(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz")).astype(np.int64)
    return images, labels


def to_input(images_uint8):
    x = torch.from_numpy(images_uint8.astype(np.float32) / 255.0).unsqueeze(1)
    return (x - PIXEL_MEAN) / PIXEL_STD


def build_model(paradigm, args):
    model = ra.VisionTransformer(paradigm, img_size=28, patch_size=2, in_chans=1, num_classes=10,
                                 embed_dim=args.embed_dim, depth=args.depth,
                                 num_heads=args.heads, mlp_ratio=args.mlp_ratio,
                                 position_init=getattr(args, "position_init", "random"))
    if getattr(args, "qk_init", "default") == "mimetic":
        ra.mimetic_qk_init(model, gain=args.mimetic_gain)
    return model


def lr_at(step, args):
    """Linear warm-up for the first 10% of the steps, then cosine decay to 1% of the peak."""
    warmup = max(1, args.steps // 10)
    if step < warmup:
        return args.lr * (step + 1) / warmup
    t = (step - warmup) / max(1, args.steps - warmup)
    return args.lr * (0.01 + 0.99 * 0.5 * (1 + math.cos(math.pi * t)))


def train(paradigm, args, train_images, train_labels, log, build=None):
    """Trains build(paradigm, args) (default: the tiny ViT) with the example's recipe."""
    torch.manual_seed(args.seed)
    model = (build or build_model)(paradigm, args)
    # Weight decay on the weights of linear and convolution layers only (not on biases, norms,
    # the CLS token, positional parameters or FLatten's scale).
    is_decayed = lambda n, p: n.endswith(".weight") and p.ndim >= 2
    decay = [p for n, p in model.named_parameters() if is_decayed(n, p)]
    no_decay = [p for n, p in model.named_parameters() if not is_decayed(n, p)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr)
    # The same sequence of mini-batches for every paradigm.
    rng = np.random.default_rng(args.seed)
    pool = np.arange(train_images.shape[0])
    if args.train_subset:
        pool = rng.choice(pool, size=args.train_subset, replace=False)
    order = np.concatenate([rng.permutation(pool) for _ in range(
        math.ceil(args.steps * args.batch_size / pool.size))])
    model.train()
    start = time.time()
    running = None
    for step in range(args.steps):
        idx = order[step * args.batch_size:(step + 1) * args.batch_size]
        x, y = to_input(train_images[idx]), torch.from_numpy(train_labels[idx])
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args)
        loss = F.cross_entropy(model(x), y)
        if not torch.isfinite(loss):
            raise RuntimeError(f"{paradigm}: loss became {loss.item()} at step {step}")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        running = loss.item() if running is None else 0.95 * running + 0.05 * loss.item()
        if step % 25 == 0 or step == args.steps - 1:
            log(f"  {paradigm} step {step + 1}/{args.steps} loss {running:.3f} "
                f"({time.time() - start:.0f} s)")
    return model.eval(), time.time() - start


@torch.no_grad()
def evaluate(model, images, labels, batch=200):
    correct = 0
    for s in range(0, images.shape[0], batch):
        pred = model(to_input(images[s:s + batch])).argmax(dim=1).numpy()
        correct += int((pred == labels[s:s + batch]).sum())
    return correct / images.shape[0]


def example_indices(labels, per_class):
    """The first `per_class` test images of each class, class by class."""
    return np.concatenate([np.flatnonzero(labels == c)[:per_class] for c in range(10)])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join(REPO_ROOT, "resources", "examples",
                                                 "attnlens-example.h5"))
    p.add_argument("--paradigms", default=",".join(ra.PARADIGMS))
    p.add_argument("--steps", type=int, default=1000, help="optimiser steps per model")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--weight-decay", type=float, default=0.05)
    p.add_argument("--embed-dim", type=int, default=96)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--heads", type=int, default=3)
    p.add_argument("--mlp-ratio", type=float, default=2.0)
    p.add_argument("--position-init", choices=("sincos", "random"), default="sincos",
                   help="learned position embedding started at MAE's 2D sin-cos table (CLS row "
                        "zero) or at N(0, 0.02)")
    p.add_argument("--qk-init", choices=("mimetic", "default"), default="mimetic",
                   help="mimetic: W_k := W_q, both times --mimetic-gain, q/k biases zero")
    p.add_argument("--mimetic-gain", type=float, default=2.0)
    p.add_argument("--train-subset", type=int, default=0,
                   help="draw the mini-batches from this many training images (0: all 60000)")
    p.add_argument("--test-subset", type=int, default=0,
                   help="evaluate on the first N test images (0: all 10000)")
    p.add_argument("--per-class", type=int, default=1, help="exported test images per class")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default=DATA_DIR)
    p.add_argument("--save-weights", help="directory for the trained state_dicts (not committed)")
    args = p.parse_args(argv)

    torch.set_num_threads(args.threads)
    # glibc hands freed blocks above 128 KiB back to the kernel, so every activation tensor is
    # page-faulted in again; on this 2-core machine that costs more than the arithmetic. Keep them.
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 30)        # M_MMAP_THRESHOLD
        libc.mallopt(-1, (1 << 31) - 1)  # M_TRIM_THRESHOLD
    except OSError:
        pass
    # Flush subnormal floats to zero: the focused kernel's (ReLU(x) + 1e-6)^3 makes many, and
    # subnormal arithmetic is tens of times slower on x86.
    torch.set_flush_denormal(True)
    paradigms = [s for s in args.paradigms.split(",") if s]
    t0 = time.time()

    def log(msg):
        print(f"[{time.time() - t0:7.1f} s] {msg}", flush=True)

    train_images, train_labels = load_split(args.data_dir, "train")
    test_images, test_labels = load_split(args.data_dir, "test")
    if args.test_subset:
        eval_images, eval_labels = test_images[:args.test_subset], test_labels[:args.test_subset]
    else:
        eval_images, eval_labels = test_images, test_labels
    chosen = example_indices(test_labels, args.per_class)
    log(f"train {train_images.shape}, test {test_images.shape}, evaluating on "
        f"{eval_images.shape[0]} test images, exporting test images {chosen.tolist()}")

    results = []
    # DumpWriter writes a temporary file and renames it only when everything succeeded.
    with ax.DumpWriter(args.out, grid=(14, 14), prefix_tokens=1, dtype="float16",
                       class_names=CLASSES, model="Fashion-MNIST tiny ViTs (" + ", ".join(paradigms) + "), "
                       f"patch 2, dim {args.embed_dim}, depth {args.depth}, "
                       f"heads {args.heads}") as writer:
        for m, paradigm in enumerate(paradigms):
            log(f"training {paradigm}")
            model, train_s = train(paradigm, args, train_images, train_labels, log)
            e0 = time.time()
            acc = evaluate(model, eval_images, eval_labels)
            eval_s = time.time() - e0
            log(f"{paradigm}: test accuracy {acc:.4f} on {eval_images.shape[0]} images "
                f"(train {train_s:.0f} s, eval {eval_s:.0f} s)")
            if args.save_weights:
                os.makedirs(args.save_weights, exist_ok=True)
                torch.save(model.state_dict(), os.path.join(args.save_weights, f"{paradigm}.pt"))
            x = to_input(test_images[chosen])
            exporter = ax.Exporter(
                model, writer=writer, index_start=m * args.depth,
                layer_name=lambda n, p=paradigm: f"{p}.block{int(n.split('.')[1])}")
            pred = exporter.run(x, labels=test_labels[chosen] if m == 0 else None,
                                images=test_images[chosen] if m == 0 else None)
            results.append({
                "paradigm": paradigm, "test_accuracy": acc, "test_images": int(eval_images.shape[0]),
                "train_seconds": round(train_s, 1), "eval_seconds": round(eval_s, 1),
                "parameters": sum(p.numel() for p in model.parameters()),
                "example_predictions": pred.argmax(dim=1).tolist()})
    total = time.time() - t0
    summary = ax.validate(args.out)
    sidecar = {
        "file": os.path.basename(args.out),
        "size_bytes": os.path.getsize(args.out),
        "total_seconds": round(total, 1),
        "recipe": {k: v for k, v in vars(args).items() if k not in ("out", "save_weights",
                                                                    "data_dir")},
        "optimiser": "AdamW, betas (0.9, 0.999), linear warm-up 10% then cosine to 1% of lr, "
                     "grad-norm clip 1.0, cross-entropy, no augmentation; weight decay on "
                     "linear and convolution weights only",
        "input": f"pixels / 255, normalised with mean {PIXEL_MEAN}, std {PIXEL_STD}",
        "initialisation": INITIALISATION[(args.position_init, args.qk_init)].format(gain=args.mimetic_gain),
        "exported_test_indices": chosen.tolist(),
        "exported_labels": test_labels[chosen].tolist(),
        "classes": CLASSES,
        "models": results,
        "layers": [l["name"] for l in summary["layers"]],
        "local_branches": {l["name"]: l["local_branch"] for l in summary["layers"]
                           if l.get("local_branch")},
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
                   f"{args.threads} threads",
    }
    with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
        json.dump(sidecar, f, indent=2)
        f.write("\n")
    log(f"wrote {args.out} ({sidecar['size_bytes'] / 1e6:.1f} MB) in {total:.0f} s")
    for r in results:
        log(f"  {r['paradigm']:12s} accuracy {r['test_accuracy']:.4f}  train {r['train_seconds']}"
            f" s  eval {r['eval_seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
