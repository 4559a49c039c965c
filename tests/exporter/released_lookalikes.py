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


def _img2windows(t, h_sp, w_sp, h, w):
    """[B, H*W, C] -> [B * windows, h_sp * w_sp, C] (CSwin's img2windows on the transposed map)."""
    b, _, c = t.shape
    t = t.transpose(-2, -1).reshape(b, c, h // h_sp, h_sp, w // w_sp, w_sp)
    return t.permute(0, 2, 4, 3, 5, 1).reshape(-1, h_sp * w_sp, c)


def _windows2img(t, h_sp, w_sp, h, w):
    b = t.shape[0] // (h * w // (h_sp * w_sp))
    t = t.reshape(b, h // h_sp, w // w_sp, h_sp, w_sp, -1).permute(0, 1, 3, 2, 4, 5)
    return t.reshape(b, h * w, -1)


class LePEAttention(nn.Module):
    """flatten_cswin.py / inline_cswin.py LePEAttention: softmax inside stripes (idx 0: H_sp = the
    resolution, W_sp = split_size; idx 1: the transpose; idx -1: the whole grid) plus LePE, a 3x3
    depthwise convolution of V inside each stripe."""

    def __init__(self, dim, resolution, idx, split_size=7, dim_out=None, num_heads=8, attn_drop=0.,
                 proj_drop=0., qk_scale=None):
        super().__init__()
        self.dim, self.resolution, self.split_size, self.num_heads = dim, resolution, split_size, num_heads
        self.scale = qk_scale or (dim // num_heads) ** -0.5
        self.H_sp, self.W_sp = {-1: (resolution, resolution), 0: (resolution, split_size),
                                1: (split_size, resolution)}[idx]
        self.get_v = nn.Conv2d(dim, dim, kernel_size=3, stride=1, padding=1, groups=dim)

    def attention(self, q, k):
        """The softmax weights per stripe, [B * windows, heads, M, M]."""
        r = self.resolution
        q, k = (_img2windows(t, self.H_sp, self.W_sp, r, r).reshape(
            -1, self.H_sp * self.W_sp, self.num_heads, self.dim // self.num_heads).permute(0, 2, 1, 3)
            for t in (q, k))
        return torch.softmax((q * self.scale) @ k.transpose(-2, -1), dim=-1)

    def forward(self, qkv):
        q, k, v = qkv[0], qkv[1], qkv[2]
        r, (h_sp, w_sp), c = self.resolution, (self.H_sp, self.W_sp), q.shape[-1]
        vw = _img2windows(v, h_sp, w_sp, r, r)  # [B', M, C]
        img = vw.transpose(1, 2).reshape(-1, c, h_sp, w_sp)
        lepe = self.get_v(img).reshape(-1, self.num_heads, c // self.num_heads, h_sp * w_sp)
        lepe = lepe.permute(0, 1, 3, 2)
        vh = vw.reshape(-1, h_sp * w_sp, self.num_heads, c // self.num_heads).permute(0, 2, 1, 3)
        x = self.attention(q, k) @ vh + lepe
        x = x.transpose(1, 2).reshape(-1, h_sp * w_sp, c)
        return _windows2img(x, h_sp, w_sp, r, r)


class CSWinBlock(nn.Module):
    """flatten_cswin.py / inline_cswin.py CSWinBlock: qkv of norm1(x), the first half of the
    channels (and heads) to attns[0] in vertical stripes, the second to attns[1] in horizontal ones
    (one attention over the whole grid in the last stage), then proj."""

    def __init__(self, dim, reso, num_heads, split_size=7, qkv_bias=False, last_stage=False):
        super().__init__()
        self.dim, self.num_heads, self.patches_resolution, self.split_size = dim, num_heads, reso, split_size
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.norm1 = nn.LayerNorm(dim)
        last_stage = last_stage or reso == split_size
        self.branch_num = 1 if last_stage else 2
        self.proj = nn.Linear(dim, dim)
        if last_stage:
            self.attns = nn.ModuleList([LePEAttention(dim, reso, -1, split_size, num_heads=num_heads)])
        else:
            self.attns = nn.ModuleList([LePEAttention(dim // 2, reso, i, split_size,
                                                      num_heads=num_heads // 2) for i in range(2)])

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(b, -1, 3, c).permute(2, 0, 1, 3)
        if self.branch_num == 2:
            out = torch.cat([self.attns[0](qkv[:, :, :, :c // 2]),
                             self.attns[1](qkv[:, :, :, c // 2:])], dim=2)
        else:
            out = self.attns[0](qkv)
        return x + self.proj(out)


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
