"""Look-alikes of the papers' released attention classes WITHOUT the exporter protocol: the same
class names, constructor arguments, parameter names and forward passes as the released code
(restated here from LeapLabTHU/FLatten-Transformer, LeapLabTHU/InLine and qhfan/MALA, which the
project does not contain), so that the tests exercise the exporter's recognition of the real
classes (issue 24) rather than protocol methods the real classes do not have."""

import torch
import torch.nn as nn
import torch.nn.functional as F

import reference_attention as ra


def _focused(self, q, k):
    k = k + self.positional_encoding
    scale = nn.Softplus()(self.scale)
    q = (nn.ReLU()(q) + 1e-6) / scale
    k = (nn.ReLU()(k) + 1e-6) / scale
    qn, kn = q.norm(dim=-1, keepdim=True), k.norm(dim=-1, keepdim=True)
    q, k = q ** self.focusing_factor, k ** self.focusing_factor
    return q / q.norm(dim=-1, keepdim=True) * qn, k / k.norm(dim=-1, keepdim=True) * kn


def _divide(q, k, v, n):
    z = 1 / (q @ k.mean(dim=-2, keepdim=True).transpose(-2, -1) + 1e-6)
    return q @ ((k.transpose(-2, -1) * n ** -0.5) @ (v * n ** -0.5)) * z


class FocusedLinearAttention(nn.Module):
    """flatten_swin.py FocusedLinearAttention: focused map over all C channels, dwc per head."""

    def __init__(self, dim, window_size, num_heads, qkv_bias=True, qk_scale=None, attn_drop=0.,
                 proj_drop=0., focusing_factor=3, kernel_size=5):
        super().__init__()
        self.dim, self.window_size, self.num_heads = dim, window_size, num_heads
        head_dim = dim // num_heads
        self.focusing_factor = focusing_factor
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.dwc = nn.Conv2d(head_dim, head_dim, kernel_size, groups=head_dim,
                             padding=kernel_size // 2)
        self.scale = nn.Parameter(torch.zeros(1, 1, dim))
        self.positional_encoding = nn.Parameter(torch.zeros(1, window_size[0] * window_size[1],
                                                            dim))

    def forward(self, x, mask=None):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, c).permute(2, 0, 1, 3).unbind(0)
        q, k = _focused(self, q, k)
        q, k, v = (t.reshape(b, n, self.num_heads, -1).permute(0, 2, 1, 3) for t in (q, k, v))
        x = _divide(q, k, v, n).transpose(1, 2).reshape(b, n, c)
        h = w = int(n ** 0.5)
        v = v.reshape(b * self.num_heads, h, w, -1).permute(0, 3, 1, 2)
        x = x + self.dwc(v).reshape(b, c, n).permute(0, 2, 1)
        return self.proj(x)


class FocusedLinearAttentionPVT(nn.Module):
    """flatten_pvt.py FocusedLinearAttention: keys from the sr-reduced map, V interpolated back
    to the N tokens before the dwc."""

    def __init__(self, dim, num_patches, num_heads=8, qkv_bias=False, qk_scale=None, attn_drop=0.,
                 proj_drop=0., sr_ratio=1, focusing_factor=3, kernel_size=5):
        super().__init__()
        self.dim, self.num_heads, self.sr_ratio = dim, num_heads, sr_ratio
        head_dim = dim // num_heads
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.kv = nn.Linear(dim, dim * 2, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        if sr_ratio > 1:
            self.sr = nn.Conv2d(dim, dim, kernel_size=sr_ratio, stride=sr_ratio)
            self.norm = nn.LayerNorm(dim)
        self.focusing_factor = focusing_factor
        self.dwc = nn.Conv2d(head_dim, head_dim, kernel_size, groups=head_dim,
                             padding=kernel_size // 2)
        self.scale = nn.Parameter(torch.zeros(1, 1, dim))
        self.positional_encoding = nn.Parameter(torch.zeros(1, num_patches // sr_ratio ** 2, dim))

    def forward(self, x, H, W):
        b, n_tok, c = x.shape
        q = self.q(x)
        if self.sr_ratio > 1:
            x_ = self.sr(x.permute(0, 2, 1).reshape(b, c, H, W)).reshape(b, c, -1).permute(0, 2, 1)
            x_ = self.norm(x_)
        else:
            x_ = x
        k, v = self.kv(x_).reshape(b, -1, 2, c).permute(2, 0, 1, 3).unbind(0)
        n = k.shape[1]
        q, k = _focused(self, q, k)
        q = q.reshape(b, n_tok, self.num_heads, -1).permute(0, 2, 1, 3)
        k, v = (t.reshape(b, n, self.num_heads, -1).permute(0, 2, 1, 3) for t in (k, v))
        x = _divide(q, k, v, n)
        if self.sr_ratio > 1:
            v = F.interpolate(v.transpose(-2, -1).reshape(b * self.num_heads, -1, n), size=n_tok,
                              mode="linear").reshape(b, self.num_heads, -1, n_tok).transpose(-2, -1)
        x = x.transpose(1, 2).reshape(b, n_tok, c)
        v = v.reshape(b * self.num_heads, H, W, -1).permute(0, 3, 1, 2)
        return self.proj(x + self.dwc(v).reshape(b, c, n_tok).permute(0, 2, 1))


FocusedLinearAttentionPVT.__name__ = "FocusedLinearAttention"


def _inline_residual(dim, num_heads):
    return nn.Sequential(nn.Conv1d(dim, dim, 1, groups=num_heads), nn.GELU(),
                         nn.Conv1d(dim, dim * 9, 1, groups=num_heads))


class InLineAttention(nn.Module):
    """inline_deit.py InLineAttention: the InLine normalisation on raw q/k, the 3x3 residual per
    image from the mean token, on the grid tokens after CLS."""

    def __init__(self, dim, num_heads=8, qkv_bias=False, attn_drop=0., proj_drop=0., window=14,
                 skip_residual=False, **kwargs):
        super().__init__()
        self.dim, self.num_heads, self.window = dim, num_heads, window
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.residual = _inline_residual(dim, num_heads)
        self.skip_residual = skip_residual  # a mutation the recomputation check must catch

    def forward(self, x):
        b, n, c = x.shape
        h = w = int(n ** 0.5)
        q, k, v = self.qkv(x).reshape(b, n, 3, c).permute(2, 0, 1, 3)
        q, k, v = (t.reshape(b, n, self.num_heads, -1).permute(0, 2, 1, 3) for t in (q, k, v))
        res_weight = self.residual(x.mean(dim=1).unsqueeze(dim=-1)).reshape(b * c, 1, 3, 3)
        kv = (k.transpose(-2, -1) * (self.scale / n) ** 0.5) @ (v * (self.scale / n) ** 0.5)
        x = q @ kv + (1 - q @ k.mean(dim=2, keepdim=True).transpose(-2, -1) * self.scale) * \
            v.mean(dim=2, keepdim=True)
        x = x.transpose(1, 2).reshape(b, n, c)
        if not self.skip_residual:
            v_ = v[:, :, 1:, :].transpose(1, 2).reshape(b, h, w, c).permute(0, 3, 1, 2).reshape(
                1, b * c, h, w)
            residual = F.conv2d(v_, res_weight, None, padding=(1, 1), groups=b * c)
            x[:, 1:, :] = x[:, 1:, :] + residual.reshape(b, c, n - 1).permute(0, 2, 1)
        return self.proj(x)


class InLineBlock(nn.Module):
    def __init__(self, dim, num_heads, **kwargs):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = InLineAttention(dim, num_heads, qkv_bias=True, **kwargs)

    def forward(self, x):
        return x + self.attn(self.norm1(x))


class InLineDeiT(nn.Module):
    """inline_deit.py VisionTransformer, cut down: patch embedding, CLS, position embedding and
    InLineBlocks."""

    def __init__(self, img_size=28, patch_size=4, in_chans=1, dim=32, depth=2, num_heads=2,
                 **kwargs):
        super().__init__()
        self.patch = nn.Conv2d(in_chans, dim, patch_size, patch_size)
        grid = img_size // patch_size
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.5)
        self.pos_embed = nn.Parameter(torch.randn(1, grid * grid + 1, dim) * 0.5)
        self.blocks = nn.Sequential(*[InLineBlock(dim, num_heads, **kwargs) for _ in range(depth)])

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        return self.blocks(x)


class AddLinearAttention(nn.Module):
    """MALA classfication_release/model.py AddLinearAttention on x [B, C, H, W]: qkvo 1x1 conv,
    phi = ELU + 1, z from the unrotated phi(q), phi(k), RoPE (theta_shift) on the numerator's,
    LePE 5x5 on V, the output gate o, proj 1x1 conv."""

    def __init__(self, dim, num_heads):
        super().__init__()
        self.dim, self.num_heads, self.head_dim = dim, num_heads, dim // num_heads
        self.qkvo = nn.Conv2d(dim, dim * 4, 1)
        self.lepe = nn.Conv2d(dim, dim, 5, 1, 2, groups=dim)
        self.proj = nn.Conv2d(dim, dim, 1)
        self.scale = self.head_dim ** -0.5
        self.elu = nn.ELU()

    def parts(self, x, sin, cos):
        b, c, h, w = x.shape
        qkvo = self.qkvo(x)
        split = [qkvo[:, i * c:(i + 1) * c].reshape(b, self.num_heads, self.head_dim, h * w)
                 .transpose(-2, -1) for i in range(4)]
        q, k, v, o = split
        q, k = self.elu(q) + 1, self.elu(k) + 1
        z = q @ k.mean(dim=-2, keepdim=True).transpose(-2, -1) * self.scale
        rot = lambda t: t * cos + torch.stack([-t[..., 1::2], t[..., ::2]], -1).flatten(-2) * sin  # noqa: E731
        return q, k, v, o, z, rot(q), rot(k)

    def forward(self, x, sin, cos):
        b, c, h, w = x.shape
        q, k, v, o, z, qr, kr = self.parts(x, sin, cos)
        n = h * w
        kv = (kr.transpose(-2, -1) * (self.scale / n) ** 0.5) @ (v * (self.scale / n) ** 0.5)
        res = qr @ kv * (1 + 1 / (z + 1e-6)) - z * v.mean(dim=2, keepdim=True)
        res = res.transpose(-2, -1).reshape(b, c, h, w)
        qkvo = self.qkvo(x)
        lepe = self.lepe(qkvo[:, 2 * c:3 * c])
        return self.proj((res + lepe) * qkvo[:, 3 * c:])


class MALAStage(nn.Module):
    """MALA's BasicLayer, cut down: the stage's RoPE tables for its grid, then the blocks."""

    def __init__(self, dim=32, num_heads=2, depth=2, in_chans=1):
        super().__init__()
        self.stem = nn.Conv2d(in_chans, dim, 4, 4)
        self.blocks = nn.ModuleList([nn.ModuleDict({"attn": AddLinearAttention(dim, num_heads)})
                                     for _ in range(depth)])
        self.head_dim = dim // num_heads

    def forward(self, x):
        x = self.stem(x)
        sin, cos = ra.mala_rope_tables(tuple(x.shape[2:]), 0, self.head_dim)
        for blk in self.blocks:
            x = x + blk["attn"](x, sin, cos)
        return x


# CSwin (flatten_cswin.py / inline_cswin.py): the softmax look-alike is also the bundled hierarchical
# example's third model, so it lives once, in reference_attention.py.
LePEAttention = ra.LePEAttention
CSWinBlock = ra.CSWinBlock


class CSWinStructure(nn.Module):
    """A module with CSwin's structure (qkv, split_size, attns) whose attentions are no known class."""

    def __init__(self, dim=16, num_heads=2, split_size=2):
        super().__init__()
        self.qkv = nn.Linear(dim, dim * 3)
        self.num_heads, self.split_size = num_heads, split_size
        self.attns = nn.ModuleList([nn.Identity(), nn.Identity()])
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        return self.proj(x)


class Unknown(nn.Module):
    """A module with a qkv Linear and num_heads that is no known class."""

    def __init__(self, dim=16, num_heads=2):
        super().__init__()
        self.qkv = nn.Linear(dim, dim * 3)
        self.num_heads = num_heads
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        return self.proj(self.qkv(x)[..., :x.shape[-1]])
