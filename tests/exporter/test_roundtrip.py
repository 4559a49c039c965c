"""Export -> attention -> A V equals the reference module's own attention output.

For each paradigm a small randomly initialised ViT (N = 197 = 1 + 14x14, 2 layers, 2 heads of
d = 24) is exported in float32; then for every (image, layer, head):
  * DumpReproducesReference: the issue's paradigm definitions, written out in numpy (float64)
    on the dump's q, k, v, give the module's output O (a check of the export point that does not
    need the CLI);
  * CliReproducesReference: `attnlens-cli attention --values` gives the same O, and for softmax
    also the weights softmax(q k^T * scale) that the model itself computed.
Tolerance: max|O_x - O_ref| <= 1e-5 max|O_ref| (RELATIVE_TOLERANCE).
"""

import os
import unittest

import h5py
import numpy as np
import torch

import exporter_test_util as u

IMAGES = 2


def elu1(x):
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0))) + 1.0


def focused_kernel(x, p=3.0, shift=1e-6):
    y = np.maximum(x, 0) + shift
    yp = y ** p
    return yp * (np.linalg.norm(y, axis=1, keepdims=True) / np.linalg.norm(yp, axis=1,
                                                                           keepdims=True))


KERNELS = {"linear_relu": lambda x: np.maximum(x, 0), "focused": focused_kernel,
           "inline": lambda x: x, "mala": elu1}


def paradigm_matrix(paradigm, q, k, scale, kernel_applied, eps=1e-6):
    """The issue's definitions (issue 2, section 3) in float64."""
    n, d = q.shape
    if paradigm == "softmax":
        s = scale * q @ k.T
        e = np.exp(s - s.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    phi = (lambda x: x) if kernel_applied else KERNELS[paradigm]
    pq, pk = phi(q), phi(k)
    if paradigm in ("linear_relu", "focused"):
        dots = pq @ pk.T
        return dots / (dots.sum(axis=1, keepdims=True) + n * eps)
    c = 1.0 / (np.sqrt(d) * n)
    dmat = c * pq @ pk.T
    z = dmat.sum(axis=1, keepdims=True)
    if paradigm == "inline":
        return dmat - z / n + 1.0 / n
    return dmat * (1.0 + 1.0 / (z + eps)) - z / n  # mala


def export(test, paradigm, dtype="float32"):
    """Export a small random model; returns (dump path, {block: O_ref}, model, images)."""
    model = u.small_vit(paradigm, seed=11, embed_dim=48, heads=2)
    x = u.random_images(IMAGES, seed=5)
    path = os.path.join(u.temp_dir(test), f"{paradigm}.h5")
    with u.AttentionInputs(model) as rec, \
            u.ax.Exporter(model, path, grid=(14, 14), prefix_tokens=1, dtype=dtype) as ex:
        ex.run(x[:1])  # two batches: the streamed path
        ex.run(x[1:])
    return path, rec.reference_outputs(), model, x


def layer_names(path):
    with h5py.File(path, "r") as f:
        return sorted(f["layers"], key=lambda n: int(f["layers"][n].attrs["index"]))


class DumpReproducesReference(unittest.TestCase):
    def check(self, paradigm):
        path, ref, _, _ = export(self, paradigm)
        worst = 0.0
        with h5py.File(path, "r") as f:
            for i, name in enumerate(layer_names(path)):
                g = f["layers"][name]
                ka = int(g.attrs.get("kernel_applied", 0))
                for b in range(IMAGES):
                    for h in range(g["q"].shape[1]):
                        q, k, v = (g[t][b, h].astype(np.float64) for t in ("q", "k", "v"))
                        a = paradigm_matrix(paradigm, q, k, float(g.attrs["scale"]), ka)
                        err = u.relative_error(a @ v, ref[i][b, h].numpy())
                        worst = max(worst, err)
                        self.assertLess(err, u.RELATIVE_TOLERANCE,
                                        f"{paradigm} {name} image {b} head {h}")
        self.assertGreater(worst, 0.0)  # the dump is float32, the reference float32 torch

    def test_softmax(self):
        self.check("softmax")

    def test_linear_relu(self):
        self.check("linear_relu")

    def test_focused(self):
        self.check("focused")

    def test_inline(self):
        self.check("inline")

    def test_mala(self):
        self.check("mala")


class CliReproducesReference(unittest.TestCase):
    def check(self, paradigm):
        u.cli_path()
        path, ref, model, x = export(self, paradigm)
        work = u.temp_dir(self)
        names = layer_names(path)
        with h5py.File(path, "r") as f:
            heads = f["layers"][names[0]]["q"].shape[1]
        for i, name in enumerate(names):
            for b in range(IMAGES):
                for h in range(heads):
                    res = u.cli_attention(path, b, name, h, u.CLI_PRESET[paradigm], work)
                    where = f"{paradigm} {name} image {b} head {h}"
                    self.assertEqual(res["tokens"], 197, where)
                    self.assertEqual(res["row_status"], ["ok"] * 197, where)
                    err = u.relative_error(res["output"], ref[i][b, h].numpy())
                    self.assertLess(err, u.RELATIVE_TOLERANCE, where)
        return path, model, x, work

    def test_softmax(self):
        path, model, x, work = self.check("softmax")
        # The weights the model computed: timm applies attn_drop to softmax(q k^T * scale).
        weights = {}
        hooks = [blk.attn.attn_drop.register_forward_hook(
            lambda _m, inp, _o, i=i: weights.__setitem__(i, inp[0].detach()))
            for i, blk in enumerate(model.blocks)]
        for blk in model.blocks:
            blk.attn.fused_attn = False  # the explicit path, whose weights a hook can see
        with torch.no_grad():
            model(x)
        for hk in hooks:
            hk.remove()
        for i, name in enumerate(layer_names(path)):
            for b in range(IMAGES):
                for h in range(weights[i].shape[1]):
                    res = u.cli_attention(path, b, name, h, "softmax", work)
                    err = u.relative_error(res["attention"], weights[i][b, h].numpy())
                    self.assertLess(err, u.RELATIVE_TOLERANCE, f"{name} image {b} head {h}")

    def test_linear_relu(self):
        self.check("linear_relu")

    def test_focused(self):
        self.check("focused")

    def test_inline(self):
        self.check("inline")

    def test_mala(self):
        self.check("mala")


if __name__ == "__main__":
    unittest.main()
