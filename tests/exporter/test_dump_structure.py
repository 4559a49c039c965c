"""The written dump follows attnlens.dump v1, and the exporter's hooks record the right tensors."""

import os
import subprocess
import sys
import textwrap
import unittest

import h5py
import numpy as np
import torch
import torch.nn as nn

import exporter_test_util as u

ax, ra = u.ax, u.ra


def float16_close(test, actual, expected, what):
    # float16 keeps 11 significant bits: relative spacing 2^-10 near the largest values.
    expected = np.asarray(expected, dtype=np.float64)
    err = np.abs(np.asarray(actual, dtype=np.float64) - expected).max()
    test.assertLessEqual(err, 2.0 ** -10 * np.abs(expected).max(), what)


class Layout(unittest.TestCase):
    def test_root_layers_images_labels(self):
        model = u.small_vit("softmax", seed=3, heads=2, embed_dim=48)
        x = u.random_images(3, seed=1)
        labels = np.array([7, 0, 3])
        path = os.path.join(u.temp_dir(self), "s.h5")
        with u.AttentionInputs(model) as rec, \
                ax.Exporter(model, path, grid=(14, 14), prefix_tokens=1, model_name="tiny") as ex:
            ex.run(x[:2], labels=labels[:2], images=ax.to_uint8(x[:2].clamp(0, 1)))
            self.assertEqual(len(ex.recorder.captured), 0, "a batch must not stay in memory")
            ex.run(x[2:], labels=labels[2:], images=ax.to_uint8(x[2:].clamp(0, 1)))
        with h5py.File(path, "r") as f:
            a = f.attrs
            self.assertEqual(a["format"], "attnlens.dump")
            self.assertTrue(np.issubdtype(np.asarray(a["format_version"]).dtype, np.integer))
            self.assertEqual(int(a["format_version"]), 1)
            self.assertEqual(a["grid"].tolist(), [14, 14])
            self.assertTrue(np.issubdtype(a["grid"].dtype, np.integer))
            self.assertEqual(int(a["prefix_tokens"]), 1)
            self.assertEqual(a["model"], "tiny")
            self.assertEqual(sorted(f["layers"]), ["blocks.0.attn", "blocks.1.attn"])
            for i in range(2):
                g = f["layers"][f"blocks.{i}.attn"]
                self.assertEqual(int(g.attrs["index"]), i)
                self.assertEqual(g.attrs["attention"], "softmax")
                self.assertAlmostEqual(float(g.attrs["scale"]), 24 ** -0.5, places=12)
                for t in ("q", "k", "v"):
                    self.assertEqual(g[t].shape, (3, 2, 197, 24))
                    self.assertEqual(g[t].dtype, np.float16)
                    self.assertEqual(g[t].chunks, (1, 2, 197, 24))
                with torch.no_grad():
                    parts = model.blocks[i].attn.attention_parts(torch.cat(rec.inputs[i]))
                for t in ("q", "k", "v"):
                    float16_close(self, g[t][()], parts[t].numpy(), f"layer {i} {t}")
            self.assertEqual(f["images"].dtype, np.uint8)
            self.assertEqual(f["images"].shape, (3, 28, 28))
            np.testing.assert_array_equal(f["images"][()], ax.to_uint8(x.clamp(0, 1)))
            np.testing.assert_array_equal(f["labels"][()], labels)
        summary = ax.validate(path)
        self.assertEqual(summary["images"], 3)
        self.assertEqual([l["name"] for l in summary["layers"]], ["blocks.0.attn",
                                                                   "blocks.1.attn"])

    def test_kernel_applied_marks_the_export_point(self):
        expected = {"linear_relu": 0, "focused": 1, "inline": 0, "mala": 0}
        for paradigm, flag in expected.items():
            model = u.small_vit(paradigm, seed=2, depth=1)
            path = os.path.join(u.temp_dir(self), f"{paradigm}.h5")
            with ax.Exporter(model, path, grid=(14, 14), prefix_tokens=1, dtype="float32") as ex:
                ex.run(u.random_images(1, seed=2))
            with h5py.File(path, "r") as f:
                g = f["layers"]["blocks.0.attn"]
                self.assertEqual(int(g.attrs["kernel_applied"]), flag, paradigm)
                q = g["q"][()]
            if flag:  # FLatten's phi is positive everywhere (ReLU + 1e-6, then f_p)
                self.assertGreater(q.min(), 0.0)
            else:     # raw projections take both signs
                self.assertLess(q.min(), 0.0, paradigm)

    def test_rgb_images_and_float64(self):
        path = os.path.join(u.temp_dir(self), "rgb.h5")
        rgb = np.random.default_rng(0).integers(0, 256, size=(2, 8, 6, 3), dtype=np.uint8)
        q = np.random.default_rng(1).standard_normal((2, 1, 5, 4))
        with ax.DumpWriter(path, grid=(2, 2), prefix_tokens=1, dtype="float64") as w:
            w.declare_layer("only", 0, attention="other", kernel_applied=False)
            w.append_layer("only", q, q)
            w.append_images(rgb)
        with h5py.File(path, "r") as f:
            np.testing.assert_array_equal(f["images"][()], rgb)
            np.testing.assert_array_equal(f["layers/only/q"][()], q)
            self.assertNotIn("v", f["layers/only"])
            self.assertEqual(int(f["layers/only"].attrs["kernel_applied"]), 0)


class Hooks(unittest.TestCase):
    def test_fused_attention_gives_the_same_dump(self):
        # The fused path never materialises the weights; the export must not depend on them.
        model = u.small_vit("softmax", seed=4, depth=2)
        x = u.random_images(2, seed=4)
        dumps, outputs = [], []
        for fused in (False, True):
            for blk in model.blocks:
                blk.attn.fused_attn = fused
            path = os.path.join(u.temp_dir(self), f"fused{fused}.h5")
            with ax.Exporter(model, path, grid=(14, 14), prefix_tokens=1, dtype="float32") as ex:
                outputs.append(ex.run(x))
            with h5py.File(path, "r") as f:
                dumps.append({n: {t: f["layers"][n][t][()] for t in "qkv"} for n in f["layers"]})
        for name in dumps[0]:
            for t in "qkv":
                np.testing.assert_array_equal(dumps[0][name][t], dumps[1][name][t])
        torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-5, atol=1e-6)

    def test_timm_qk_norm_is_applied(self):
        attn = ra.Attention(32, num_heads=4, qk_norm=True)
        with torch.no_grad():
            attn.q_norm.weight.uniform_(0.5, 2.0)
            attn.k_norm.bias.uniform_(-1.0, 1.0)
        model = nn.Sequential(attn).eval()
        x = torch.randn(2, 5, 32)
        path = os.path.join(u.temp_dir(self), "qknorm.h5")
        with ax.Exporter(model, path, grid=(2, 2), prefix_tokens=1, dtype="float32") as ex:
            ex.run(x)
        with torch.no_grad():
            parts = attn.attention_parts(x)
        with h5py.File(path, "r") as f:
            g = f["layers"]["0"]
            np.testing.assert_allclose(g["q"][()], parts["q"].numpy(), rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(g["k"][()], parts["k"].numpy(), rtol=1e-6, atol=1e-6)

    def test_any_module_through_a_layer_spec(self):
        # nn.MultiheadAttention has no `qkv` Linear: register it with an extract function and
        # check the stored q/k against the weights the module itself returns.
        torch.manual_seed(0)
        mha = nn.MultiheadAttention(16, 2, batch_first=True).eval()
        with torch.no_grad():
            mha.in_proj_weight.mul_(4.0)

        def extract(module, inputs, _output):
            x = inputs[0]
            b, n, c = x.shape
            qkv = nn.functional.linear(x, module.in_proj_weight, module.in_proj_bias)
            heads = lambda t: t.reshape(b, n, module.num_heads, -1).transpose(1, 2)
            return tuple(heads(t) for t in qkv.chunk(3, dim=-1))

        class Wrap(nn.Module):
            def __init__(self):
                super().__init__()
                self.mha = mha

            def forward(self, x):
                return self.mha(x, x, x, need_weights=False)[0]

        model = Wrap().eval()
        spec = ax.LayerSpec(mha, extract, name="mha", attention="softmax", scale=8 ** -0.5)
        x = torch.randn(2, 10, 16)
        path = os.path.join(u.temp_dir(self), "mha.h5")
        with ax.Exporter(model, path, grid=(3, 3), prefix_tokens=1, layers=[spec],
                         dtype="float32") as ex:
            ex.run(x)
        with torch.no_grad():
            _, weights = mha(x, x, x, need_weights=True, average_attn_weights=False)
        with h5py.File(path, "r") as f:
            q, k = f["layers/mha/q"][()].astype(np.float64), f["layers/mha/k"][()].astype(
                np.float64)
            scale = float(f["layers/mha"].attrs["scale"])
        logits = scale * q @ k.transpose(0, 1, 3, 2)
        a = np.exp(logits - logits.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        self.assertLess(u.relative_error(a, weights.numpy()), u.RELATIVE_TOLERANCE)
        self.assertGreater(weights.max().item(), 0.3)  # not near-uniform: a real check
        if os.environ.get("ATTNLENS_CLI"):
            res = u.cli_attention(path, 1, "mha", 1, "softmax", u.temp_dir(self))
            self.assertLess(u.relative_error(res["attention"], weights[1, 1].numpy()),
                            u.RELATIVE_TOLERANCE)


class BadInput(unittest.TestCase):
    def writer(self):
        w = ax.DumpWriter(os.path.join(u.temp_dir(self), "bad.h5"), grid=(14, 14),
                          prefix_tokens=1)
        self.addCleanup(w.abort)
        w.declare_layer("l", 0)
        return w

    def test_token_count_mismatch(self):
        q = np.zeros((1, 1, 10, 4))
        with self.assertRaisesRegex(ax.ExportError, r"layer l: N = 10 tokens but prefix_tokens 1 "
                                                    r"\+ grid 14x14 = 197"):
            self.writer().append_layer("l", q, q)

    def test_q_k_shape_mismatch(self):
        with self.assertRaisesRegex(ax.ExportError, r"layer l: q \(1, 1, 197, 4\) and k "
                                                    r"\(1, 1, 197, 5\) differ"):
            self.writer().append_layer("l", np.zeros((1, 1, 197, 4)), np.zeros((1, 1, 197, 5)))

    def test_non_finite(self):
        q = np.zeros((1, 1, 197, 4))
        q[0, 0, 3, 1] = np.nan
        with self.assertRaisesRegex(ax.ExportError, r"layer l: q holds NaN or Inf \(first at image 0, "
                                                    r"head 0, token 3, channel 1: nan\)"):
            self.writer().append_layer("l", q, np.zeros_like(q))

    def test_non_finite_names_the_image_and_leaves_the_layer_as_it_was(self):
        w = self.writer()
        good = np.zeros((2, 2, 197, 4))
        w.append_layer("l", good, good, good)
        v = np.zeros((3, 2, 197, 4))
        v[2, 1, 5, 0] = np.inf
        with self.assertRaisesRegex(ax.ExportError, r"layer l: v holds NaN or Inf \(first at image 4, "
                                                    r"head 1, token 5, channel 0: inf\)"):
            w.append_layer("l", np.zeros_like(v), np.zeros_like(v), v)
        # The refused batch wrote nothing: q, k and v still hold the first two images.
        layer = w._file["layers"]["l"]
        self.assertEqual([layer[k].shape[0] for k in ("q", "k", "v")], [2, 2, 2])
        w.append_layer("l", good, good, good)
        self.assertEqual([layer[k].shape[0] for k in ("q", "k", "v")], [4, 4, 4])

    def test_float16_overflow(self):
        q = np.full((1, 1, 197, 4), 7e4)
        with self.assertRaisesRegex(ax.ExportError, "beyond float16's 65504; export with dtype "
                                                    "float32"):
            self.writer().append_layer("l", q, q)

    def test_failed_export_leaves_no_file(self):
        d = u.temp_dir(self)
        path = os.path.join(d, "never.h5")
        with self.assertRaises(RuntimeError):
            with ax.DumpWriter(path, grid=(1, 1)) as w:
                w.declare_layer("l", 0)
                raise RuntimeError("interrupted")
        self.assertEqual(os.listdir(d), [])

    def test_layers_with_different_image_counts(self):
        path = os.path.join(u.temp_dir(self), "uneven.h5")
        w = ax.DumpWriter(path, grid=(1, 1))
        w.declare_layer("a", 0)
        w.declare_layer("b", 1)
        w.append_layer("a", np.zeros((2, 1, 1, 2)), np.zeros((2, 1, 1, 2)))
        w.append_layer("b", np.zeros((1, 1, 1, 2)), np.zeros((1, 1, 1, 2)))
        with self.assertRaisesRegex(ax.ExportError, "layers hold different numbers of images"):
            w.close()
        self.assertFalse(os.path.exists(path))

    def test_validate_names_the_problem(self):
        path = os.path.join(u.temp_dir(self), "v2.h5")
        with h5py.File(path, "w") as f:
            f.attrs["format"] = "attnlens.dump"
            f.attrs["format_version"] = 2
            f.attrs["grid"] = np.array([1, 1])
            f.create_group("layers/x").create_dataset("q", data=np.zeros((1, 1, 1, 2)))
        with self.assertRaisesRegex(ax.ExportError, r"format_version is 2, expected integer 1.*"
                                                    r"/layers/x: missing q or k"):
            ax.validate(path)


class CommandLine(unittest.TestCase):
    def run_tool(self, *args, cwd):
        return subprocess.run([sys.executable, os.path.join(u.EXPORTER_DIR, "attnlens_export.py"),
                               *args], capture_output=True, text=True, cwd=cwd, timeout=120)

    def test_export_and_validate(self):
        d = u.temp_dir(self)
        with open(os.path.join(d, "mymodel.py"), "w") as f:
            f.write(textwrap.dedent(f"""
                import sys
                sys.path.insert(0, {u.EXPORTER_DIR!r})
                import reference_attention as ra
                def build():
                    return ra.VisionTransformer("inline", embed_dim=24, depth=2, num_heads=2)
            """))
        images = np.random.default_rng(0).integers(0, 256, size=(5, 28, 28), dtype=np.uint8)
        np.savez(os.path.join(d, "imgs.npz"), images=images, labels=np.arange(5))
        proc = self.run_tool("export", "--model", "mymodel:build", "--input", "imgs.npz",
                             "--grid", "14", "14", "--prefix-tokens", "1", "--batch-size", "2",
                             "--threads", "1", "-o", "out.h5", cwd=d)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("blocks.1.attn: heads 2, N 197, d 12, float16, v yes, attention inline",
                      proc.stdout)
        with h5py.File(os.path.join(d, "out.h5"), "r") as f:
            np.testing.assert_array_equal(f["images"][()], images)
            np.testing.assert_array_equal(f["labels"][()], np.arange(5))
        proc = self.run_tool("validate", "out.h5", cwd=d)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("5 images, grid 14x14, prefix 1", proc.stdout)

    def test_bad_model_spec_is_a_clear_error(self):
        d = u.temp_dir(self)
        np.save(os.path.join(d, "x.npy"), np.zeros((1, 28, 28), dtype=np.uint8))
        proc = self.run_tool("export", "--model", "nosuchmodule:build", "--input", "x.npy",
                             "--grid", "14", "14", "-o", "o.h5", cwd=d)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("--model: cannot import 'nosuchmodule'", proc.stderr)
        self.assertFalse(os.path.exists(os.path.join(d, "o.h5")))

    def test_cli_inspects_the_export(self):
        u.cli_path()
        model = u.small_vit("mala", seed=1, depth=2)
        path = os.path.join(u.temp_dir(self), "m.h5")
        with ax.Exporter(model, path, grid=(14, 14), prefix_tokens=1) as ex:
            ex.run(u.random_images(2, seed=0), labels=[1, 2])
        proc = u.run_cli("inspect", path)
        for name in ("blocks.0.attn", "blocks.1.attn"):
            self.assertIn(name, proc.stdout)


if __name__ == "__main__":
    unittest.main()
