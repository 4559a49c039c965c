"""The bundled examples (resources/examples/attnlens-example.h5 and the hierarchical
attnlens-example-hierarchical.h5) are what the README says they are."""

import json
import os
import unittest

import h5py
import numpy as np

import exporter_test_util as u

EXAMPLES = os.path.normpath(os.path.join(u.HERE, "..", "..", "resources", "examples"))
DUMP = os.path.join(EXAMPLES, "attnlens-example.h5")
SIDECAR = os.path.join(EXAMPLES, "attnlens-example.json")
KERNEL_APPLIED = {"softmax": None, "linear_relu": 0, "focused": 1, "inline": 0, "mala": 0}


class ExampleDump(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.isfile(DUMP):
            raise AssertionError(f"{DUMP} is missing: run resources/exporter/"
                                 "train_fashion_mnist.py")
        with open(SIDECAR) as f:
            cls.sidecar = json.load(f)

    def test_size_limit(self):
        self.assertLess(os.path.getsize(DUMP), 30e6)

    def test_layers_per_model_in_order(self):
        summary = u.ax.validate(DUMP)
        depth = self.sidecar["recipe"]["depth"]
        expected = [f"{p}.block{i}" for p in u.ra.PARADIGMS for i in range(depth)]
        self.assertEqual([l["name"] for l in summary["layers"]], expected)
        self.assertEqual([l["index"] for l in summary["layers"]], list(range(len(expected))))
        for layer in summary["layers"]:
            paradigm = layer["name"].split(".")[0]
            self.assertEqual(layer["attention"], paradigm)
            self.assertEqual(layer["kernel_applied"], KERNEL_APPLIED[paradigm], layer["name"])
            self.assertEqual(layer["dtype"], "float16")
            self.assertTrue(layer["values"])
            self.assertEqual(layer["shape"][2], 197)
        self.assertEqual(summary["grid"], [14, 14])
        self.assertEqual(summary["prefix_tokens"], 1)

    def test_images_and_labels(self):
        with h5py.File(DUMP, "r") as f:
            images, labels = f["images"][()], f["labels"][()]
        per_class = self.sidecar["recipe"]["per_class"]
        self.assertEqual(images.shape, (10 * per_class, 28, 28))
        self.assertEqual(images.dtype, np.uint8)
        np.testing.assert_array_equal(labels, np.repeat(np.arange(10), per_class))
        np.testing.assert_array_equal(labels, self.sidecar["exported_labels"])
        # The images are the Fashion-MNIST test images named in the sidecar.
        data = os.path.join("/usr/share/datasets/fashion-mnist", "t10k-images-idx3-ubyte.gz")
        if os.path.isfile(data):
            import train_fashion_mnist as tf  # noqa: E402  (resources/exporter is on sys.path)
            test_images = tf.read_idx(data)
            np.testing.assert_array_equal(images,
                                          test_images[self.sidecar["exported_test_indices"]])

    def test_sidecar_reports_every_model(self):
        models = {m["paradigm"]: m for m in self.sidecar["models"]}
        self.assertEqual(sorted(models), sorted(u.ra.PARADIGMS))
        for m in models.values():
            self.assertGreater(m["test_accuracy"], 0.5, m["paradigm"])  # far above chance (0.1)

    def test_local_branches(self):
        # Written since the exporter records local branches (format.md 1a); an example trained
        # before that has none and no "local_branches" in its sidecar.
        if "local_branches" not in self.sidecar:
            self.skipTest("the example predates the local branch: rerun "
                          "resources/exporter/train_fashion_mnist.py")
        expected = {"focused": ("dwc", "per_head", False, "shared", [5, 5]),
                    "inline": ("inline_residual", "all", True, "none", [3, 3]),
                    "mala": ("lepe", "all", False, "shared", [5, 5])}
        for layer in u.ax.validate(DUMP)["layers"]:
            paradigm = layer["name"].split(".")[0]
            br = layer["local_branch"]
            if paradigm not in expected:
                self.assertIsNone(br, layer["name"])
                continue
            self.assertEqual((br["kind"], br["channels"], br["per_image"], br["bias"],
                              br["kernel"], br["dtype"]), expected[paradigm] + ("float32",),
                             layer["name"])
            self.assertEqual(self.sidecar["local_branches"][layer["name"]], br)

    def test_cli_reads_it(self):
        u.cli_path()
        proc = u.run_cli("inspect", DUMP)
        self.assertIn("focused.block0", proc.stdout)
        res = u.cli_attention(DUMP, 3, "focused.block1", 2, "focused", u.temp_dir(self))
        self.assertEqual(res["row_status"], ["ok"] * 197)
        rows = np.asarray(res["attention"]).sum(axis=1)
        np.testing.assert_allclose(rows, 1.0, atol=1e-3)  # divide: 1 - N eps / denominator


HIERARCHICAL = os.path.join(EXAMPLES, "attnlens-example-hierarchical.h5")


class HierarchicalExample(unittest.TestCase):
    """Issues 10 and 46: a two-stage model (FLatten-Swin, merge, PVT with FLatten-PVT) and a CSwin
    model (per-head stripes, then one window over the grid) trained on Fashion-MNIST by
    resources/exporter/train_hierarchical.py."""

    @classmethod
    def setUpClass(cls):
        if not os.path.isfile(HIERARCHICAL):
            raise AssertionError(f"{HIERARCHICAL} is missing: run resources/exporter/train_hierarchical.py")
        with open(os.path.splitext(HIERARCHICAL)[0] + ".json") as f:
            cls.sidecar = json.load(f)

    def test_examples_stay_under_30_mb_in_all(self):
        total = sum(os.path.getsize(os.path.join(EXAMPLES, n)) for n in os.listdir(EXAMPLES))
        self.assertLess(total, 30e6)

    def test_stages_and_their_layouts(self):
        summary = u.ax.validate(HIERARCHICAL)
        names = [l["name"] for l in summary["layers"]]
        self.assertEqual(names, ["swinpvt.s1.b0", "swinpvt.s1.b1", "swinpvt.s2.b0", "swinpvt.s2.b1",
                                 "cswin.s1.b0", "cswin.s1.b1", "cswin.s2.b0"])
        self.assertEqual(self.sidecar["layers"], names)
        with h5py.File(HIERARCHICAL, "r") as f:
            s1 = [f["layers"][n] for n in names[:2]]
            s2 = [f["layers"][n] for n in names[2:4]]
            for g, shift in zip(s1, ((0, 0), (3, 3))):
                self.assertEqual(tuple(g.attrs["grid"]), (14, 14))
                self.assertEqual(tuple(g.attrs["window_size"]), (7, 7))
                self.assertEqual(tuple(g.attrs["window_shift"]), shift)
                self.assertFalse(bool(g.attrs["window_mask"]))  # FLatten-Swin ignores the mask
                self.assertEqual(g["q"].shape, (10, 2, 196, 24))
                self.assertEqual(g["local_branch"].attrs["scope"], "window")
            for g in s2:
                self.assertEqual(tuple(g.attrs["grid"]), (7, 7))
                self.assertEqual(tuple(g.attrs["key_grid"]), (3, 3))
                # sr 2 on 7 x 7: windows of rows 0-1, 2-3, 4-5; row 6 dropped (format.md 1c).
                self.assertEqual(tuple(g.attrs["key_stride"]), (2, 2))
                self.assertEqual(g["q"].shape, (10, 4, 49, 24))
                self.assertEqual(g["k"].shape, (10, 4, 9, 24))
            self.assertEqual([str(g.attrs["attention"]) for g in s1 + s2],
                             ["focused", "focused", "softmax", "focused"])
            self.assertNotIn("local_branch", s2[0])
            self.assertEqual(s2[1]["local_branch"].attrs["values"], "interpolated")
            self.assertEqual(list(f["labels"][()]), self.sidecar["exported_labels"])
            # CSwin: heads 0-1 in vertical 14 x 2 stripes, heads 2-3 in horizontal 2 x 14 ones, LePE
            # inside them; the last stage one window over the 7 x 7 grid (a plain layer).
            for name in names[4:6]:
                g = f["layers"][name]
                self.assertEqual(tuple(g.attrs["grid"]), (14, 14))
                self.assertEqual([int(x) for x in g.attrs["head_windows"]], [2, 14, 2, 2, 2, 14])
                self.assertEqual(str(g.attrs["attention"]), "softmax")
                self.assertEqual(g["q"].shape, (10, 4, 196, 12))
                self.assertEqual(g["local_branch"].attrs["scope"], "window")
            last = f["layers"][names[6]]
            self.assertEqual(tuple(last.attrs["grid"]), (7, 7))
            self.assertNotIn("head_windows", last.attrs)
            self.assertEqual(last["q"].shape, (10, 8, 49, 12))
        self.assertEqual([m["name"] for m in self.sidecar["models"]], ["swinpvt", "cswin"])
        for m in self.sidecar["models"]:
            self.assertGreater(m["test_accuracy"], 0.5, m["name"])  # far above chance (0.1)
            self.assertEqual(m["test_images"], 10000)

    def test_flattens_claim_on_both_stages(self):
        """FLatten Sec. 4.2 on a trained hierarchical model: inside the windows the focused
        attention's A is low rank and A + M_c full rank (196, the union of the windows' blocks) for
        the median channel; on the PVT stage A + M_c reaches min(N, n) = 9 (A alone may too: n = 9
        keys with d = 24)."""
        u.cli_path()
        out = os.path.join(u.temp_dir(self), "h.json")
        u.run_cli("analyze", HIERARCHICAL, "--paradigms", "focused", "--stats", "rank",
                  "--images", "0,1", "-o", out)
        with open(out) as f:
            report = json.load(f)
        for r in report["results"]:
            if r["layer"] == "swinpvt.s2.b0" or not r["layer"].startswith("swinpvt."):
                continue
            branch = r["local_branch"]
            if r["layer"].startswith("swinpvt.s1"):
                self.assertLess(r["rank"]["rank"], 100, r["layer"])
                self.assertEqual(branch["rank"]["median"], 196, r["layer"])
                self.assertGreaterEqual(branch["rank"]["min"], 190, r["layer"])
            else:
                self.assertLessEqual(r["rank"]["rank"], 9, r["layer"])
                self.assertEqual(branch["rank"]["median"], 9, r["layer"])


if __name__ == "__main__":
    unittest.main()
