"""The bundled example's initialisation (issue 46 item 7): MAE's 2D sin-cos position table against
a NumPy restatement of MAE's get_2d_sincos_pos_embed (its meshgrid(w, h) order: the first half of
the channels encodes the column), and mimetic W_q/W_k on every attention of the example's models."""
import unittest

import numpy as np
import torch

import exporter_test_util  # noqa: F401  (puts resources/exporter on sys.path)
import reference_attention as ra


def mae_sincos_1d(dim, pos):
    omega = 1.0 / 10000 ** (np.arange(dim // 2, dtype=np.float64) / (dim / 2.0))
    out = np.einsum("m,d->md", pos.reshape(-1), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)


def mae_sincos_2d(dim, gh, gw):
    grid = np.meshgrid(np.arange(gw, dtype=np.float64), np.arange(gh, dtype=np.float64))  # w first, as MAE
    grid = np.stack(grid, axis=0).reshape(2, 1, gh, gw)
    return np.concatenate([mae_sincos_1d(dim // 2, grid[0]), mae_sincos_1d(dim // 2, grid[1])], axis=1)


class SinCos(unittest.TestCase):
    def test_table_equals_maes_formula_with_a_zero_prefix_row(self):
        for dim, grid, prefix in ((96, (14, 14), 1), (16, (3, 5), 0), (8, (4, 2), 2)):
            table = ra.sincos_2d_position_embedding(dim, grid, prefix)[0].double().numpy()
            self.assertEqual(table.shape, (prefix + grid[0] * grid[1], dim))
            np.testing.assert_array_equal(table[:prefix], 0.0)
            np.testing.assert_allclose(table[prefix:], mae_sincos_2d(dim, *grid), atol=1e-6)
        with self.assertRaises(ValueError):
            ra.sincos_2d_position_embedding(6, (2, 2), 0)

    def test_the_vit_starts_from_it_and_learns_it(self):
        vit = ra.VisionTransformer("softmax", embed_dim=16, depth=1, num_heads=2, position_init="sincos")
        self.assertTrue(vit.pos_embed.requires_grad)
        np.testing.assert_allclose(vit.pos_embed[0, 1:].detach().double().numpy(), mae_sincos_2d(16, 14, 14),
                                   atol=1e-6)
        with self.assertRaises(ValueError):
            ra.VisionTransformer("softmax", embed_dim=16, depth=1, num_heads=2, position_init="learned")


class Mimetic(unittest.TestCase):
    def test_wk_equals_wq_both_scaled_biases_zero_v_untouched(self):
        for paradigm in ra.PARADIGMS:
            with self.subTest(paradigm=paradigm):
                torch.manual_seed(0)
                vit = ra.VisionTransformer(paradigm, embed_dim=16, depth=2, num_heads=2)
                before = [b.attn.qkv.weight.detach().clone() for b in vit.blocks]
                biases = [None if b.attn.qkv.bias is None else b.attn.qkv.bias.detach().clone()
                          for b in vit.blocks]
                self.assertEqual(ra.mimetic_qk_init(vit, gain=2.0), 2)
                for b, w0, b0 in zip(vit.blocks, before, biases):
                    w = b.attn.qkv.weight.detach()
                    torch.testing.assert_close(w[:16], 2.0 * w0[:16])
                    torch.testing.assert_close(w[16:32], w[:16])
                    torch.testing.assert_close(w[32:], w0[32:])
                    # W_q W_k^T = 4 W_q0 W_q0^T: symmetric positive semi-definite.
                    eig = torch.linalg.eigvalsh((w[:16] @ w[16:32].T).double())
                    self.assertGreaterEqual(eig.min().item(), -1e-9)
                    if b0 is not None:
                        torch.testing.assert_close(b.attn.qkv.bias[:32].detach(), torch.zeros(32))
                        torch.testing.assert_close(b.attn.qkv.bias[32:].detach(), b0[32:])


if __name__ == "__main__":
    unittest.main()
