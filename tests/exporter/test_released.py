"""The papers' released attention classes exported with zero configuration (issue 24): look-alikes
of the released classes without protocol methods (released_lookalikes.py) are recognised by class
name and structure, pass the exporter's recomputation check, and open in attnlens-cli with the
module's own attention; a module that merely looks like a known class, an unknown one and CSwin's
stripes are refused with a message."""

import json
import os
import unittest

import h5py
import numpy as np
import torch

import exporter_test_util as u
import reference_attention as ra
import released_lookalikes as rl

ax = u.ax


def export(test, model, x, grid, prefix=0, name="m.h5", **kwargs):
    path = os.path.join(u.temp_dir(test), name)
    model.eval()
    with ax.Exporter(model, path, grid=grid, prefix_tokens=prefix, dtype="float32", **kwargs) as ex:
        ex.run(x[:1])
        ex.run(x[1:])
    return path, ex


def randomise(model, seed, std=0.3):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * std)
    return model


class ZeroConfiguration(unittest.TestCase):
    def assert_checked(self, ex, layers):
        self.assertEqual(sorted(ex.check_misses), sorted(layers))
        self.assertEqual(ex.unchecked_layers, [])
        for name, miss in ex.check_misses.items():
            self.assertLess(miss, 1e-5, name)
            self.assertGreater(miss, 0.0, name)  # float32 forward against float64: never exact

    def test_flatten_swin(self):
        torch.manual_seed(1)
        model = torch.nn.Sequential(
            ra_block(rl.FocusedLinearAttention, shift=0), ra_block(rl.FocusedLinearAttention, shift=2))
        randomise(model, 2)
        path, ex = export(self, model, torch.randn(2, 8, 8, 16), (8, 8))
        self.assert_checked(ex, ["0", "1"])
        with h5py.File(path, "r") as f:
            g = f["layers/1"]
            self.assertEqual(g.attrs["attention"], "focused")
            self.assertEqual(int(g.attrs["kernel_applied"]), 1)
            self.assertFalse(bool(g.attrs["window_mask"]))
            self.assertEqual(list(g.attrs["window_shift"]), [2, 2])
            self.assertEqual(g["local_branch"].attrs["kind"], "dwc")
            self.assertEqual(g["local_branch"].attrs["scope"], "window")
            self.assertLess(float(g.attrs["attnlens_export_check"]), 1e-5)

    def test_flatten_pvt(self):
        torch.manual_seed(3)
        attn = randomise(rl.FocusedLinearAttentionPVT(16, num_patches=64, num_heads=2, sr_ratio=2), 4)
        model = PvtStage(attn, (8, 8))
        path, ex = export(self, model, torch.randn(2, 64, 16), (8, 8))
        self.assert_checked(ex, ["attn"])
        with h5py.File(path, "r") as f:
            g = f["layers/attn"]
            self.assertEqual(list(g.attrs["key_grid"]), [4, 4])
            self.assertEqual(g["local_branch"].attrs["values"], "interpolated")
            self.assertEqual(g.attrs["attention"], "focused")

    def test_inline_deit(self):
        model = randomise(rl.InLineDeiT(), 5)
        path, ex = export(self, model, torch.randn(2, 1, 28, 28), (7, 7), prefix=1)
        self.assert_checked(ex, ["blocks.0.attn", "blocks.1.attn"])
        with h5py.File(path, "r") as f:
            g = f["layers/blocks.0.attn"]
            self.assertEqual(g.attrs["attention"], "inline")
            self.assertEqual(g["local_branch"].attrs["kind"], "inline_residual")
            self.assertEqual(g["local_branch/weight"].shape, (2, 32, 3, 3))  # per image

    def test_cswin_stripes_reproduce_the_modules_attention(self):
        u.cli_path()
        torch.manual_seed(9)
        model = randomise(torch.nn.Sequential(rl.CSWinBlock(16, 8, num_heads=4, split_size=2),
                                              rl.CSWinBlock(16, 8, num_heads=4, split_size=8)), 10)
        x = torch.randn(2, 64, 16)
        path, ex = export(self, model, x, (8, 8))
        self.assert_checked(ex, ["0", "1"])
        with h5py.File(path, "r") as f:
            g = f["layers/0"]
            self.assertEqual(list(g.attrs["head_windows"]), [2, 8, 2, 2, 2, 8])
            self.assertEqual(g["local_branch"].attrs["kind"], "lepe")
            self.assertEqual(g["local_branch"].attrs["scope"], "window")
            self.assertNotIn("head_windows", f["layers/1"].attrs)  # the last stage: one window
        ax.validate(path)  # the exporter's own check of the format agrees
        info = json.loads(u.run_cli("inspect", path, "--json").stdout)
        self.assertEqual(info["layers"][0]["window"]["head_windows"],
                         [{"heads": 2, "size": [8, 2], "windows": 4},
                          {"heads": 2, "size": [2, 8], "windows": 4}])
        # The module's own softmax weights per stripe, placed on the grid, against attnlens-cli.
        block = model[0]
        with torch.no_grad():
            q, k, _ = block.qkv(block.norm1(x)).reshape(2, -1, 3, 16).permute(2, 0, 1, 3)
        work = u.temp_dir(self)
        for half, attn in enumerate(block.attns):
            ch = slice(8 * half, 8 * half + 8)
            with torch.no_grad():
                w = attn.attention(q[..., ch], k[..., ch]).double()  # [B * 4, 2, 16, 16]
            order = ra.cswin_img2windows(torch.arange(64.0).reshape(1, 64, 1), attn.H_sp, attn.W_sp, 8,
                                    8).reshape(4, 16).long()
            for image in range(2):
                for local in range(2):
                    want = np.zeros((64, 64))
                    for win in range(4):
                        t = order[win].numpy()
                        want[np.ix_(t, t)] = w[image * 4 + win, local].numpy()
                    head = 2 * half + local
                    res = u.cli_attention(path, image, "0", head, "softmax", work)
                    err = u.relative_error(np.asarray(res["attention"]), want)
                    self.assertLess(err, 1e-5, f"image {image} head {head}")

    def test_mala_with_rope_reproduces_the_modules_attention(self):
        u.cli_path()
        model = randomise(rl.MALAStage(), 6, std=0.2)
        x = torch.randn(2, 1, 24, 24)
        path, ex = export(self, model, x, (6, 6))
        self.assert_checked(ex, ["blocks.0.attn", "blocks.1.attn"])
        with h5py.File(path, "r") as f:
            g = f["layers/blocks.0.attn"]
            self.assertEqual(g.attrs["attention"], "mala")
            self.assertEqual(g["q_normaliser"].shape, g["q"].shape)
            self.assertEqual(g["output_gate"].shape, g["v"].shape)
            self.assertEqual(g["local_branch"].attrs["kind"], "lepe")
        # The module's own A_ij = c (1 + 1/(z_i + eps)) R(phi q_i).R(phi k_j) - z_i/n with z from
        # the unrotated features, against attnlens-cli's mala on the dump.
        attn = model.blocks[0]["attn"]
        with torch.no_grad():
            feats = model.stem(x)
            sin, cos = u.ra.mala_rope_tables((6, 6), 0, attn.head_dim)
            _, _, _, _, z, qr, kr = attn.parts(feats, sin, cos)
        n, c = 36, attn.scale / 36
        a_module = (c * (1 + 1 / (z.double() + 1e-6)) * (qr.double() @ kr.double().transpose(-2, -1))
                    - z.double() / n).numpy()
        work = u.temp_dir(self)
        worst = 0.0
        for image in range(2):
            for head in range(2):
                res = u.cli_attention(path, image, "blocks.0.attn", head, "mala", work)
                err = u.relative_error(np.asarray(res["attention"]), a_module[image, head])
                worst = max(worst, err)
                self.assertLess(err, 1e-5, f"image {image} head {head}")
                # Without the normaliser features (z from the rotated q/k) it is far off.
                wrong = u.relative_error(mala_from_rotated(qr.double()[image, head],
                                                           kr.double()[image, head]).numpy(),
                                         a_module[image, head])
                self.assertGreater(wrong, 100 * 1e-5)
        self.assertGreater(worst, 0.0)


class Refusals(unittest.TestCase):
    def test_a_look_alike_that_computes_something_else_is_not_written(self):
        model = randomise(rl.InLineDeiT(skip_residual=True), 7)
        path = os.path.join(u.temp_dir(self), "bad.h5")
        with self.assertRaises(ax.ExportError) as cm:
            with ax.Exporter(model, path, grid=(7, 7), prefix_tokens=1, dtype="float32") as ex:
                ex.run(torch.randn(1, 1, 28, 28))
        msg = str(cm.exception)
        self.assertIn("layer blocks.0.attn", msg)
        self.assertIn("inline_deit.py InLineAttention", msg)
        self.assertIn("misses the module's own by", msg)
        self.assertFalse(os.path.exists(path))

    def test_unknown_module_names_the_protocol(self):
        model = torch.nn.Sequential(rl.Unknown())
        with self.assertRaises(ax.ExportError) as cm:
            ax.Exporter(model, os.path.join(u.temp_dir(self), "u.h5"), grid=(2, 2))
        msg = str(cm.exception)
        self.assertIn("class Unknown", msg)
        self.assertIn("attnlens_qkv", msg)
        self.assertIn("def attnlens_layer_attrs", msg)

    def test_cswin_block_of_unknown_attentions_is_refused(self):
        model = torch.nn.Sequential(rl.CSWinStructure())
        with self.assertRaises(ax.ExportError) as cm:
            ax.Exporter(model, os.path.join(u.temp_dir(self), "c.h5"), grid=(4, 4))
        self.assertIn("a CSwin block whose attentions are ['Identity']", str(cm.exception))

    def test_protocol_look_alike_with_a_false_protocol_is_caught(self):
        # A protocol module whose attnlens_qkv leaves out what its forward does (the gate).
        attn = u.ra.MALAAttention(16, num_heads=2, grid=(4, 4), prefix_tokens=0)
        attn.attnlens_qkv = lambda x: u.ra._split_qkv(attn.qkv(x), 2)
        model = torch.nn.Sequential(randomise(attn, 8))
        with self.assertRaises(ax.ExportError) as cm:
            export(self, model, torch.randn(2, 16, 16), (4, 4))
        self.assertIn("MALAAttention", str(cm.exception))


class NormaliserFeaturesOnOpen(unittest.TestCase):
    """format.md 1d: a broken pair or shape is refused on open with the dataset named."""

    def write(self, **datasets):
        path = os.path.join(u.temp_dir(self), "n.h5")
        rng = np.random.default_rng(0)
        with h5py.File(path, "w") as f:
            f.attrs["format"] = "attnlens.dump"
            f.attrs["format_version"] = np.int64(1)
            f.attrs["grid"] = np.array([2, 2], dtype=np.int64)
            g = f.create_group("layers/l0")
            g.attrs["attention"] = "mala"
            for key in ("q", "k", "v"):
                g.create_dataset(key, data=rng.standard_normal((1, 1, 4, 4)).astype(np.float32))
            for key, shape in datasets.items():
                g.create_dataset(key, data=rng.standard_normal(shape).astype(np.float32))
        return path

    def test_refusals(self):
        u.cli_path()
        for datasets, words in (({"q_normaliser": (1, 1, 4, 3)}, "q_normaliser but no k_normaliser"),
                                ({"q_normaliser": (1, 1, 4, 3), "k_normaliser": (1, 1, 4, 2)},
                                 "features per token"),
                                ({"q_normaliser": (1, 1, 3, 3), "k_normaliser": (1, 1, 4, 3)},
                                 "q_normaliser has shape"),
                                ({"output_gate": (1, 1, 4, 5)}, "output_gate has shape")):
            proc = u.run_cli("inspect", self.write(**datasets), expect_ok=False)
            self.assertEqual(proc.returncode, 3, proc.stderr)
            self.assertIn(words, proc.stderr)
        ok = self.write(q_normaliser=(1, 1, 4, 3), k_normaliser=(1, 1, 4, 3), output_gate=(1, 1, 4, 4))
        self.assertEqual(u.run_cli("inspect", ok).returncode, 0)


def mala_from_rotated(qr, kr):
    """MALA's A with z from the rotated features, as one q/k pair without 1d would give."""
    n, d = kr.shape
    c = 1.0 / (d ** 0.5 * n)
    z = c * qr @ kr.sum(dim=0, keepdim=True).T
    return c * (1 + 1 / (z + 1e-6)) * (qr @ kr.T) - z / n


def ra_block(attn_layer, shift):
    return u.ra.SwinTransformerBlock(16, (8, 8), num_heads=2, window_size=4, shift_size=shift,
                                     attn_layer=attn_layer)


class PvtStage(torch.nn.Module):
    def __init__(self, attn, grid):
        super().__init__()
        self.attn, self.grid = attn, grid

    def forward(self, x):
        return x + self.attn(x, *self.grid)


if __name__ == "__main__":
    unittest.main()
