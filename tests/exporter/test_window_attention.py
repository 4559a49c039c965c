"""Window attention (format.md 1b, issue 10): a small Swin look-alike (timm's block structure in
reference_attention.py) exported through find_layers, then attnlens-cli's attention times v
against the module's own output, and its softmax weights against the module's, for unshifted
and shifted windows (with Swin's mask) and for a linear window attention that ignores the mask.

The reference is mapped from windows to grid tokens by the model's own functions (windows_of /
grid_of: roll, window_partition, window_reverse), not by the exporter's code.
Tolerance: max|O_cli - O_ref| <= 1e-5 max|O_ref| per (image, layer, head).
"""

import json
import os
import unittest

import h5py
import numpy as np
import torch
import torch.nn as nn

import exporter_test_util as u

ra = u.ra
ax = u.ax
IMAGES = 2
GRID = (8, 8)


class SwinLike(nn.Module):
    """Patch embedding to an 8 x 8 grid, then Swin blocks: windows 4 x 4 unshifted, shifted by 2
    (softmax with bias and mask), and a shifted linear window attention."""

    def __init__(self, dim=32, heads=2):
        super().__init__()
        self.patch_embed = nn.Conv2d(1, dim, kernel_size=4, stride=4)
        self.blocks = nn.ModuleList([
            ra.SwinTransformerBlock(dim, GRID, heads, window_size=4, shift_size=0),
            ra.SwinTransformerBlock(dim, GRID, heads, window_size=4, shift_size=2),
            ra.SwinTransformerBlock(dim, GRID, heads, window_size=4, shift_size=2,
                                    attn_layer=ra.WindowLinearReLUAttention),
        ])

    def forward(self, x):
        x = self.patch_embed(x).permute(0, 2, 3, 1)
        for block in self.blocks:
            x = block(x)
        return x.mean(dim=(1, 2))


def swin_like(seed=3):
    torch.manual_seed(seed)
    model = u.randomise(SwinLike(), seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for block in model.blocks:
            table = getattr(block.attn, "relative_position_bias_table", None)
            if table is not None:
                table.copy_(torch.randn(table.shape, generator=g))
    return model.eval()


class BlockInputs:
    """Each block's input, so that the reference can be computed after the export."""

    def __init__(self, model):
        self.model, self.inputs = model, {}

    def __enter__(self):
        self.handles = [b.register_forward_pre_hook(
            lambda _m, inp, i=i: self.inputs.setdefault(i, []).append(inp[0].detach().clone()))
            for i, b in enumerate(self.model.blocks)]
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        return False

    def reference(self, i):
        """(O [B, heads, N, d], A [B, heads, N, N]) of block i in grid token order."""
        block = self.model.blocks[i]
        x = torch.cat(self.inputs[i])
        b, h, w, _ = x.shape
        with torch.no_grad():
            parts = block.attn.attention_parts(block.windows_of(block.norm1(x)),
                                               mask=block.attn_mask)
            out = parts["out"]  # [B * windows, heads, M, d]
            heads = out.shape[1]
            o = torch.stack([block.grid_of(out[:, k], h, w).reshape(b, h * w, -1)
                             for k in range(heads)], dim=1)
            # Which grid token sits at each window position: the model's own mapping.
            token = torch.arange(h * w, dtype=torch.float64).view(1, h, w, 1)
            ids = block.windows_of(token).view(-1, block.window_size[0] * block.window_size[1])
            ids = ids.round().long()
            windows = ids.shape[0]
            a = None
            if "attn" in parts:
                a = torch.zeros(b, heads, h * w, h * w, dtype=torch.float64)
                attn = parts["attn"].double().view(b, windows, heads, ids.shape[1], ids.shape[1])
                for win in range(windows):
                    rows = ids[win]
                    a[:, :, rows[:, None], rows[None, :]] = attn[:, win]
        return o, a

    def reference_with_branch(self, i):
        """O + the local branch [B, heads, N, d] of block i in grid token order: the attention's
        own attention_with_local_branch on the block's windows (each window convolved alone)."""
        block = self.model.blocks[i]
        x = torch.cat(self.inputs[i])
        b, h, w, _ = x.shape
        with torch.no_grad():
            out = block.attn.attention_with_local_branch(block.windows_of(block.norm1(x)))
            heads = out.shape[1]
            return torch.stack([block.grid_of(out[:, k], h, w).reshape(b, h * w, -1)
                                for k in range(heads)], dim=1)


class PaperSwinLike(nn.Module):
    """The papers' linear Swin blocks on an 8 x 8 grid with 4 x 4 windows: FLatten-Swin (shifted,
    dwc inside each window), InLine-Swin unshifted and shifted (residual kernels per window)."""

    def __init__(self, dim=32, heads=2):
        super().__init__()
        self.patch_embed = nn.Conv2d(1, dim, kernel_size=4, stride=4)
        self.blocks = nn.ModuleList([
            ra.SwinTransformerBlock(dim, GRID, heads, window_size=4, shift_size=2,
                                    attn_layer=ra.WindowFocusedLinearAttention),
            ra.SwinTransformerBlock(dim, GRID, heads, window_size=4, shift_size=0,
                                    attn_layer=ra.WindowInLineAttention),
            ra.SwinTransformerBlock(dim, GRID, heads, window_size=4, shift_size=2,
                                    attn_layer=ra.WindowInLineAttention),
        ])

    forward = SwinLike.forward


def export(test, model=None):
    model = swin_like() if model is None else model
    x = torch.randn(IMAGES, 1, 32, 32, generator=torch.Generator().manual_seed(9))
    path = os.path.join(u.temp_dir(test), "swin.h5")
    with BlockInputs(model) as rec, ax.Exporter(model, path, grid=GRID, dtype="float32") as ex:
        ex.run(x[:1])  # two batches: the streamed path
        ex.run(x[1:])
    return path, rec, model


class WindowExport(unittest.TestCase):
    def test_layers_carry_the_window_rule_and_bias(self):
        path, _, model = export(self)
        with h5py.File(path, "r") as f:
            names = sorted(f["layers"], key=lambda n: int(f["layers"][n].attrs["index"]))
            self.assertEqual(names, ["blocks.0", "blocks.1", "blocks.2"])
            expected = [((4, 4), (0, 0), False, "softmax"), ((4, 4), (2, 2), True, "softmax"),
                        ((4, 4), (2, 2), False, "linear_relu")]
            for name, (size, shift, mask, attention), block in zip(names, expected, model.blocks):
                g = f["layers"][name]
                self.assertEqual(tuple(g.attrs["window_size"]), size)
                self.assertEqual(tuple(g.attrs["window_shift"]), shift)
                self.assertEqual(bool(g.attrs["window_mask"]), mask)
                self.assertEqual(g.attrs["attention"], attention)
                self.assertEqual(g["q"].shape, (IMAGES, 2, 64, 16))
                if attention == "softmax":
                    bias = block.attn._get_rel_pos_bias()[0].detach().numpy()
                    np.testing.assert_allclose(g["position_bias"][()], bias, rtol=0, atol=0)
                else:
                    self.assertNotIn("position_bias", g)

    def test_cli_output_and_weights_are_the_modules(self):
        u.cli_path()
        path, rec, _ = export(self)
        work = u.temp_dir(self)
        for i, (name, preset) in enumerate((("blocks.0", "softmax"), ("blocks.1", "softmax"),
                                            ("blocks.2", "linear_relu"))):
            o_ref, a_ref = rec.reference(i)
            for b in range(IMAGES):
                for h in range(2):
                    where = f"{name} image {b} head {h}"
                    res = u.cli_attention(path, b, name, h, preset, work)
                    self.assertEqual(res["row_status"], ["ok"] * 64, where)
                    err = u.relative_error(res["output"], o_ref[b, h].numpy())
                    self.assertLess(err, u.RELATIVE_TOLERANCE, where)
                    a = np.asarray(res["attention"])
                    if a_ref is not None:
                        self.assertLess(u.relative_error(a, a_ref[b, h].numpy()),
                                        u.RELATIVE_TOLERANCE, where)
                    # Every query attends to 16 keys (its window) and nothing else.
                    self.assertTrue(np.all(np.count_nonzero(a, axis=1) <= 16), where)

    def test_analyze_reports_window_ranks(self):
        u.cli_path()
        path, _, _ = export(self)
        out = os.path.join(u.temp_dir(self), "report.json")
        u.run_cli("analyze", path, "--paradigms", "softmax,linear_relu", "-o", out)
        with open(out) as f:
            report = json.load(f)
        layers = report["input"]["dump"]["layers"]
        self.assertEqual(layers[1]["window"], {"size": [4, 4], "shift": [2, 2], "mask": True,
                                               "windows": 4, "position_bias": True})
        records = report["results"]
        self.assertTrue(records)
        for r in records:
            self.assertEqual(len(r["rank"]["window_ranks"]), 4)
            if r["paradigm"] == "linear_relu":
                # d = 16: each window's block has rank <= d.
                self.assertTrue(all(k <= 16 for k in r["rank"]["window_ranks"]))
        try:
            import jsonschema
        except ImportError:
            self.skipTest("python3-jsonschema is not installed")
        with open(os.path.join(u.EXPORTER_DIR, "..", "analysis.schema.json")) as f:
            jsonschema.validate(report, json.load(f))


class PaperSwinLocalBranch(unittest.TestCase):
    """FLatten-Swin's and InLine-Swin's local branches: the exporter writes them with scope
    "window" (InLine's kernels per window), and attnlens-cli's output_with_local_branch equals the
    module's attention_with_local_branch on every window, shifted windows included."""

    def test_branch_outputs_are_the_modules(self):
        u.cli_path()
        torch.manual_seed(5)
        model = u.randomise(PaperSwinLike(), 5).eval()
        path, rec, _ = export(self, model)
        with h5py.File(path, "r") as f:
            dwc = f["layers"]["blocks.0"]["local_branch"]
            self.assertEqual(dwc.attrs["scope"], "window")
            self.assertEqual(dwc["weight"].shape, (16, 5, 5))  # FLatten: per_head, shared
            res = f["layers"]["blocks.2"]["local_branch"]
            self.assertEqual(res.attrs["scope"], "window")
            self.assertEqual(res["weight"].shape, (IMAGES, 4, 32, 3, 3))  # per image and window
        work = u.temp_dir(self)
        for i, (name, preset) in enumerate((("blocks.0", "focused"), ("blocks.1", "inline"),
                                            ("blocks.2", "inline"))):
            o_ref = rec.reference_with_branch(i)
            o_without, _ = rec.reference(i)
            # The branch must matter, or the comparison proves nothing.
            self.assertGreater(float((o_ref - o_without).abs().max() / o_ref.abs().max()), 0.05)
            for b in range(IMAGES):
                for h in range(2):
                    where = f"{name} image {b} head {h}"
                    out = os.path.join(work, f"lb-{name}-{b}-{h}.json")
                    u.run_cli("attention", path, "--image", b, "--layer", name, "--head", h,
                              "--paradigm", preset, "--values", "--local-branch", "-o", out)
                    with open(out) as fh:
                        got = json.load(fh)
                    self.assertEqual(got["local_branch"]["scope"], "window", where)
                    err = u.relative_error(got["output_with_local_branch"], o_ref[b, h].numpy())
                    self.assertLess(err, u.RELATIVE_TOLERANCE, where)
        summary = ax.validate(path)
        self.assertFalse(summary.get("problems"), summary)

    def test_scope_and_per_window_weights_are_checked(self):
        w = ax.DumpWriter(os.path.join(u.temp_dir(self), "x.h5"), grid=(8, 8), dtype="float32")
        try:
            w.declare_layer("win", 0, window_size=(4, 4))
            w.declare_layer("plain", 1)
            q = np.ones((2, 2, 64, 3))
            for layer, branch, text in (
                    ("plain", {"scope": "window"}, "needs a window attention layer"),
                    ("win", {"scope": "windows"}, "scope must be"),
                    ("win", {"scope": "grid", "weight": np.zeros((2, 4, 6, 3, 3))},
                     "needs scope \"window\""),
                    ("win", {"weight": np.zeros((2, 3, 6, 3, 3))}, "must have 4 windows second"),
                    ("win", {"weight": np.full((2, 4, 6, 3, 3), np.nan)},
                     "image 0, window 0, channel 0")):
                full = dict({"kind": "inline_residual", "channels": "all",
                             "weight": np.zeros((6, 3, 3))}, **branch)
                with self.assertRaises(ax.ExportError) as e:
                    w.append_layer(layer, q, q, q, local_branch=full)
                self.assertIn(text, str(e.exception))
        finally:
            w.abort()


class WindowExporterRefuses(unittest.TestCase):
    def writer(self):
        return ax.DumpWriter(os.path.join(u.temp_dir(self), "x.h5"), grid=(8, 8))

    def test_bad_rules(self):
        w = self.writer()
        try:
            for kwargs, text in (
                    ({"window_size": (4, 4), "window_shift": (2, 2)}, "need window_mask"),
                    ({"window_size": (3, 3)}, "does not divide the grid"),
                    ({"window_size": (4, 4), "window_shift": (4, 0), "window_mask": True},
                     "must lie in [0, window size)"),
                    ({"window_shift": (2, 2)}, "need window_size"),
                    ({"window_size": (4, 4), "position_bias": np.zeros((2, 16, 15))},
                     "position_bias must be [heads, 16, 16]"),
                    ({"window_size": (4, 4), "position_bias": np.full((2, 16, 16), np.nan)},
                     "NaN or Inf")):
                with self.assertRaises(ax.ExportError) as e:
                    w.declare_layer("a", 0, **kwargs)
                self.assertIn(text, str(e.exception))
        finally:
            w.abort()

    def test_unknown_shifted_attention_must_say_whether_it_masks(self):
        class OtherWindowAttention(ra.WindowLinearReLUAttention):
            def attnlens_layer_attrs(self):
                return {"attention": "linear_relu"}

        block = ra.SwinTransformerBlock(32, GRID, 2, window_size=4, shift_size=2,
                                        attn_layer=OtherWindowAttention)
        with self.assertRaises(ax.ExportError) as e:
            ax.find_layers(nn.Sequential(block))
        self.assertIn("window_mask", str(e.exception))


if __name__ == "__main__":
    unittest.main()
