"""Dumps written by h5py (the exporter's writer) that are broken or odd in ways the C++ tests cannot
build with DumpWriter: attributes of the wrong type or shape, inconsistent optional datasets, empty
layer groups, compression filters and absurd chunking. attnlens-cli must answer each with exit code
3 and a message naming the file, the object and the problem (issue 2, sections 2 and 6), print no
HDF5 error stack and write no output; odd but valid files must still work.
"""

import os
import unittest

import h5py
import numpy as np

import exporter_test_util as u

B, HEADS, N, D = u.SMALL_B, u.SMALL_HEADS, u.SMALL_N, u.SMALL_D  # grid 2x2 + one prefix token


def write_dump(path, mutate=None, chunks=None, compression=None):
    u.write_small_dump(path, mutate, chunks=chunks, compression=compression)


replace = u.replace_dataset


class HostileDumps(unittest.TestCase):
    def setUp(self):
        u.cli_path()
        self.dir = u.temp_dir(self)
        self.path = os.path.join(self.dir, "dump.h5")
        self.out = os.path.join(self.dir, "out.json")

    def refused(self, mutate, message, **kwargs):
        write_dump(self.path, mutate, **kwargs)
        for args in (("inspect", self.path), ("analyze", self.path, "--quiet", "-o", self.out)):
            proc = u.run_cli(*args, expect_ok=False)
            self.assertEqual(proc.returncode, 3, f"{args[0]}: {proc.stderr}")
            self.assertIn(f"attnlens-cli: error: {self.path}: {message}", proc.stderr)
            self.assertNotIn("HDF5-DIAG", proc.stderr)
            self.assertFalse(os.path.exists(self.out))

    def accepted(self, mutate=None, **kwargs):
        write_dump(self.path, mutate, **kwargs)
        proc = u.run_cli("analyze", self.path, "--quiet", "--stats", "rank,local", "-o", self.out)
        self.assertEqual(proc.stderr.count("error"), 0, proc.stderr)
        self.assertTrue(os.path.exists(self.out))

    def test_grid_as_string(self):
        self.refused(lambda f: f.attrs.__setitem__("grid", "2x2"),
                     "root attribute 'grid' must be integers, got string")

    def test_grid_of_three_integers(self):
        self.refused(lambda f: f.attrs.__setitem__("grid", np.array([2, 2, 1])),
                     "root attribute 'grid' must be two positive integers [H, W], got [2, 2, 1]")

    def test_huge_unsigned_attribute_is_named_as_it_is(self):
        # Issue 27 item 7: 2^64 - 5 was reported as 9223372036854775807 (int64's clamp).
        self.refused(lambda f: f.attrs.__setitem__("prefix_tokens", np.uint64(2 ** 64 - 5)),
                     "root attribute 'prefix_tokens' is 18446744073709551611, far beyond any count or size "
                     "AttnLens reads")
        self.refused(lambda f: f.attrs.__setitem__("grid", np.array([2, 2 ** 64 - 1], dtype=np.uint64)),
                     "root attribute 'grid' holds 18446744073709551615")

    def test_grid_of_floats(self):
        self.refused(lambda f: f.attrs.__setitem__("grid", np.array([2.0, 2.0])),
                     "root attribute 'grid' must be integers, got float64")

    def test_negative_prefix(self):
        self.refused(lambda f: f.attrs.__setitem__("prefix_tokens", -1),
                     "root attribute 'prefix_tokens' must be an integer >= 0, got -1")

    def test_format_version_as_string(self):
        self.refused(lambda f: f.attrs.__setitem__("format_version", "1"),
                     "root attribute 'format_version' must be an integer, got string")

    def test_layer_scale_as_string(self):
        self.refused(lambda f: f["layers/blocks.1"].attrs.__setitem__("scale", "0.5"),
                     "/layers/blocks.1 attribute 'scale' must be a number, got string")

    def test_images_with_wrong_count(self):
        self.refused(lambda f: replace(f, "images", np.zeros((B + 3, 4, 4), np.uint8)),
                     f"/images holds {B + 3} images but the layers have B = {B}")

    def test_labels_of_wrong_length(self):
        self.refused(lambda f: replace(f, "labels", np.arange(B + 1)),
                     f"/labels has shape [{B + 1}]; expected [B] = [{B}]")

    def test_layer_group_without_datasets(self):
        self.refused(lambda f: f.create_group("layers/blocks.2"),
                     "/layers/blocks.2: dataset 'q' is missing (q and k are required)")

    def test_q_as_a_dangling_soft_link(self):
        def mutate(f):
            del f["layers/blocks.0/q"]
            f["layers/blocks.0/q"] = h5py.SoftLink("/nowhere")
        self.refused(mutate, "/layers/blocks.0/q cannot be opened as a dataset")

    def test_boolean_dtype(self):
        self.refused(lambda f: replace(f, "layers/blocks.0/q", np.zeros((B, HEADS, N, D), bool)),
                     "/layers/blocks.0/q has dtype enum; q, k and v must be float16, float32 or "
                     "float64")

    def test_lzf_compression_is_refused_on_open(self):
        self.refused(None, "/layers/blocks.0/q is compressed with HDF5 filter 32000 (lzf), which "
                           "this HDF5 library does not provide", chunks=(1, HEADS, N, D),
                     compression="lzf")

    def test_compressed_chunks_spanning_many_images_are_refused(self):
        # gzip chunks of 2^22 images: every (image, head) read would decompress 640 MiB (about 1 GB
        # and 90 s for 48 reads of a 1 GiB chunk before the check). The chunks are declared, never
        # written: the check reads only the dataset's creation properties.
        def mutate(f):
            del f["layers/blocks.0/q"]
            f["layers/blocks.0"].create_dataset("q", shape=(B, HEADS, N, D), dtype=np.float32,
                                                maxshape=(None, HEADS, N, D),
                                                chunks=(1 << 22, HEADS, N, D), compression="gzip")
        self.refused(mutate, "/layers/blocks.0/q is compressed in chunks of [4194304, 2, 5, 4] "
                             "(0.625 GiB uncompressed), more than the limit of 0.25 GiB: every "
                             "read would decompress a whole chunk; store one image per chunk, "
                             "e.g. h5repack -l /layers/blocks.0/q:CHUNK=1x2x5x4 IN.h5 OUT.h5")

    def test_odd_but_valid_files_work(self):
        self.accepted(chunks=(1, 1, 1, 1))  # one value per chunk
        self.accepted(chunks=(1, HEADS, N, D), compression="gzip")
        self.accepted(lambda f: f["layers/blocks.0"].attrs.__setitem__("kernel_applied", True))
        self.accepted(lambda f: f.attrs.__setitem__("format", np.bytes_(b"attnlens.dump")))


if __name__ == "__main__":
    unittest.main()
