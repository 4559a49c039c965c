"""Shared pieces of the exporter tests: paths, small random models, the CLI wrapper."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
EXPORTER_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "resources", "exporter"))
sys.path.insert(0, EXPORTER_DIR)

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import attnlens_export as ax  # noqa: E402
import reference_attention as ra  # noqa: E402

torch.set_num_threads(1)

# The tolerance: |O_cli - O_ref| <= 1e-5 * max|O_ref| per (image, layer, head).
RELATIVE_TOLERANCE = 1e-5

# attnlens-cli preset that reproduces each reference module from its exported q/k.
CLI_PRESET = {"softmax": "softmax", "linear_relu": "linear_relu", "focused": "focused",
              "inline": "inline", "mala": "mala"}


def cli_path():
    """The attnlens-cli binary from $ATTNLENS_CLI (set by CTest); skip when unset."""
    path = os.environ.get("ATTNLENS_CLI")
    if not path:
        raise unittest.SkipTest("ATTNLENS_CLI is not set (run through ctest)")
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise AssertionError(f"ATTNLENS_CLI={path} is not an executable file")
    return path


def run_cli(*args, expect_ok=True):
    proc = subprocess.run([cli_path(), *map(str, args)], capture_output=True, text=True,
                          timeout=120)
    if expect_ok and proc.returncode != 0:
        raise AssertionError(f"attnlens-cli {' '.join(map(str, args))} exited "
                             f"{proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def cli_attention(dump, image, layer, head, paradigm, workdir):
    out = os.path.join(workdir, f"att-{image}-{layer}-{head}-{paradigm.split(':')[0]}.json")
    run_cli("attention", dump, "--image", image, "--layer", layer, "--head", head,
            "--paradigm", paradigm, "--values", "-o", out)
    with open(out) as f:
        result = json.load(f)
    return result


def randomise(model, seed, qkv_std=1.5):
    """Make a freshly initialised model's attention non-trivial: the ViT init (std 0.02) gives
    near-uniform attention, which would make every comparison easy. qkv weights get std
    qkv_std/sqrt(fan_in) so that q.k varies by several units; parameters the released code
    initialises to zero (FLatten's positional encoding and scale, the CLS token) get noise."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("qkv.weight") or name.endswith("gate.weight"):
                p.copy_(torch.randn(p.shape, generator=g) * qkv_std / p.shape[1] ** 0.5)
            elif name.endswith("qkv.bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
            elif "positional_encoding" in name or name.endswith("attn.scale"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            elif name == "cls_token":
                p.copy_(torch.randn(p.shape, generator=g))
    return model


def small_vit(paradigm, seed=0, **kwargs):
    torch.manual_seed(seed)
    model = ra.VisionTransformer(paradigm, embed_dim=kwargs.pop("embed_dim", 48),
                                 depth=kwargs.pop("depth", 2), num_heads=kwargs.pop("heads", 2),
                                 **kwargs)
    return randomise(model, seed).eval()


def random_images(count, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(count, 1, 28, 28, generator=g)


class AttentionInputs:
    """Forward hooks that keep each attention module's input during one forward pass, so the
    reference output can be computed afterwards outside the exporter's hooks."""

    def __init__(self, model):
        self.model = model
        self.inputs = {}

    def __enter__(self):
        self.handles = [blk.attn.register_forward_hook(self._hook(i))
                        for i, blk in enumerate(self.model.blocks)]
        return self

    def _hook(self, i):
        def hook(_m, inputs, _out):
            self.inputs.setdefault(i, []).append(inputs[0].detach().clone())
        return hook

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        return False

    def reference_outputs(self):
        """{block: O [B, heads, N, d]} from attention_parts over all recorded batches."""
        with torch.no_grad():
            return {i: torch.cat([self.model.blocks[i].attn.attention_parts(x)["out"]
                                  for x in xs]) for i, xs in self.inputs.items()}


def relative_error(actual, expected):
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape:
        raise AssertionError(f"shape {actual.shape} != expected {expected.shape}")
    scale = np.abs(expected).max()
    if scale == 0:
        raise AssertionError("reference is all zeros: the comparison would be vacuous")
    return float(np.abs(actual - expected).max() / scale)


def temp_dir(test):
    d = tempfile.TemporaryDirectory(prefix="attnlens-exporter-test-")
    test.addCleanup(d.cleanup)
    return d.name


# A small dump written by h5py directly (not through the exporter), for tests of what attnlens-cli
# refuses: grid 2x2 + one prefix token, layers blocks.0 and blocks.1 with q, k, v [2, 2, 5, 4],
# /images and /labels, optionally a valid per_head 3x3 local branch (format.md 1a) in every layer.
# mutate(f) then breaks one thing.
SMALL_B, SMALL_HEADS, SMALL_N, SMALL_D = 2, 2, 5, 4


def write_small_dump(path, mutate=None, chunks=None, compression=None, local_branch=False):
    b, heads, n, d = SMALL_B, SMALL_HEADS, SMALL_N, SMALL_D
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "attnlens.dump"
        f.attrs["format_version"] = 1
        f.attrs["grid"] = np.array([2, 2])
        f.attrs["prefix_tokens"] = 1
        for name in ("blocks.0", "blocks.1"):
            g = f.create_group(f"layers/{name}")
            for t in "qkv":
                g.create_dataset(t, data=rng.standard_normal((b, heads, n, d)).astype(np.float32),
                                 chunks=chunks, compression=compression,
                                 maxshape=(None, heads, n, d) if chunks else None)
            if local_branch:
                lb = g.create_group("local_branch")
                lb.attrs["kind"] = "dwc"
                lb.attrs["channels"] = "per_head"
                lb["weight"] = rng.standard_normal((d, 3, 3)).astype(np.float32)
                lb["bias"] = rng.standard_normal(d).astype(np.float32)
        f.create_dataset("images", data=rng.integers(0, 255, (b, 4, 4), dtype=np.uint8))
        f.create_dataset("labels", data=np.arange(b))
        if mutate:
            mutate(f)


def replace_dataset(f, path, data, **kwargs):
    """Replaces the dataset at path (h5py cannot change a dataset's shape or dtype in place)."""
    del f[path]
    f.create_dataset(path, data=data, **kwargs)
