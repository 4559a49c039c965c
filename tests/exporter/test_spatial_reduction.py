"""Spatial-reduction attention (format.md 1c, issue 10): a small PVT look-alike (reference_attention.py:
timm pvt_v2's Attention with a strided reduction, its linear variant's adaptive pool, and FLatten-PVT's
focused linear attention) exported through find_layers, then attnlens-cli's attention times v against
the module's own attention output, and its softmax weights against the module's.

The layouts come from the model: the stage's grid from the forward's feat_size, the key grid from the
reduction (strided conv: 8x8 -> 4x4; adaptive pool to 3x3, whose bins do not divide 8; FLatten-PVT's
sr 4: 2x2). Tolerance: max|O_cli - O_ref| <= 1e-5 max|O_ref| per (image, layer, head).
"""

import json
import os
import unittest

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import exporter_test_util as u

ra = u.ra
ax = u.ax
IMAGES = 2
GRID = (8, 8)


class PvtLike(nn.Module):
    """Patch embedding to an 8 x 8 grid, then three attentions with residuals: PVT's strided
    reduction (sr 2), its linear variant (pool to 3 x 3) and FLatten-PVT (sr 4)."""

    def __init__(self, dim=32, heads=2):
        super().__init__()
        self.patch_embed = nn.Conv2d(1, dim, kernel_size=4, stride=4)
        self.attns = nn.ModuleList([
            ra.PvtAttention(dim, heads, sr_ratio=2),
            ra.PvtAttention(dim, heads, linear_attn=True, pool_size=3),
            ra.PvtFocusedLinearAttention(dim, heads, grid=GRID, sr_ratio=4),
        ])
        self.inputs = None

    def forward(self, x):
        x = self.patch_embed(x)
        feat = tuple(x.shape[-2:])
        x = x.flatten(2).transpose(1, 2)
        for i, attn in enumerate(self.attns):
            if self.inputs is not None:
                self.inputs.setdefault(i, []).append(x.detach().clone())
            x = x + (attn(x, feat) if isinstance(attn, ra.PvtAttention) else attn(x, *feat))
        return x.mean(dim=1)


def pvt_like(seed=5):
    torch.manual_seed(seed)
    model = u.randomise(PvtLike(), seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        pe = model.attns[2].positional_encoding
        pe.copy_(0.3 * torch.randn(pe.shape, generator=g))
    return model.eval()


def export(test):
    model = pvt_like()
    model.inputs = {}
    x = torch.randn(IMAGES, 1, 32, 32, generator=torch.Generator().manual_seed(11))
    path = os.path.join(u.temp_dir(test), "pvt.h5")
    with ax.Exporter(model, path, grid=GRID, dtype="float32") as ex:
        ex.run(x[:1])  # two batches: the layers are declared after the first
        ex.run(x[1:])
    return path, model


def reference(model, i):
    attn = model.attns[i]
    x = torch.cat(model.inputs[i])
    with torch.no_grad():
        return attn.attention_parts(x, GRID) if isinstance(attn, ra.PvtAttention) else \
            attn.attention_parts(x)


class TwoStageLike(nn.Module):
    """A hierarchical model as the papers' (issue 10): a Swin stage on 8 x 8 (a softmax block and
    a shifted FLatten-Swin block with its dwc inside windows), a patch merge to 4 x 4 with twice
    the channels and heads, then a PVT stage (PVT's strided reduction to 2 x 2 keys, and
    FLatten-PVT with sr 2)."""

    def __init__(self, dim=16):
        super().__init__()
        self.patch_embed = nn.Conv2d(1, dim, kernel_size=4, stride=4)
        self.swin = nn.ModuleList([
            ra.SwinTransformerBlock(dim, GRID, 2, window_size=4, shift_size=0),
            ra.SwinTransformerBlock(dim, GRID, 2, window_size=4, shift_size=2,
                                    attn_layer=ra.WindowFocusedLinearAttention),
        ])
        self.merge = nn.Conv2d(dim, 2 * dim, kernel_size=2, stride=2)
        self.pvt = nn.ModuleList([
            ra.PvtAttention(2 * dim, 4, sr_ratio=2),
            ra.PvtFocusedLinearAttention(2 * dim, 4, grid=(4, 4), sr_ratio=2),
        ])

    def forward(self, x):
        x = self.patch_embed(x).permute(0, 2, 3, 1)
        for block in self.swin:
            x = block(x)
        x = self.merge(x.permute(0, 3, 1, 2))
        feat = tuple(x.shape[-2:])
        x = x.flatten(2).transpose(1, 2)
        for attn in self.pvt:
            x = x + (attn(x, feat) if isinstance(attn, ra.PvtAttention) else attn(x, *feat))
        return x.mean(dim=1)


class MultiStageExport(unittest.TestCase):
    def test_stages_keep_their_layouts_and_every_command_runs(self):
        u.cli_path()
        torch.manual_seed(2)
        model = u.randomise(TwoStageLike(), 2).eval()
        x = torch.randn(IMAGES, 1, 32, 32, generator=torch.Generator().manual_seed(4))
        path = os.path.join(u.temp_dir(self), "two_stage.h5")
        with ax.Exporter(model, path, grid=GRID, dtype="float32") as ex:
            ex.run(x)
        ax.validate(path)
        with h5py.File(path, "r") as f:
            layers = sorted(f["layers"], key=lambda n: int(f["layers"][n].attrs["index"]))
            self.assertEqual(layers, ["swin.0", "swin.1", "pvt.0", "pvt.1"])
            shapes = [(tuple(f["layers"][n].attrs["grid"]), f["layers"][n]["q"].shape[1],
                       f["layers"][n]["k"].shape[2]) for n in layers]
            self.assertEqual(shapes, [((8, 8), 2, 64), ((8, 8), 2, 64), ((4, 4), 4, 4),
                                      ((4, 4), 4, 4)])
            self.assertIn("local_branch", f["layers"]["swin.1"])
            self.assertEqual(tuple(f["layers"]["pvt.1"].attrs["key_grid"]), (2, 2))
        out = os.path.join(u.temp_dir(self), "report.json")
        u.run_cli("analyze", path, "--paradigms", "softmax,focused,inline", "-o", out)
        with open(out) as f:
            report = json.load(f)
        by_layer = {}
        for r in report["results"]:
            by_layer.setdefault(r["layer"], []).append(r)
        self.assertEqual(sorted(by_layer), sorted(layers))
        for r in by_layer["pvt.0"]:
            self.assertEqual((r["tokens"], r["keys"]), (16, 4))
            self.assertLessEqual(r["rank"]["rank"], 4)
        for r in by_layer["swin.0"]:
            self.assertEqual(len(r["rank"]["window_ranks"]), 4)
        u.run_cli("locality", path, "--paradigms", "softmax", "-o",
                  os.path.join(u.temp_dir(self), "loc.json"))
        # Rollout through the first stage only; across the stages it is refused with a reason.
        u.run_cli("rollout", path, "--image", "0", "--query", "3,3", "--layers", "swin.0,swin.1",
                  "--paradigms", "softmax")
        res = u.run_cli("rollout", path, "--image", "0", "--query", "3,3", expect_ok=False)
        self.assertEqual(res.returncode, 2)
        self.assertIn("rollout", res.stderr)


class OddGridPvt(nn.Module):
    """One PVT attention with a stride-2 reduction on a 7 x 7 grid (28 x 28 images, patch 4): the
    convolution makes 3 x 3 keys from rows and columns 0-5 and drops row and column 6."""

    def __init__(self, dim=16, heads=2):
        super().__init__()
        self.patch_embed = nn.Conv2d(1, dim, kernel_size=4, stride=4)
        self.attn = ra.PvtAttention(dim, heads, sr_ratio=2)

    def forward(self, x):
        x = self.patch_embed(x)
        feat = tuple(x.shape[-2:])
        x = x.flatten(2).transpose(1, 2)
        return (x + self.attn(x, feat)).mean(dim=1)


class SpatialReductionExport(unittest.TestCase):
    def test_a_stride_that_does_not_divide_the_grid_puts_queries_in_their_receptive_fields(self):
        """Issue 49 item 8: the exporter writes key_stride, and attnlens places each query in the key
        cell whose receptive field holds it, as the model's own sr convolution does (found here by
        perturbing one token of the feature map and seeing which key moves), not by the centre rule
        (which would put rows 4 and 5 in other cells)."""
        torch.manual_seed(7)
        model = u.randomise(OddGridPvt(), 7).eval()
        x = torch.randn(IMAGES, 1, 28, 28, generator=torch.Generator().manual_seed(8))
        path = os.path.join(u.temp_dir(self), "odd.h5")
        with ax.Exporter(model, path, grid=(7, 7), dtype="float32") as ex:
            ex.run(x[:1])
            ex.run(x[1:])
        ax.validate(path)
        with h5py.File(path, "r") as f:
            g = f["layers"]["attn"]
            self.assertEqual(tuple(g.attrs["key_grid"]), (3, 3))
            self.assertEqual(tuple(g.attrs["key_stride"]), (2, 2))
        # The model's receptive fields: which key a unit feature at (y, x) changes.
        sr = model.attn.sr
        with torch.no_grad():
            base = sr(torch.zeros(1, sr.in_channels, 7, 7))
            cell = {}
            for y in range(7):
                for xx in range(7):
                    f = torch.zeros(1, sr.in_channels, 7, 7)
                    f[0, :, y, xx] = 1.0
                    moved = ((sr(f) - base).abs().sum(dim=1)[0] > 0).nonzero().tolist()
                    if moved:
                        self.assertEqual(len(moved), 1, (y, xx))
                        cell[(y, xx)] = tuple(moved[0])
        self.assertEqual(cell[(4, 5)], (2, 2))
        self.assertNotIn((6, 0), cell)  # dropped by the convolution
        # attnlens's 1 x 1 local mass of each query is its weight on its key cell.
        out = os.path.join(u.temp_dir(self), "odd.json")
        u.run_cli("analyze", path, "--paradigms", "softmax", "--stats", "local", "--local-k", "1",
                  "--per-query-maps", "--images", "0", "--heads", "0", "-o", out)
        with open(out) as fh:
            record = json.load(fh)["results"][0]
        per_query = record["local"][0]["per_query"]
        attention = np.asarray(u.cli_attention(path, 0, "attn", 0, "softmax", u.temp_dir(self))["attention"])
        for (y, xx), (ky, kx) in cell.items():
            self.assertAlmostEqual(per_query[y * 7 + xx], attention[y * 7 + xx, ky * 3 + kx], places=12,
                                   msg=f"query ({y}, {xx}) in key cell ({ky}, {kx})")
        # Dropped rows and columns take the nearest cell (format.md 1c).
        self.assertAlmostEqual(per_query[6 * 7 + 6], attention[6 * 7 + 6, 2 * 3 + 2], places=12)

    def test_layers_carry_their_key_grids(self):
        path, _ = export(self)
        ax.validate(path)
        with h5py.File(path, "r") as f:
            # The strided convolutions say their stride; the adaptive pool does not have one.
            self.assertEqual(tuple(f["layers"]["attns.0"].attrs["key_stride"]), (2, 2))
            self.assertNotIn("key_stride", f["layers"]["attns.1"].attrs)
            self.assertEqual(tuple(f["layers"]["attns.2"].attrs["key_stride"]), (4, 4))
            for name, key_grid, attention in (("attns.0", (4, 4), "softmax"),
                                              ("attns.1", (3, 3), "softmax"),
                                              ("attns.2", (2, 2), "focused")):
                g = f["layers"][name]
                self.assertEqual(tuple(g.attrs["grid"]), GRID, name)
                self.assertEqual(tuple(g.attrs["key_grid"]), key_grid, name)
                self.assertEqual(g.attrs["attention"], attention, name)
                n = key_grid[0] * key_grid[1]
                self.assertEqual(g["q"].shape, (IMAGES, 2, 64, 16), name)
                self.assertEqual(g["k"].shape, (IMAGES, 2, n, 16), name)
                self.assertEqual(g["v"].shape, (IMAGES, 2, n, 16), name)
            self.assertEqual([int(f["layers"][n].attrs["index"]) for n in ("attns.0", "attns.1",
                                                                          "attns.2")], [0, 1, 2])
            # FLatten-PVT's dwc on V interpolated from the 4 keys to the 64 grid tokens.
            branch = f["layers"]["attns.2"]["local_branch"]
            self.assertEqual(branch.attrs["values"], "interpolated")
            self.assertEqual(branch["weight"].shape, (16, 5, 5))
            self.assertNotIn("local_branch", f["layers"]["attns.0"])

    def test_cli_output_and_weights_are_the_modules(self):
        u.cli_path()
        path, model = export(self)
        work = u.temp_dir(self)
        for i, (name, preset) in enumerate((("attns.0", "softmax"), ("attns.1", "softmax"),
                                            ("attns.2", "focused"))):
            parts = reference(model, i)
            for b in range(IMAGES):
                for h in range(2):
                    where = f"{name} image {b} head {h}"
                    res = u.cli_attention(path, b, name, h, preset, work)
                    self.assertEqual(res["keys"], parts["k"].shape[2], where)
                    self.assertEqual(res["row_status"], ["ok"] * 64, where)
                    err = u.relative_error(res["output"], parts["out"][b, h].numpy())
                    self.assertLess(err, u.RELATIVE_TOLERANCE, where)
                    if "attn" in parts:
                        self.assertLess(u.relative_error(res["attention"],
                                                         parts["attn"][b, h].numpy()),
                                        u.RELATIVE_TOLERANCE, where)
                    # Each row over the n keys: another head's values give another output.
                    other = u.relative_error(np.asarray(res["attention"]) @
                                             parts["v"][b, 1 - h].double().numpy(),
                                             parts["out"][b, h].numpy())
                    self.assertGreater(other, 100 * u.RELATIVE_TOLERANCE, where)

    def test_cli_local_branch_is_flatten_pvts(self):
        """attnlens-cli attention --local-branch: O + M_c V with M_c = DWC P (P the linear
        interpolation from n to N tokens) equals the module's own attention_with_local_branch, which
        runs torch's F.interpolate and Conv2d; with the values taken as if on the grid (no
        interpolation: nearest key cell) it does not."""
        u.cli_path()
        path, model = export(self)
        work = u.temp_dir(self)
        attn = model.attns[2]
        x = torch.cat(model.inputs[2])
        with torch.no_grad():
            ref = attn.attention_with_local_branch(x)
            nearest = attn.attention_parts(x)
            v = nearest["v"]
            b, heads, n, d = v.shape
            up = F.interpolate(v.transpose(-2, -1).reshape(b * heads, d, n), size=64, mode="nearest")
            wrong = nearest["out"] + attn.dwc(up.reshape(b * heads, d, *GRID)).reshape(
                b, heads, d, 64).transpose(-2, -1)
        for img in range(IMAGES):
            for h in range(2):
                where = f"image {img} head {h}"
                out = os.path.join(work, f"b{img}{h}.json")
                u.run_cli("attention", path, "--image", img, "--layer", "attns.2", "--head", h,
                          "--paradigm", "focused", "--values", "--local-branch", "-o", out)
                with open(out) as f:
                    res = json.load(f)
                got = np.asarray(res["output_with_local_branch"], dtype=np.float64)
                self.assertLess(u.relative_error(got, ref[img, h].numpy()), u.RELATIVE_TOLERANCE, where)
                self.assertGreater(u.relative_error(got, wrong[img, h].numpy()),
                                   100 * u.RELATIVE_TOLERANCE, where)

    def test_writer_refuses_inconsistent_reduced_layers(self):
        path = os.path.join(u.temp_dir(self), "bad.h5")
        w = ax.DumpWriter(path, GRID, 0, dtype="float32")
        w.declare_layer("a", 0, key_grid=(2, 2))
        q = np.zeros((1, 1, 64, 4), np.float32)
        with self.assertRaisesRegex(ax.ExportError, "n = key_prefix_tokens 0 \\+ key_grid 2x2 = 4"):
            w.append_layer("a", q, np.zeros((1, 1, 9, 4), np.float32))
        with self.assertRaisesRegex(ax.ExportError, "must share B, heads and tokens with k"):
            w.append_layer("a", q, np.zeros((1, 1, 4, 4), np.float32), np.zeros((1, 1, 64, 4)))
        with self.assertRaisesRegex(ax.ExportError, "must say values=\"interpolated\""):
            w.append_layer("a", q, np.zeros((1, 1, 4, 4), np.float32), np.zeros((1, 1, 4, 4)),
                           {"kind": "dwc", "channels": "per_head", "weight": np.zeros((4, 3, 3))})
        with self.assertRaisesRegex(ax.ExportError, "window_size and key_grid"):
            w.declare_layer("b", 1, key_grid=(2, 2), window_size=(4, 4), prefix_tokens=0)
        w.abort()


if __name__ == "__main__":
    unittest.main()
