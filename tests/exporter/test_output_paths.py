"""The exporter's output and its failures (issue 47 item 5), as the CLI treats its own outputs: anything
but a regular file or a new name is refused before any work (os.replace of the temporary file would
replace /dev/null, a FIFO or a symbolic link, and a directory failed only after every batch); the
temporary file is removed whatever fails; NaN in the first batch is said as NaN, not as a miss of the
recomputation check."""

import os
import unittest

import numpy as np
import torch

import exporter_test_util as u


def leftovers(directory):
    return sorted(f for f in os.listdir(directory) if ".tmp-" in f)


class OutputPaths(unittest.TestCase):
    def setUp(self):
        self.dir = u.temp_dir(self)

    def refused(self, path, words):
        with self.assertRaises(u.ax.ExportError) as e:
            u.ax.DumpWriter(path, (2, 2), 1)
        self.assertIn(words, str(e.exception))
        self.assertEqual(leftovers(self.dir), [])
        return e.exception

    def test_a_device_is_refused_and_left_as_it_is(self):
        before = os.stat("/dev/null")
        self.refused("/dev/null", "refusing to write '/dev/null': it is a character device, not a regular file")
        self.assertEqual(os.stat("/dev/null").st_rdev, before.st_rdev)

    def test_a_fifo_a_link_and_a_directory_are_refused(self):
        fifo = os.path.join(self.dir, "fifo")
        os.mkfifo(fifo)
        self.refused(fifo, "it is a FIFO, not a regular file")
        target = os.path.join(self.dir, "target.h5")
        open(target, "w").close()
        link = os.path.join(self.dir, "link.h5")
        os.symlink(target, link)
        self.refused(link, "it is a symbolic link")
        self.assertTrue(os.path.islink(link))
        self.refused(self.dir, "it is a directory")
        self.refused(os.path.join(self.dir, "missing", "d.h5"), "does not exist")

    def test_the_exporter_refuses_a_directory_before_any_batch(self):
        model = u.small_vit("softmax", seed=3)
        with self.assertRaises(u.ax.ExportError) as e:
            u.ax.Exporter(model, self.dir, grid=(14, 14), prefix_tokens=1)
        self.assertIn("it is a directory", str(e.exception))
        self.assertEqual(leftovers(self.dir), [])

    def test_the_temporary_file_goes_whatever_fails(self):
        path = os.path.join(self.dir, "empty.h5")
        writer = u.ax.DumpWriter(path, (2, 2), 1)
        self.assertEqual(len(leftovers(self.dir)), 1)
        with self.assertRaises(u.ax.ExportError):
            writer.close()  # no layer was recorded
        self.assertEqual(leftovers(self.dir), [])
        self.assertFalse(os.path.exists(path))
        # A failure inside the `with` block, and an output that became a directory meanwhile.
        with self.assertRaises(RuntimeError):
            with u.ax.DumpWriter(path, (2, 2), 1):
                raise RuntimeError("a failed batch")
        self.assertEqual(leftovers(self.dir), [])
        writer = u.ax.DumpWriter(path, (2, 2), 1)
        writer.declare_layer("blocks.0", 0, attention="softmax")
        q = np.ones((1, 1, 5, 2), np.float32)
        writer.append_layers([("blocks.0", q, q, None, None, {})])
        os.mkdir(path)
        with self.assertRaises(u.ax.ExportError) as e:
            writer.close()
        self.assertIn("it is a directory", str(e.exception))
        self.assertEqual(leftovers(self.dir), [])

    def test_nan_in_the_first_batch_is_said_as_nan(self):
        model = u.small_vit("softmax", seed=4)
        for module in model.modules():
            if hasattr(module, "qkv"):
                with torch.no_grad():
                    module.qkv.weight[0, :] = float("nan")  # q's channel 0 of head 0
                break
        path = os.path.join(self.dir, "nan.h5")
        with self.assertRaises(u.ax.ExportError) as e:
            with u.ax.Exporter(model, path, grid=(14, 14), prefix_tokens=1) as ex:
                ex.run(u.random_images(2, seed=1))
        self.assertIn("q holds NaN or Inf", str(e.exception))
        self.assertNotIn("exporter protocol", str(e.exception))
        self.assertFalse(os.path.exists(path))
        self.assertEqual(leftovers(self.dir), [])


if __name__ == "__main__":
    unittest.main()
