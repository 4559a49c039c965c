"""Class names (format.md, /class_names; issue 12): written by the exporter, added to an existing
dump, read back by h5py and by attnlens-cli, and present in the bundled example."""

import json
import os
import shutil
import tempfile
import unittest

import h5py
import numpy as np

import exporter_test_util as u

EXAMPLES = os.path.normpath(os.path.join(u.HERE, "..", "..", "resources", "examples"))
NAMES = ["T-shirt/top", "Trouser", "caf\u00e9"]


def write_dump(path, labels, class_names=None):
    """One layer, B = len(labels), 1 head, a 2 x 2 grid, d 4."""
    rng = np.random.default_rng(3)
    with u.ax.DumpWriter(path, grid=(2, 2), dtype="float32", class_names=class_names) as w:
        w.declare_layer("blocks.0", 0)
        q, k = (rng.standard_normal((len(labels), 1, 4, 4)).astype(np.float32) for _ in range(2))
        w.append_layer("blocks.0", q, k)
        w.append_labels(np.asarray(labels))


def names_in_file(path):
    with h5py.File(path, "r") as f:
        ds = f["class_names"]
        info = h5py.check_string_dtype(ds.dtype)
        return info, [n.decode("utf-8") for n in ds[()]]


class ClassNames(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="attnlens-class-names-")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_writer_stores_utf8_variable_length_strings(self):
        path = os.path.join(self.dir, "a.h5")
        write_dump(path, [2, 0, 1], class_names=NAMES)
        info, names = names_in_file(path)
        self.assertEqual(info.encoding, "utf-8")
        self.assertIsNone(info.length)  # variable-length
        self.assertEqual(names, NAMES)
        self.assertEqual(u.ax.validate(path)["class_names"], NAMES)
        described = json.loads(u.run_cli("inspect", path, "--json").stdout)
        self.assertEqual(described["class_names"], NAMES)

    def test_add_class_names_to_an_existing_dump(self):
        path = os.path.join(self.dir, "a.h5")
        write_dump(path, [1, 0])
        self.assertIsNone(u.ax.validate(path)["class_names"])
        u.ax.add_class_names(path, ["no", "yes"])
        self.assertEqual(names_in_file(path)[1], ["no", "yes"])
        u.ax.add_class_names(path, ["zero", "one", "two"])  # replaces
        self.assertEqual(names_in_file(path)[1], ["zero", "one", "two"])
        self.assertIn("classes       3: 0 zero, 1 one, 2 two", u.run_cli("inspect", path).stdout)

    def test_command_line_reads_a_sidecar(self):
        path = os.path.join(self.dir, "a.h5")
        sidecar = os.path.join(self.dir, "a.json")
        write_dump(path, [0, 1])
        with open(sidecar, "w") as f:
            json.dump({"classes": ["x", "y"]}, f)
        self.assertEqual(u.ax.main(["add-class-names", path, "--json", sidecar]), 0)
        self.assertEqual(names_in_file(path)[1], ["x", "y"])

    def test_refusals(self):
        path = os.path.join(self.dir, "a.h5")
        write_dump(path, [0, 3])
        with self.assertRaisesRegex(u.ax.ExportError, r"image 1 has label 3, not one of the 2"):
            u.ax.add_class_names(path, ["a", "b"])
        with self.assertRaisesRegex(u.ax.ExportError, r"class_names\[1\] is empty"):
            u.ax.check_class_names(["a", ""])
        with self.assertRaisesRegex(u.ax.ExportError, r"U\+0007"):
            u.ax.check_class_names(["a\x07"])
        with self.assertRaisesRegex(u.ax.ExportError, r"longer than 256 bytes"):
            u.ax.check_class_names(["\u00e9" * 129])
        with self.assertRaisesRegex(u.ax.ExportError, r"not one string"):
            u.ax.check_class_names("ab")
        with self.assertRaisesRegex(u.ax.ExportError, r"1 to 65536 names, got 0"):
            u.ax.check_class_names([])
        # The writer checks the labels against the names when it closes: no file is left.
        bad = os.path.join(self.dir, "bad.h5")
        with self.assertRaisesRegex(u.ax.ExportError, r"image 1 has label 3, not one of the 2"):
            write_dump(bad, [0, 3], class_names=["a", "b"])
        self.assertFalse(os.path.exists(bad))

    def test_bundled_example_names_fashion_mnist(self):
        with open(os.path.join(EXAMPLES, "attnlens-example.json")) as f:
            sidecar = json.load(f)
        dump = os.path.join(EXAMPLES, "attnlens-example.h5")
        self.assertEqual(names_in_file(dump)[1], sidecar["classes"])
        self.assertEqual(os.path.getsize(dump), sidecar["size_bytes"])


if __name__ == "__main__":
    unittest.main()
