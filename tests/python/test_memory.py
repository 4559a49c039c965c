"""Dumps in memory (issue 50 item 4): attnlens.from_arrays and attnlens.capture give what the same
tensors give when written to a file and opened, call for call (analyze, claims, rollout, a head's
attention), and leave nothing behind."""
import gc
import glob
import os
import sys
import time

import numpy as np
import pytest

import attnlens

HERE = os.path.dirname(os.path.abspath(__file__))
EXPORTER_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "resources", "exporter"))


def without_paths(report):
    """A report without what names the file or the moment (the path, its size and hash, the time)."""
    if isinstance(report, dict):
        return {k: without_paths(v) for k, v in report.items()
                if k not in ("path", "file", "input", "created_utc", "file_size", "dump", "seconds", "elapsed_seconds")}
    if isinstance(report, list):
        return [without_paths(v) for v in report]
    return report


def batch(seed=0, b=2, h=2, grid=(6, 5), d=8):
    rng = np.random.default_rng(seed)
    n = 1 + grid[0] * grid[1]
    return [rng.standard_normal((b, h, n, d)).astype(np.float32) * 1.5 for _ in range(3)]


def test_from_arrays_equals_the_same_arrays_written_to_a_file(tmp_path):
    q0, k0, v0 = batch(0)
    q1, k1, v1 = batch(1)
    layers = {"blocks.0": {"q": q0, "k": k0, "v": v0, "attention": "softmax"},
              "blocks.1": {"q": q1, "k": k1, "v": v1, "attention": "linear_relu"}}
    memory = attnlens.from_arrays(layers, grid=(6, 5), prefix_tokens=1, labels=[0, 1])
    # The file path: the exporter's own writer, to disk.
    path = tmp_path / "same.h5"
    with attnlens.DumpWriter(path, (6, 5), 1, dtype="float32") as w:
        for i, (name, layer) in enumerate(layers.items()):
            w.declare_layer(name, i, attention=layer["attention"])
            w.append_layer(name, layer["q"], layer["k"], layer["v"])
        w.append_labels([0, 1])
    with attnlens.open(path) as disk:
        assert memory.images == 2 and [l["name"] for l in memory.layers] == ["blocks.0", "blocks.1"]
        assert memory.layers == disk.layers
        for image in range(2):
            for layer in range(2):
                for head in range(2):
                    got, want = memory.head(image, layer, head), disk.head(image, layer, head)
                    np.testing.assert_array_equal(got.q, [q0, q1][layer][image, head].astype(np.float64))
                    np.testing.assert_array_equal(got.attention("inline"), want.attention("inline"))
        assert without_paths(memory.analyze()) == without_paths(disk.analyze())
        assert without_paths(memory.claims()) == without_paths(disk.claims())
        assert without_paths(memory.rollout(1, "cls")) == without_paths(disk.rollout(1, "cls"))
        np.testing.assert_array_equal(memory.labels, disk.labels)


def test_a_dump_in_memory_is_refused_like_a_file_and_leaves_nothing():
    q, k, v = batch(2)
    folder = "/dev/shm" if os.path.isdir("/dev/shm") else None
    before = set(glob.glob(os.path.join(folder or "/tmp", "attnlens-arrays-*")))
    with pytest.raises(attnlens.ExportError, match="holds NaN|NaN"):
        bad = q.copy()
        bad[0, 0, 3, 1] = np.nan
        attnlens.from_arrays({"b": {"q": bad, "k": k}}, grid=(6, 5), prefix_tokens=1)
    with pytest.raises(attnlens.ExportError):
        attnlens.from_arrays({"b": {"q": q, "k": k[:, :, :7]}}, grid=(6, 5), prefix_tokens=1)
    dump = attnlens.from_arrays({"b": {"q": q, "k": k, "v": v}}, grid=(6, 5), prefix_tokens=1)
    path = dump.path
    assert os.path.exists(path)
    assert dump.head(0, 0, 0).q.shape == (31, 8)
    del dump
    gc.collect()
    assert not os.path.exists(path)
    assert set(glob.glob(os.path.join(folder or "/tmp", "attnlens-arrays-*"))) == before


torch = pytest.importorskip("torch")
sys.path.insert(0, EXPORTER_DIR)
import reference_attention as ra  # noqa: E402


class Attention(torch.nn.Module):
    """timm's vision_transformer.Attention, as the README's exporter block writes it."""

    def __init__(self, dim, num_heads):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        a = (q @ k.transpose(-2, -1) * self.scale).softmax(-1)
        return self.proj((a @ v).transpose(1, 2).reshape(b, n, c))


@pytest.mark.parametrize("paradigm", ["softmax", "focused", "inline", "mala"])
def test_capture_equals_the_exporter_to_a_file(tmp_path, paradigm):
    torch.manual_seed(3)
    if paradigm == "softmax":
        model = torch.nn.Sequential(*[Attention(32, 2) for _ in range(2)]).eval()
        x, grid = torch.randn(3, 1 + 6 * 6, 32), (6, 6)
    else:
        model = ra.VisionTransformer(paradigm, embed_dim=48, depth=2, num_heads=2).eval()
        x, grid = torch.randn(3, 1, 28, 28), (14, 14)
    path = tmp_path / "exported.h5"
    with attnlens.Exporter(model, path, grid=grid, prefix_tokens=1, dtype="float32") as ex:
        want_out = ex.run(x, labels=[0, 1, 2])
    # The training step's own forward, with gradients: the captured q, k, v are what the exporter
    # wrote, and the forward's output and gradients are those of the model without hooks.
    model.train(False)
    xg = x.clone().requires_grad_(True)
    with attnlens.capture(model, grid=grid, prefix_tokens=1, labels=[0, 1, 2]) as cap:
        out = model(xg)
    out.sum().backward()
    torch.testing.assert_close(out.detach(), want_out, rtol=0, atol=0)
    xr = x.clone().requires_grad_(True)
    model(xr).sum().backward()
    torch.testing.assert_close(xg.grad, xr.grad, rtol=0, atol=0)
    memory = cap.dump()
    assert cap.dump() is memory
    with attnlens.open(path) as disk:
        assert memory.layers == disk.layers
        assert without_paths(memory.analyze(stats="rank,local,entropy")) == \
            without_paths(disk.analyze(stats="rank,local,entropy"))
        np.testing.assert_array_equal(memory.head(2, 1, 1).k, disk.head(2, 1, 1).k)


def test_capture_refuses_what_the_exporter_refuses_and_records_nothing_on_error():
    model = torch.nn.Sequential(Attention(32, 2)).eval()
    cap = attnlens.capture(model, grid=(6, 6), prefix_tokens=1)
    with pytest.raises(RuntimeError, match="boom"):
        with cap:
            model(torch.randn(2, 37, 32))
            raise RuntimeError("boom")
    with pytest.raises(attnlens.UsageError, match="has not ended with a recorded forward pass"):
        cap.dump()
    with pytest.raises(attnlens.ExportError, match="did not run"):
        with attnlens.capture(model, grid=(6, 6), prefix_tokens=1):
            pass  # no forward pass


def test_capture_in_a_training_loop_costs_little(tmp_path):
    """A capture per logged step: the figure for the note (not asserted beyond a sanity bound)."""
    model = torch.nn.Sequential(*[Attention(64, 4) for _ in range(4)]).eval()
    x = torch.randn(8, 1 + 14 * 14, 64)
    start = time.perf_counter()
    for _ in range(3):
        with attnlens.capture(model, grid=(14, 14), prefix_tokens=1, check=False) as cap:
            model(x)
        report = cap.dump().analyze(stats="local", paradigms="softmax,linear_relu")
    seconds = (time.perf_counter() - start) / 3
    print(f"capture + analyze(local) of 4 layers x 4 heads x 8 images at N = 197: {seconds * 1000:.0f} ms")
    assert report["results"] and seconds < 60
