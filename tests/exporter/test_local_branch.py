"""The local branch (format.md, section 1a): export, attnlens-cli's reading of it, and its errors.

  Focused, InLine, MALA   for each paper's module (FLatten's DWC: per_head, shared, bias; InLine's
                          residual: all, per image [B, C, 3, 3], no bias; MALA's LePE: all, shared,
                          bias): the dump holds the module's own branch, and
                          `attnlens-cli attention --values --local-branch` gives, for every image,
                          head and channel, the module's attention + local branch before the output
                          projection (attention_with_local_branch) to 1e-5 relative: a float64
                          export on a 5x6 grid (3 heads of d = 16) and a float32 export of a
                          2-layer ViT on 14x14 (DeiT-T's token layout), both in two batches.
  LocalMatrix             `--channel C`: local_matrix is exactly the matrix of torch's conv2d
                          (zero padding, stride 1) on the layer's grid, built column by column from
                          one-hot images, for non-square grids and kernels, a 5x5 kernel on a 3x4
                          grid, 1x1 kernels, per_head and all; no entry wraps from one grid row to
                          the next (as a 1-D convolution over the flattened tokens would); prefix
                          rows and columns are zero; equivalent_matrix = attention + local_matrix;
                          output_with_local_branch - output = conv2d(V) + bias on random V.
  Synth                   `attnlens-cli synth --local-branch` writes what format.md 1a says, and
                          the CLI's output_with_local_branch on it matches torch's conv2d.
  ExporterChecks          the exporter refuses bad branches (even kernel, wrong C, NaN, ...) with
                          an ExportError naming the layer, before anything of the batch is written;
                          validate() checks the branch.
  ReaderRefuses           dumps written with h5py that break section 1a: inspect and analyze exit 3
                          with the message of format.md section 5 naming the layer.
"""

import json
import os
import subprocess
import sys
import unittest

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import exporter_test_util as u

ax, ra = u.ax, u.ra

# The worst relative error of each check, printed at the end (the numbers reported for the tests).
WORST = {}


def note(what, err):
    WORST[what] = max(WORST.get(what, 0.0), err)


def tearDownModule():
    if WORST:
        print("\nworst relative errors:", file=sys.stderr)
        for what, err in sorted(WORST.items()):
            print(f"  {what}: {err:.3g}", file=sys.stderr)


def randomise_module(module, seed):
    """Non-trivial attention and a local branch that visibly changes the output."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name in ("qkv.weight", "gate.weight"):
                p.copy_(torch.randn(p.shape, generator=g) * 1.5 / p.shape[1] ** 0.5)
            elif name in ("qkv.bias", "dwc.bias", "lepe.bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
            elif name in ("positional_encoding", "scale"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            elif name in ("dwc.weight", "lepe.weight"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.4)
            elif name == "residual.2.weight":
                p.mul_(4.0)
    return module


def token_inputs(count, n, dim, seed, dtype=torch.float64):
    """Tokens with a per-image offset, so that InLine's mean token (its residual's input) is not
    near zero."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(count, n, dim, generator=g) + torch.randn(count, 1, dim, generator=g)
    return x.to(dtype)


def branch_effect(with_branch, without):
    """max |O + branch - O| / max |O + branch|: the check is vacuous when the branch is tiny."""
    return float((with_branch - without).abs().max() / with_branch.abs().max())


def cli_branch(path, image, layer, head, paradigm, workdir, channel=None):
    out = os.path.join(workdir, f"lb-{image}-{layer}-{head}-{channel}.json")
    args = ["attention", path, "--image", image, "--layer", layer, "--head", head, "--paradigm",
            paradigm, "--values", "--local-branch", "-o", out]
    if channel is not None:
        args[-2:-2] = ["--channel", channel]
    u.run_cli(*args)
    with open(out) as f:
        return json.load(f)


class PaperModule:
    """Mixin: one paper's module through the exporter and attnlens-cli."""
    paradigm = None
    kind = channels = None
    per_image = has_bias = None

    def expected_weights(self, module, x):
        return module.attnlens_local_branch(x)

    def check_dump_branch(self, path, layer, module, inputs):
        """The dump's branch is the module's, as written by format.md 1a."""
        with h5py.File(path, "r") as f:
            g = f["layers"][layer]["local_branch"]
            self.assertEqual(g.attrs["kind"], self.kind)
            self.assertEqual(g.attrs["channels"], self.channels)
            self.assertEqual(sorted(g.attrs), ["channels", "kind"])
            self.assertEqual(sorted(g), ["bias", "weight"] if self.has_bias else ["weight"])
            weight = g["weight"][()]
            bias = g["bias"][()] if self.has_bias else None
            v = f["layers"][layer]["v"]
            heads, dv = v.shape[1], v.shape[3]
        c = dv if self.channels == "per_head" else heads * dv
        with torch.no_grad():
            if self.per_image:
                expected = torch.cat([module.attnlens_local_branch(x)["weight"].detach()
                                      for x in inputs])
                self.assertEqual(weight.shape, (sum(len(x) for x in inputs), c, 3, 3))
            else:
                br = module.attnlens_local_branch(None)
                expected = br["weight"].detach()
                self.assertEqual(weight.ndim, 3)
                self.assertEqual(weight.shape[0], c)
                np.testing.assert_array_equal(bias, br["bias"].detach().numpy().astype(bias.dtype))
        np.testing.assert_array_equal(weight, expected.numpy().astype(weight.dtype))
        summary = ax.validate(path)
        described = {l["name"]: l["local_branch"] for l in summary["layers"]}[layer]
        self.assertEqual(described["kind"], self.kind)
        self.assertEqual(described["per_image"], self.per_image)

    def compare_heads(self, path, layer, reference, without, what, images):
        """CLI output_with_local_branch against the module's, every image and head."""
        work = u.temp_dir(self)
        heads = reference.shape[1]
        for b in range(images):
            for h in range(heads):
                res = cli_branch(path, b, layer, h, u.CLI_PRESET[self.paradigm], work)
                where = f"{self.paradigm} {what} {layer} image {b} head {h}"
                self.assertEqual(res["local_branch"]["kind"], self.kind, where)
                self.assertEqual(res["local_branch"]["channels"], self.channels, where)
                err = u.relative_error(res["output_with_local_branch"], reference[b, h].numpy())
                note(f"{self.paradigm} {what}: output_with_local_branch", err)
                self.assertLess(err, u.RELATIVE_TOLERANCE, where)
                err = u.relative_error(res["output"], without[b, h].numpy())
                note(f"{self.paradigm} {what}: output (A V)", err)
                self.assertLess(err, u.RELATIVE_TOLERANCE, where)

    def test_float64_module_on_a_5x6_grid(self):
        u.cli_path()
        grid, prefix, dim, heads = (5, 6), 1, 48, 3
        module = randomise_module(ra.make_attention(self.paradigm, dim, heads, grid, prefix),
                                  seed=21).double().eval()
        model = nn.Sequential(module).eval()
        x = token_inputs(3, prefix + grid[0] * grid[1], dim, seed=4)
        batches = [x[:1], x[1:]]  # streamed: per-image weights grow with B
        path = os.path.join(u.temp_dir(self), f"{self.paradigm}-5x6.h5")
        with ax.Exporter(model, path, grid=grid, prefix_tokens=prefix, dtype="float64",
                         layer_name=lambda _n: "attn") as ex:
            for batch in batches:
                ex.run(batch)
        self.check_dump_branch(path, "attn", module, batches)
        with torch.no_grad():
            reference = module.attention_with_local_branch(x)
            without = module.attention_parts(x)["out"]
            # attention_with_local_branch is what forward projects (MALA: before its gate).
            merged = reference.transpose(1, 2).reshape(x.shape)
            gate = module.gate(x) if self.paradigm == "mala" else 1.0
            torch.testing.assert_close(module.proj(merged * gate), module(x), rtol=0, atol=0)
        self.assertGreater(branch_effect(reference, without), 0.05)
        self.compare_heads(path, "attn", reference, without, "float64 5x6", 3)

    def test_float32_vit_on_14x14(self):
        u.cli_path()
        model = u.small_vit(self.paradigm, seed=13, embed_dim=48, heads=3, depth=2)
        for blk in model.blocks:
            randomise_module(blk.attn, seed=31)
        x = u.random_images(3, seed=8)
        path = os.path.join(u.temp_dir(self), f"{self.paradigm}-vit.h5")
        with u.AttentionInputs(model) as rec, \
                ax.Exporter(model, path, grid=(14, 14), prefix_tokens=1, dtype="float32") as ex:
            ex.run(x[:2])
            ex.run(x[2:])
        for i, blk in enumerate(model.blocks):
            layer = f"blocks.{i}.attn"
            self.check_dump_branch(path, layer, blk.attn, rec.inputs[i])
            with torch.no_grad():
                reference = torch.cat([blk.attn.attention_with_local_branch(t)
                                       for t in rec.inputs[i]])
                without = torch.cat([blk.attn.attention_parts(t)["out"] for t in rec.inputs[i]])
            self.assertGreater(branch_effect(reference, without), 0.01)
            self.compare_heads(path, layer, reference, without, "float32 ViT 14x14", 3)


class Focused(PaperModule, unittest.TestCase):
    paradigm, kind, channels, per_image, has_bias = "focused", "dwc", "per_head", False, True


class InLine(PaperModule, unittest.TestCase):
    paradigm, kind, channels = "inline", "inline_residual", "all"
    per_image, has_bias = True, False


class MALA(PaperModule, unittest.TestCase):
    paradigm, kind, channels, per_image, has_bias = "mala", "lepe", "all", False, True


# ---------------------------------------------------------------------------------------------
# M_c against torch's conv2d


def conv_matrix(kernel, grid, prefix):
    """N x N matrix of conv2d(kernel, zero padding (k-1)/2) on the grid, prefix rows/cols zero,
    built column by column from one-hot images (torch decides every entry)."""
    h, w = grid
    kh, kw = kernel.shape
    eye = torch.eye(h * w, dtype=torch.float64).reshape(h * w, 1, h, w)
    cols = F.conv2d(eye, torch.as_tensor(kernel, dtype=torch.float64)[None, None],
                    padding=((kh - 1) // 2, (kw - 1) // 2))  # [key, 1, h, w]: column `key`
    m = np.zeros((prefix + h * w,) * 2)
    m[prefix:, prefix:] = cols.reshape(h * w, h * w).numpy().T
    return m


def write_branch_dump(path, grid, prefix, heads, dv, kernel, channels, per_image, seed,
                      images=2, with_bias=True):
    """A random float64 dump of one layer with a random branch whose taps are all nonzero."""
    rng = np.random.default_rng(seed)
    n = prefix + grid[0] * grid[1]
    c = dv if channels == "per_head" else heads * dv
    shape = (images, c) + tuple(kernel) if per_image else (c,) + tuple(kernel)
    weight = rng.choice([-1.0, 1.0], size=shape) * rng.uniform(0.2, 1.0, size=shape)
    bias = rng.standard_normal((images, c) if per_image else c) if with_bias else None
    q = rng.standard_normal((images, heads, n, 8))
    k = rng.standard_normal((images, heads, n, 8))
    v = rng.standard_normal((images, heads, n, dv))
    with ax.DumpWriter(path, grid=grid, prefix_tokens=prefix, dtype="float64") as w:
        w.declare_layer("l", 0, attention="softmax")
        w.append_layer("l", q, k, v, {"kind": "test", "channels": channels, "weight": weight,
                                      "bias": bias})
    return weight, bias, v


class LocalMatrix(unittest.TestCase):
    def check(self, grid, kernel, channels, per_image=False, prefix=1, heads=2, dv=3,
              with_bias=True):
        u.cli_path()
        work = u.temp_dir(self)
        path = os.path.join(work, "m.h5")
        weight, bias, v = write_branch_dump(path, grid, prefix, heads, dv, kernel, channels,
                                            per_image, seed=sum(grid) + sum(kernel), images=2,
                                            with_bias=with_bias)
        h, w = grid
        kh, kw = kernel
        for b in range(2):
            for head in range(heads):
                for c in range(dv):
                    wc = c if channels == "per_head" else head * dv + c
                    res = cli_branch(path, b, "l", head, "softmax", work, channel=c)
                    where = f"grid {grid} kernel {kernel} {channels} image {b} head {head} ch {c}"
                    self.assertEqual((res["channel"], res["weight_channel"]), (c, wc), where)
                    taps = weight[b, wc] if per_image else weight[wc]
                    expected = conv_matrix(taps, grid, prefix)
                    m = np.asarray(res["local_matrix"])
                    self.assertEqual(m.shape, expected.shape, where)
                    err = np.abs(m - expected).max()
                    note("local_matrix vs conv2d (absolute)", err)
                    self.assertLess(err, 1e-12, where)
                    # No wrap-around: the last grid token of a row and the first of the next are
                    # neighbours in the flattened sequence only (2-D offset (1, -(W-1)), outside
                    # the kernel when W-1 > (kw-1)/2). The taps (0, +-1) are nonzero, so a 1-D
                    # convolution over the tokens would put them there.
                    for y in range(h - 1):
                        end, start = prefix + y * w + w - 1, prefix + (y + 1) * w
                        if w - 1 > (kw - 1) // 2:
                            self.assertEqual(m[end, start], 0.0, where)
                            self.assertEqual(m[start, end], 0.0, where)
                    if w >= 2 and kw >= 3:
                        self.assertNotEqual(m[prefix, prefix + 1], 0.0, where)  # tap (0, +1)
                    self.assertTrue(np.all(m[:prefix] == 0) and np.all(m[:, :prefix] == 0), where)
                    a = np.asarray(res["attention"])
                    err = np.abs(np.asarray(res["equivalent_matrix"]) - (a + expected)).max()
                    self.assertLess(err, 1e-12, where)
                    # The branch's output on the dump's random V, through torch's conv2d.
                    vc = torch.as_tensor(v[b, head, prefix:, c]).reshape(1, 1, h, w)
                    conv = F.conv2d(vc, torch.as_tensor(taps)[None, None],
                                    padding=((kh - 1) // 2, (kw - 1) // 2)).reshape(-1).numpy()
                    if with_bias:
                        conv = conv + (bias[b, wc] if per_image else bias[wc])
                    delta = (np.asarray(res["output_with_local_branch"])[:, c]
                             - np.asarray(res["output"])[:, c])
                    np.testing.assert_array_equal(delta[:prefix], 0.0, where)
                    err = u.relative_error(delta[prefix:], conv)
                    note("output_with_local_branch - output vs conv2d(V) + bias", err)
                    self.assertLess(err, 1e-12, where)

    def test_non_square_grid_5x6_kernel_5_per_head(self):
        self.check((5, 6), (5, 5), "per_head")

    def test_kernel_5_on_a_3x4_grid_smaller_than_the_kernel(self):
        self.check((3, 4), (5, 5), "all")

    def test_kernel_7_on_a_2x3_grid_per_image_no_prefix(self):
        self.check((2, 3), (7, 7), "all", per_image=True, prefix=0, with_bias=False)

    def test_non_square_kernel_3x5_on_4x7_per_image(self):
        self.check((4, 7), (3, 5), "per_head", per_image=True, prefix=2)

    def test_1x1_kernel_and_a_single_column_grid(self):
        self.check((4, 1), (1, 1), "all")
        self.check((4, 1), (3, 3), "per_head")


# ---------------------------------------------------------------------------------------------
# attnlens-cli synth --local-branch


class Synth(unittest.TestCase):
    def test_synth_dumps_follow_section_1a(self):
        u.cli_path()
        work = u.temp_dir(self)
        expected = {"dwc": ("per_head", False), "lepe": ("all", False),
                    "inline_residual": ("all", True)}
        for kind, (channels, per_image) in expected.items():
            path = os.path.join(work, f"{kind}.h5")
            u.run_cli("synth", "-o", path, "--layers", "2", "--heads", "2", "--grid", "4x5",
                      "--prefix", "1", "--dim", "6", "--images", "3", "--dtype", "float64",
                      "--local-branch", kind)
            summary = ax.validate(path)
            for layer in summary["layers"]:
                br = layer["local_branch"]
                self.assertEqual((br["kind"], br["channels"], br["per_image"]),
                                 (kind, channels, per_image), kind)
            inspected = json.loads(u.run_cli("inspect", path, "--json").stdout)
            lb = inspected["layers"][0]["local_branch"]
            self.assertEqual((lb["kind"], lb["channels"], lb["per_image"]),
                             (kind, channels, per_image), kind)
            with h5py.File(path, "r") as f:
                g = f["layers/blocks.1"]
                weight = g["local_branch/weight"][()]
                bias = g["local_branch/bias"][()] if "bias" in g["local_branch"] else None
                v = g["v"][()]
            for b in range(3):
                for head in range(2):
                    res = cli_branch(path, b, "blocks.1", head, "softmax", work)
                    a = np.asarray(res["attention"])
                    expected_out = a @ v[b, head]
                    for c in range(6):
                        wc = c if channels == "per_head" else head * 6 + c
                        taps = weight[b, wc] if per_image else weight[wc]
                        k = taps.shape[0]
                        conv = F.conv2d(torch.as_tensor(v[b, head, 1:, c]).reshape(1, 1, 4, 5),
                                        torch.as_tensor(taps)[None, None], padding=(k - 1) // 2)
                        expected_out[1:, c] += conv.reshape(-1).numpy() + (
                            0.0 if bias is None else bias[wc])
                    err = u.relative_error(res["output_with_local_branch"], expected_out)
                    note("synth: output_with_local_branch vs numpy A V + conv2d", err)
                    self.assertLess(err, 1e-12, f"{kind} image {b} head {head}")


# ---------------------------------------------------------------------------------------------
# The exporter's checks


class ExporterChecks(unittest.TestCase):
    B, HEADS, GRID, DV = 2, 2, (3, 4), 4

    def writer(self, layers=("l",)):
        path = os.path.join(u.temp_dir(self), "x.h5")
        w = ax.DumpWriter(path, grid=self.GRID, prefix_tokens=1, dtype="float32")
        self.addCleanup(w.abort)
        for i, name in enumerate(layers):
            w.declare_layer(name, i)
        return w

    def tensors(self, b=None):
        n = 1 + self.GRID[0] * self.GRID[1]
        q = np.random.default_rng(0).standard_normal((b or self.B, self.HEADS, n, self.DV))
        return q, q.copy(), q.copy()

    def branch(self, **changes):
        br = {"kind": "dwc", "channels": "per_head",
              "weight": np.ones((self.DV, 3, 3)), "bias": np.zeros(self.DV)}
        br.update(changes)
        return {k: v for k, v in br.items() if v is not None}

    def refused(self, branch, message):
        w = self.writer(("a", "l"))
        q, k, vv = self.tensors()
        good = self.branch()
        w.append_layers([("a", q, k, vv, good), ("l", q, k, vv, good)])  # a first, good batch
        with self.assertRaisesRegex(ax.ExportError, message):
            w.append_layers([("a", q, k, vv, good), ("l", q, k, vv, branch)])
        # Nothing of the refused batch was written, in either layer.
        for name in ("a", "l"):
            g = w._file["layers"][name]
            self.assertEqual([g[t].shape[0] for t in "qkv"], [self.B] * 3, name)
            self.assertEqual(w._layers[name]["count"], self.B)

    def test_even_kernel(self):
        self.refused(self.branch(weight=np.ones((self.DV, 4, 4))),
                     r"layer l: local branch: weight \(4, 4, 4\) has kernel 4x4; kernel sizes "
                     r"must be odd")

    def test_kernel_odd_one_way_only(self):
        self.refused(self.branch(weight=np.ones((self.DV, 3, 2))), r"layer l: .*kernel 3x2")

    def test_wrong_channel_count_per_head(self):
        self.refused(self.branch(weight=np.ones((self.DV * self.HEADS, 3, 3))),
                     r'layer l: local branch: weight \(8, 3, 3\) has C = 8 channels but channels '
                     r'= "per_head" needs C = d_v = 4')

    def test_wrong_channel_count_all(self):
        self.refused(self.branch(channels="all"),
                     r'layer l: .*has C = 4 channels but channels = "all" needs C = heads x d_v = '
                     r'2 x 4 = 8')

    def test_nan_weight(self):
        weight = np.ones((self.DV, 3, 3))
        weight[2, 1, 0] = np.nan
        self.refused(self.branch(weight=weight),
                     r"layer l: local branch: weight holds NaN or Inf \(channel 2: nan\); the "
                     r"branch's weights must be finite")

    def test_inf_in_per_image_weight_names_the_image(self):
        weight = np.ones((self.B, self.DV * self.HEADS, 3, 3))
        weight[1, 5, 0, 0] = np.inf
        # The layer already holds B images, so this batch's image 1 is image B + 1 of the dump.
        self.refused(self.branch(channels="all", weight=weight, bias=None),
                     rf"layer l: local branch: weight holds NaN or Inf \(image {self.B + 1}, "
                     r"channel 5: inf\)")

    def test_nan_bias(self):
        self.refused(self.branch(bias=np.array([0.0, np.nan, 0.0, 0.0])),
                     r"layer l: local branch: bias holds NaN or Inf \(channel 1: nan\)")

    def test_bias_of_wrong_shape(self):
        self.refused(self.branch(bias=np.zeros(self.DV + 1)),
                     r"layer l: local branch: bias \(5,\) must be \[C\] = \[4\] or \[B, C\] = "
                     r"\[2, 4\]")

    def test_per_image_weight_of_wrong_batch(self):
        self.refused(self.branch(weight=np.ones((self.B + 1, self.DV, 3, 3))),
                     r"layer l: local branch: per-image weight \(3, 4, 3, 3\) must have B = 2")

    def test_bad_channels_and_kind(self):
        self.refused(self.branch(channels="x"),
                     r"layer l: local branch: channels must be \"per_head\" or \"all\", got 'x'")
        self.refused(self.branch(kind=""), r"layer l: local branch: kind must be a non-empty")
        self.refused(self.branch(kind=None), r"layer l: local branch: kind must be a non-empty")
        self.refused(self.branch(weight=None), r"layer l: local branch: weight is missing")
        self.refused(dict(self.branch(), padding=1), r"layer l: local branch has unknown keys")

    def test_branch_without_v(self):
        w = self.writer()
        q, k, _ = self.tensors()
        with self.assertRaisesRegex(ax.ExportError, r"layer l: local branch needs v \(the branch "
                                                    r"acts on V's channels\)"):
            w.append_layer("l", q, k, None, self.branch())
        self.assertNotIn("q", w._file["layers/l"])

    def test_shared_weights_must_not_change_between_batches(self):
        self.refused(self.branch(weight=np.full((self.DV, 3, 3), 1.5)),
                     r"layer l: local branch: the shared weight differs from the first batch's")
        self.refused(self.branch(bias=np.ones(self.DV)),
                     r"layer l: local branch: the shared bias differs from the first batch's")
        self.refused(self.branch(kind="lepe"),
                     r"layer l: local branch: kind is 'lepe' in this batch but 'dwc'")
        self.refused(self.branch(weight=np.ones((self.B, self.DV, 3, 3))),
                     r"layer l: local branch: per_image is True in this batch but False")

    def test_branch_in_some_batches_only(self):
        self.refused(None, r"layer l: the local branch is missing in this batch")
        w = self.writer()
        q, k, v = self.tensors()
        w.append_layer("l", q, k, v)
        with self.assertRaisesRegex(ax.ExportError, r"layer l: local branch in this batch but "
                                                    "not in the earlier ones"):
            w.append_layer("l", q, k, v, self.branch())

    def test_exporter_names_the_layer_and_keeps_the_dump_consistent(self):
        # A LayerSpec branch function whose second batch is broken: the Exporter refuses that
        # batch before writing any layer of it; the first batch still makes a valid dump.
        module = ra.make_attention("mala", 24, 2, self.GRID, 1)
        calls = []

        def branch(mod, x):
            br = mod.attnlens_local_branch(x)
            calls.append(x.shape[0])
            if len(calls) == 2:
                br = dict(br, weight=br["weight"][:, :4, :4])  # even kernel
            return br

        model = nn.Sequential(module).eval()
        spec = ax.LayerSpec(module, ax._protocol_extract, name="mala.attn", attention="mala",
                            local_branch=branch)
        path = os.path.join(u.temp_dir(self), "e.h5")
        x = token_inputs(2, 13, 24, seed=0, dtype=torch.float32)
        with ax.Exporter(model, path, grid=self.GRID, prefix_tokens=1, layers=[spec],
                         dtype="float32") as ex:
            ex.run(x[:1])
            with self.assertRaisesRegex(ax.ExportError, r"layer mala.attn: local branch: weight "
                                                        r"\(24, 4, 4\) has kernel 4x4"):
                ex.run(x[1:])
        with h5py.File(path, "r") as f:
            self.assertEqual(f["layers/mala.attn/q"].shape[0], 1)
            self.assertEqual(f["layers/mala.attn/local_branch/weight"].shape, (24, 5, 5))
        self.assertEqual(ax.validate(path)["layers"][0]["local_branch"]["kind"], "lepe")

    def test_without_values_no_branch_is_written(self):
        model = nn.Sequential(ra.make_attention("focused", 24, 2, self.GRID, 1)).eval()
        path = os.path.join(u.temp_dir(self), "nov.h5")
        with ax.Exporter(model, path, grid=self.GRID, prefix_tokens=1, with_values=False) as ex:
            ex.run(token_inputs(1, 13, 24, seed=0, dtype=torch.float32))
        with h5py.File(path, "r") as f:
            self.assertEqual(sorted(f["layers/0"]), ["k", "q"])
        with self.assertRaisesRegex(ax.ExportError, "with_local_branch needs with_values"):
            ax.Exporter(model, path, grid=self.GRID, prefix_tokens=1, with_values=False,
                        with_local_branch=True)

    def test_branch_dtypes(self):
        # float16 dumps keep the branch (model parameters) in float32; float64 dumps in float64.
        for dtype, expected in (("float16", np.float32), ("float32", np.float32),
                                ("float64", np.float64)):
            model = nn.Sequential(ra.make_attention("mala", 24, 2, self.GRID, 1)).eval()
            path = os.path.join(u.temp_dir(self), f"{dtype}.h5")
            with ax.Exporter(model, path, grid=self.GRID, prefix_tokens=1, dtype=dtype) as ex:
                ex.run(token_inputs(1, 13, 24, seed=0, dtype=torch.float32))
            with h5py.File(path, "r") as f:
                self.assertEqual(f["layers/0/local_branch/weight"].dtype, expected, dtype)
                self.assertEqual(f["layers/0/local_branch/bias"].dtype, expected, dtype)
                self.assertEqual(f["layers/0/q"].dtype, np.dtype(dtype))

    def test_validate_checks_the_branch(self):
        path = os.path.join(u.temp_dir(self), "bad.h5")
        q, k, v = self.tensors()
        with ax.DumpWriter(path, grid=self.GRID, prefix_tokens=1, dtype="float32") as w:
            w.declare_layer("l", 0)
            w.append_layer("l", q, k, v, self.branch())
        self.assertEqual(ax.validate(path)["layers"][0]["local_branch"],
                         {"kind": "dwc", "channels": "per_head", "weight_channels": 4,
                          "kernel": [3, 3], "per_image": False, "bias": "shared",
                          "dtype": "float32"})
        proc = subprocess.run([sys.executable, os.path.join(u.EXPORTER_DIR, "attnlens_export.py"),
                               "validate", path], capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("local branch dwc (per_head, C 4, 3x3, shared, bias shared, float32)",
                      proc.stdout)
        with h5py.File(path, "a") as f:
            g = f["layers/l/local_branch"]
            g.attrs["channels"] = "all"
            del g["bias"]
            g["bias"] = np.zeros(3)
        with self.assertRaisesRegex(ax.ExportError, r'/layers/l/local_branch/weight has C = 4 '
                                    r'channels but channels = "all" needs C = 8'):
            ax.validate(path)
        with h5py.File(path, "a") as f:
            g = f["layers/l/local_branch"]
            g.attrs["channels"] = "per_head"
            g["weight"][0, 0, 0] = np.nan
            del g["bias"]
        with self.assertRaisesRegex(ax.ExportError, r"/layers/l/local_branch/weight holds NaN"):
            ax.validate(path)
        with h5py.File(path, "a") as f:
            del f["layers/l/v"]
            g = f["layers/l/local_branch"]
            del g["weight"]
            g["weight"] = np.ones((4, 2, 2))
        with self.assertRaisesRegex(ax.ExportError, r"/layers/l/local_branch needs v"):
            ax.validate(path)


# ---------------------------------------------------------------------------------------------
# attnlens-cli refuses dumps that break section 1a


B, HEADS, N, D = u.SMALL_B, u.SMALL_HEADS, u.SMALL_N, u.SMALL_D  # grid 2x2 + one prefix token


def write_dump(path, mutate=None, branch=True):
    u.write_small_dump(path, mutate, local_branch=branch)


BRANCH = "layers/blocks.1/local_branch"
WHERE = "/layers/blocks.1/local_branch"


replace = u.replace_dataset


class ReaderRefuses(unittest.TestCase):
    def setUp(self):
        u.cli_path()
        self.dir = u.temp_dir(self)
        self.path = os.path.join(self.dir, "dump.h5")
        self.out = os.path.join(self.dir, "out.json")

    def refused(self, mutate, message):
        write_dump(self.path, mutate)
        for args in (("inspect", self.path), ("analyze", self.path, "--quiet", "-o", self.out)):
            proc = u.run_cli(*args, expect_ok=False)
            self.assertEqual(proc.returncode, 3, f"{args[0]}: {proc.stderr}")
            self.assertIn(f"attnlens-cli: error: {self.path}: {message}", proc.stderr, args[0])
            self.assertNotIn("HDF5-DIAG", proc.stderr)
            self.assertFalse(os.path.exists(self.out))

    def test_even_kernel(self):
        self.refused(lambda f: replace(f, f"{BRANCH}/weight", np.ones((D, 4, 4), np.float32)),
                     f"{WHERE}/weight has shape [4, 4, 4]: kernel sizes must be odd (PyTorch's "
                     "'same' padding (k-1)/2 is symmetric only for odd k)")

    def test_kernel_above_255(self):
        self.refused(lambda f: replace(f, f"{BRANCH}/weight", np.ones((D, 1, 257), np.float32)),
                     f"{WHERE}/weight has shape [4, 1, 257]: kernel sizes above 255 are not "
                     "plausible")

    def test_wrong_channel_count(self):
        self.refused(lambda f: replace(f, f"{BRANCH}/weight", np.ones((2 * D, 3, 3), np.float32)),
                     f'{WHERE}/weight has C = 8 channels but channels = "per_head" needs C = '
                     'd_v = 4')

    def test_wrong_channel_count_for_all(self):
        self.refused(lambda f: f[BRANCH].attrs.__setitem__("channels", "all"),
                     f'{WHERE}/weight has C = 4 channels but channels = "all" needs C = heads x '
                     'd_v = 2 x 4 = 8')

    def test_nan_weight(self):
        def mutate(f):
            w = f[f"{BRANCH}/weight"][()]
            w[3, 2, 2] = np.nan
            replace(f, f"{BRANCH}/weight", w)
        self.refused(mutate, f"{WHERE}/weight: channel 3 holds a non-finite value (nan); the "
                             "branch's weights must be finite")

    def test_inf_bias(self):
        self.refused(lambda f: replace(f, f"{BRANCH}/bias",
                                       np.array([0, 0, -np.inf, 0], np.float32)),
                     f"{WHERE}/bias: channel 2 holds a non-finite value (-inf)")

    def test_missing_kind(self):
        self.refused(lambda f: f[BRANCH].attrs.__delitem__("kind"),
                     f"{WHERE} attribute 'kind' is missing")

    def test_missing_channels(self):
        self.refused(lambda f: f[BRANCH].attrs.__delitem__("channels"),
                     f"{WHERE} attribute 'channels' is missing")

    def test_channels_x(self):
        self.refused(lambda f: f[BRANCH].attrs.__setitem__("channels", "x"),
                     f"{WHERE} attribute 'channels' must be \"per_head\" or \"all\", got \"x\"")

    def test_kind_not_a_string(self):
        self.refused(lambda f: f[BRANCH].attrs.__setitem__("kind", 3),
                     f"{WHERE} attribute 'kind' must be a string")

    def test_branch_without_v(self):
        self.refused(lambda f: f.__delitem__("layers/blocks.1/v"),
                     f"{WHERE} needs the dataset v (the branch acts on V's channels)")

    def test_bias_of_wrong_shape(self):
        self.refused(lambda f: replace(f, f"{BRANCH}/bias", np.zeros(D + 1, np.float32)),
                     f"{WHERE}/bias has shape [5]; expected [C] = [4] or [B, C] = [2, 4]")
        self.refused(lambda f: replace(f, f"{BRANCH}/bias", np.zeros((B + 1, D), np.float32)),
                     f"{WHERE}/bias has shape [3, 4]; expected [C] = [4] or [B, C] = [2, 4]")

    def test_per_image_weight_with_wrong_b(self):
        self.refused(lambda f: replace(f, f"{BRANCH}/weight",
                                       np.ones((B + 1, D, 3, 3), np.float32)),
                     f"{WHERE}/weight has shape [3, 4, 3, 3]: per-image weights [B, C, kh, kw] "
                     f"need B = {B}")

    def test_weight_missing_or_of_wrong_rank_or_type(self):
        self.refused(lambda f: f.__delitem__(f"{BRANCH}/weight"),
                     f"{WHERE}: dataset 'weight' is missing")
        self.refused(lambda f: replace(f, f"{BRANCH}/weight", np.ones((D, 9), np.float32)),
                     f"{WHERE}/weight has shape [4, 9]; expected [C, kh, kw] or [B, C, kh, kw]")
        self.refused(lambda f: replace(f, f"{BRANCH}/weight", np.ones((D, 3, 3), np.int32)),
                     f"{WHERE}/weight has dtype int32")

    def test_branch_not_a_group(self):
        def mutate(f):
            del f[BRANCH]
            f[BRANCH] = np.zeros(3)
        self.refused(mutate, f"{WHERE} is not a group (the local branch is a group holding "
                             "weight and optionally bias)")

    def test_nan_in_per_image_weights_is_an_error_on_read(self):
        def mutate(f):
            w = np.random.default_rng(1).standard_normal((B, D, 3, 3)).astype(np.float32)
            w[1, 2, 0, 1] = np.nan
            replace(f, f"{BRANCH}/weight", w)
        write_dump(self.path, mutate)
        inspected = json.loads(u.run_cli("inspect", self.path, "--json").stdout)
        self.assertTrue(inspected["layers"][1]["local_branch"]["per_image"])
        cli_branch(self.path, 0, "blocks.1", 0, "softmax", self.dir)  # image 0 is fine
        out = os.path.join(self.dir, "bad.json")
        proc = u.run_cli("attention", self.path, "--image", 1, "--layer", "blocks.1", "--head", 0,
                         "--paradigm", "softmax", "--values", "--local-branch", "-o", out,
                         expect_ok=False)
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertIn(f"attnlens-cli: error: {self.path}: {WHERE}/weight (image 1): channel 2 "
                      "holds a non-finite value (nan); the branch's weights must be finite",
                      proc.stderr)
        self.assertFalse(os.path.exists(out))

    def test_valid_variants_are_read(self):
        def variants(f):
            g = f["layers/blocks.0/local_branch"]  # per-image weights and bias, float16, all
            g.attrs["kind"] = np.bytes_(b"something else")
            g.attrs["channels"] = np.bytes_(b"all")
            replace(f, "layers/blocks.0/local_branch/weight", np.ones((B, HEADS * D, 1, 3),
                                                                      np.float16))
            replace(f, "layers/blocks.0/local_branch/bias", np.ones((B, HEADS * D), np.float64))
            f[BRANCH].attrs["note"] = "ignored"
            f[f"{BRANCH}/extra"] = np.zeros(2)
        write_dump(self.path, variants)
        inspected = json.loads(u.run_cli("inspect", self.path, "--json").stdout)
        b0, b1 = (l["local_branch"] for l in inspected["layers"])
        self.assertEqual((b0["kind"], b0["channels"], b0["weight_channels"], b0["kernel"],
                          b0["per_image"], b0["bias"], b0["dtype"]),
                         ("something else", "all", 8, [1, 3], True, "per_image", "float16"))
        self.assertEqual((b1["kind"], b1["channels"], b1["weight_channels"], b1["kernel"],
                          b1["per_image"], b1["bias"], b1["dtype"]),
                         ("dwc", "per_head", 4, [3, 3], False, "shared", "float32"))
        out = os.path.join(self.dir, "a.json")
        proc = u.run_cli("analyze", self.path, "--quiet", "--stats", "rank,local", "-o", out)
        self.assertEqual(proc.stderr.count("error"), 0, proc.stderr)
        # A dump without any branch reads as before; --local-branch then says so.
        write_dump(self.path, branch=False)
        inspected = json.loads(u.run_cli("inspect", self.path, "--json").stdout)
        self.assertIsNone(inspected["layers"][0]["local_branch"])
        proc = u.run_cli("attention", self.path, "--image", 0, "--layer", "blocks.0", "--head",
                         0, "--paradigm", "softmax", "--values", "--local-branch", "-o", out,
                         expect_ok=False)
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertIn("has no local branch", proc.stderr)


if __name__ == "__main__":
    unittest.main()
