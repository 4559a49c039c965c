"""Reference PyTorch attention modules and a small timm-compatible vision transformer.

These are re-implementations (no code copied) of the attention of the three papers' released code,
for one head-split layout [B, heads, N, d] and a token sequence of P prefix tokens (CLS) followed by
an H x W grid, token index = P + y*W + x (the attnlens.dump layout):

  Attention              softmax, timm's `Attention` (fused `qkv` Linear, `num_heads`, `scale`,
                         `q_norm`/`k_norm`, `fused_attn`)
  LinearReLUAttention    linear attention with the ReLU kernel, normalised as in FLatten's code
  FocusedLinearAttention FLatten (LeapLabTHU/FLatten-Transformer, models/flatten_swin.py, HEAD)
  InLineAttention        InLine (LeapLabTHU/InLine, models/inline_deit.py)
  MALAAttention          MALA (qhfan/MALA, classfication_release/model.py, AddLinearAttention)

Window attention (Swin, format.md 1b), following timm's swin_transformer.py structure and names:
  WindowAttention        softmax within Mh x Mw windows with the relative position bias table and
                         the optional shifted-window mask (timm's `WindowAttention`)
  WindowLinearReLUAttention  LinearReLUAttention within windows; it accepts the mask and ignores
                         it, as the papers' released linear Swin attentions do
  SwinTransformerBlock   roll by -shift, window_partition, attention, window_reverse, roll back
                         (timm's block, with `input_resolution`, `window_size`, `shift_size`,
                         `attn_mask`)

Every module has `attention_parts(x)`: the attention output O = A V per head [B, heads, N, d]
*before* the depthwise convolution / local residual / gating / output projection, plus the tensors
the exporter writes. `forward` adds those extras exactly as the released code does. The modules
other than the timm-style `Attention` implement the exporter protocol (`attnlens_qkv`,
`attnlens_layer_attrs`, see attnlens_export.py). The three with a local branch (FLatten's DWC,
InLine's residual, MALA's LePE) also implement `attnlens_local_branch(x)` (format.md 1a) and
`attention_with_local_branch(x)`: O + the branch per head [B, heads, N, d], the tensor `forward`
merges and projects (MALA: before its gate), i.e. what attnlens-cli's `output_with_local_branch`
computes from the dump. Where and why each module deviates from the issue's
paradigm definitions is written down in README.md next to this file.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PARADIGMS = ("softmax", "linear_relu", "focused", "inline", "mala")

# The epsilon every released code adds (FLatten: kernel shift and normaliser; MALA: 1/(z + eps)).
RELEASED_EPS = 1e-6


def has_sdpa():
    """True when torch provides scaled_dot_product_attention (torch >= 2.0)."""
    return hasattr(F, "scaled_dot_product_attention")


def _sdpa(q, k, v, dropout_p=0.0):
    # The fused path never exposes the attention matrix; on torch < 2.0 the same contract is kept
    # with an explicit computation whose weights stay local.
    if has_sdpa():
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
    weights = torch.softmax((q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1), dim=-1)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights @ v


def _split_qkv(qkv, num_heads):
    """[B, N, 3C] -> three [B, heads, N, d] tensors (timm's channel order: (3, heads, d))."""
    b, n, three_c = qkv.shape
    c = three_c // 3
    qkv = qkv.reshape(b, n, 3, num_heads, c // num_heads).permute(2, 0, 3, 1, 4)
    return qkv.unbind(0)


def _merge_heads(x):
    """[B, heads, N, d] -> [B, N, heads*d]."""
    b, h, n, d = x.shape
    return x.transpose(1, 2).reshape(b, n, h * d)


def _check_layout(n, grid, prefix_tokens):
    if n != prefix_tokens + grid[0] * grid[1]:
        raise ValueError(
            f"token count {n} != prefix_tokens {prefix_tokens} + grid {grid[0]}x{grid[1]}")


def _focused(t, scale, factor):
    """FLatten's focused map over all C channels: f_p((ReLU(t) + 1e-6) / softplus(scale)), the norm
    kept: x ** p rescaled to the norm of x (the released code's order of operations)."""
    t = (F.relu(t) + RELEASED_EPS) / F.softplus(scale)
    norm = t.norm(dim=-1, keepdim=True)
    t = t ** factor
    return t / t.norm(dim=-1, keepdim=True) * norm


def _released_divide(phi_q, phi_k, v):
    """FLatten's released normalisation: phi(q) [sum_j phi(k_j)^T v_j / n] / (phi(q) . mean phi(k)
    + eps), n the keys (A_ij = phi(q_i).phi(k_j) / (sum_m phi(q_i).phi(k_m) + n eps))."""
    n = phi_k.shape[-2]
    z = 1.0 / (phi_q @ phi_k.mean(dim=-2, keepdim=True).transpose(-2, -1) + RELEASED_EPS)
    kv = (phi_k.transpose(-2, -1) * n ** -0.5) @ (v * n ** -0.5)
    return phi_q @ kv * z


class Attention(nn.Module):
    """Softmax multi-head self-attention with timm's interface and parameter names."""

    def __init__(self, dim, num_heads=8, qkv_bias=False, qk_norm=False, attn_drop=0.0,
                 proj_drop=0.0, fused_attn=None, **_unused):
        super().__init__()
        assert dim % num_heads == 0, "dim must be divisible by num_heads"
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.fused_attn = has_sdpa() if fused_attn is None else bool(fused_attn)
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.q_norm = nn.LayerNorm(self.head_dim) if qk_norm else nn.Identity()
        self.k_norm = nn.LayerNorm(self.head_dim) if qk_norm else nn.Identity()
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def attention_parts(self, x):
        q, k, v = _split_qkv(self.qkv(x), self.num_heads)
        q, k = self.q_norm(q), self.k_norm(k)
        if self.fused_attn:
            out = _sdpa(q, k, v, dropout_p=self.attn_drop.p if self.training else 0.0)
        else:
            attn = (q * self.scale) @ k.transpose(-2, -1)
            attn = attn.softmax(dim=-1)
            # timm applies attn_drop to the weights; a forward hook on it sees softmax(s q k^T).
            attn = self.attn_drop(attn)
            out = attn @ v
        return {"out": out, "q": q, "k": k, "v": v}

    def forward(self, x):
        x = _merge_heads(self.attention_parts(x)["out"])
        return self.proj_drop(self.proj(x))


class LinearReLUAttention(nn.Module):
    """Linear attention with phi = ReLU, normalised as FLatten's released code does:
    O_i = phi(q_i) [sum_j phi(k_j)^T v_j / N] / (phi(q_i) . mean_j phi(k_j) + eps),
    i.e. A_ij = phi(q_i).phi(k_j) / (sum_m phi(q_i).phi(k_m) + N eps), eps = 1e-6."""

    def __init__(self, dim, num_heads=8, qkv_bias=False, proj_drop=0.0, **_unused):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5  # not used by the attention; recorded for softmax views
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def attnlens_qkv(self, x):
        return _split_qkv(self.qkv(x), self.num_heads)

    def attnlens_layer_attrs(self):
        return {"attention": "linear_relu", "kernel_applied": 0, "scale": self.scale}

    def attention_parts(self, x):
        q, k, v = self.attnlens_qkv(x)
        return {"out": _released_divide(F.relu(q), F.relu(k), v), "q": q, "k": k, "v": v}

    def forward(self, x):
        x = _merge_heads(self.attention_parts(x)["out"])
        return self.proj_drop(self.proj(x))


class FocusedLinearAttention(nn.Module):
    """FLatten's focused linear attention as in the released code's current version:
    a learnable positional encoding added to k; phi(x) = f_p((ReLU(x) + 1e-6) / softplus(s)) with
    a learnable per-channel s, taken over ALL C channels before the head split (the norms in f_p
    run over C, not over a head's d); normaliser
    1/(phi(q).mean(phi(k)) + 1e-6) (equal to the divide normalisation with N*eps);
    a depthwise kernel_size x kernel_size convolution of V, shared by the heads, added to the
    output of the grid tokens (prefix tokens get none: the released code has no CLS token).

    The dump stores phi(q), phi(k) with kernel_applied = 1: the full-channel norm and the learnable
    scale cannot be expressed by a per-head kernel on raw q/k."""

    def __init__(self, dim, num_heads=8, grid=(14, 14), prefix_tokens=1, qkv_bias=False,
                 proj_drop=0.0, focusing_factor=3, kernel_size=5, **_unused):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.grid = tuple(grid)
        self.prefix_tokens = prefix_tokens
        self.focusing_factor = focusing_factor
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        self.dwc = nn.Conv2d(self.head_dim, self.head_dim, kernel_size=kernel_size,
                             groups=self.head_dim, padding=kernel_size // 2)
        self.scale = nn.Parameter(torch.zeros(1, 1, dim))
        n = prefix_tokens + self.grid[0] * self.grid[1]
        self.positional_encoding = nn.Parameter(torch.zeros(1, n, dim))

    def _features(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, c).permute(2, 0, 1, 3).unbind(0)
        q = _focused(q, self.scale, self.focusing_factor)
        k = _focused(k + self.positional_encoding, self.scale, self.focusing_factor)
        heads = lambda t: t.reshape(b, n, self.num_heads, -1).permute(0, 2, 1, 3)
        return heads(q), heads(k), heads(v)

    def attnlens_qkv(self, x):
        return self._features(x)

    def attnlens_layer_attrs(self):
        return {"attention": "focused", "kernel_applied": 1, "scale": self.head_dim ** -0.5}

    def attention_parts(self, x):
        q, k, v = self._features(x)
        return {"out": _released_divide(q, k, v), "q": q, "k": k, "v": v}

    def attnlens_local_branch(self, _x=None):
        # The one Conv2d(head_dim, head_dim, groups=head_dim) runs on v reshaped to
        # (b * heads, d, h, w): weight channel c acts on channel c of every head.
        return {"kind": "dwc", "channels": "per_head", "weight": self.dwc.weight[:, 0],
                "bias": self.dwc.bias}

    def attention_with_local_branch(self, x):
        """O + DWC(V) on the grid tokens, per head [B, heads, N, d] (before the projection)."""
        b, n, c = x.shape
        _check_layout(n, self.grid, self.prefix_tokens)
        parts = self.attention_parts(x)
        out = parts["out"]
        h, w, p = self.grid[0], self.grid[1], self.prefix_tokens
        v = parts["v"][:, :, p:, :]
        v = v.reshape(b * self.num_heads, h, w, self.head_dim).permute(0, 3, 1, 2)
        # [b*heads, d, h, w] -> [b, heads, h*w, d]: the released code's reshape(b, c, h*w) keeps
        # this channel order (head-major, as the head merge).
        local = self.dwc(v).reshape(b, self.num_heads, self.head_dim, h * w).transpose(-2, -1)
        return torch.cat([out[:, :, :p], out[:, :, p:] + local], dim=2)

    def forward(self, x):
        out = _merge_heads(self.attention_with_local_branch(x))
        return self.proj_drop(self.proj(out))


class InLineAttention(nn.Module):
    """InLine attention as in the released DeiT code: kernel identity (or ReLU, as the Swin code
    allows), O_i = phi(q_i) [(s/N) sum_j phi(k_j)^T v_j] + (1 - s phi(q_i).mean_j phi(k_j)) mean_j v_j
    with s = d^-1/2, i.e. A_ij = D_ij - z_i/N + 1/N, D_ij = c phi(q_i).phi(k_j), c = 1/(sqrt(d) N),
    N counting the CLS token. The local residual is a 3x3 depthwise convolution of V on the grid
    tokens whose per-(image, channel) weights are predicted from the mean token."""

    def __init__(self, dim, num_heads=8, grid=(14, 14), prefix_tokens=1, qkv_bias=False,
                 proj_drop=0.0, kernel_func="identity", **_unused):
        super().__init__()
        if kernel_func not in ("identity", "relu"):
            raise ValueError(f"InLine kernel_func must be identity or relu, got {kernel_func}")
        self.dim = dim
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.grid = tuple(grid)
        self.prefix_tokens = prefix_tokens
        self.kernel_func = kernel_func
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        self.residual = nn.Sequential(
            nn.Conv1d(dim, dim, kernel_size=1, groups=num_heads),
            nn.GELU(),
            nn.Conv1d(dim, dim * 9, kernel_size=1, groups=num_heads),
        )

    def attnlens_qkv(self, x):
        return _split_qkv(self.qkv(x), self.num_heads)

    def attnlens_layer_attrs(self):
        name = "inline" if self.kernel_func == "identity" else "inline_relu"
        return {"attention": name, "kernel_applied": 0, "scale": self.scale}

    def attention_parts(self, x):
        q, k, v = self.attnlens_qkv(x)
        phi_q, phi_k = (F.relu(q), F.relu(k)) if self.kernel_func == "relu" else (q, k)
        n = k.shape[-2]
        kv = (phi_k.transpose(-2, -1) * (self.scale / n) ** 0.5) @ (v * (self.scale / n) ** 0.5)
        z = phi_q @ phi_k.mean(dim=2, keepdim=True).transpose(-2, -1) * self.scale
        out = phi_q @ kv + (1 - z) * v.mean(dim=2, keepdim=True)
        return {"out": out, "q": q, "k": k, "v": v}

    def residual_weight(self, x):
        """The local residual's per-image kernels [B, C, 3, 3], predicted from the mean token
        (prefix tokens included, as the released code's x.mean(dim=1)); channel h*d + c."""
        b, _, c = x.shape
        return self.residual(x.mean(dim=1).unsqueeze(-1)).reshape(b, c, 3, 3)

    def attnlens_local_branch(self, x):
        # forward's reshape(b * c, 1, 3, 3) is this [B, C, 3, 3] flattened; v is merged as h*d + c.
        return {"kind": "inline_residual", "channels": "all", "weight": self.residual_weight(x)}

    def attention_with_local_branch(self, x):
        """O + the local residual on the grid tokens, per head [B, heads, N, d] (before the
        projection)."""
        b, n, c = x.shape
        _check_layout(n, self.grid, self.prefix_tokens)
        res_weight = self.residual_weight(x).reshape(b * c, 1, 3, 3)
        parts = self.attention_parts(x)
        out = parts["out"]
        h, w, p = self.grid[0], self.grid[1], self.prefix_tokens
        v = parts["v"][:, :, p:, :].transpose(1, 2).reshape(b, h, w, c)
        v = v.permute(0, 3, 1, 2).reshape(1, b * c, h, w)
        local = F.conv2d(v, res_weight, None, padding=(1, 1), groups=b * c)
        local = local.reshape(b, self.num_heads, self.head_dim, h * w).transpose(-2, -1)
        return torch.cat([out[:, :, :p], out[:, :, p:] + local], dim=2)

    def forward(self, x):
        out = _merge_heads(self.attention_with_local_branch(x))
        return self.proj_drop(self.proj(out))


def _rotate_every_two(x):
    x1 = x[..., ::2]
    x2 = x[..., 1::2]
    return torch.stack([-x2, x1], dim=-1).flatten(-2)


def mala_rope_tables(grid, prefix_tokens, head_dim, device=None, dtype=None):
    """MALA's 2-D rotary tables (sin, cos), [N, d]: d/4 frequencies 10000^-linspace(0, 1, d/4),
    each used twice, the first d/2 channels rotated by the row y, the last d/2 by the column x.
    Prefix tokens (absent from MALA, which has no CLS token) are left unrotated (sin 0, cos 1)."""
    if head_dim % 4 != 0:
        raise ValueError(f"MALA's RoPE needs head_dim divisible by 4, got {head_dim}")
    h, w = grid
    angle = 1.0 / (10000 ** torch.linspace(0, 1, head_dim // 4))
    angle = angle.unsqueeze(-1).repeat(1, 2).flatten()
    ys = torch.arange(h, dtype=angle.dtype)[:, None] * angle[None, :]
    xs = torch.arange(w, dtype=angle.dtype)[:, None] * angle[None, :]
    sin = torch.cat([torch.sin(ys).unsqueeze(1).repeat(1, w, 1),
                     torch.sin(xs).unsqueeze(0).repeat(h, 1, 1)], -1).flatten(0, 1)
    cos = torch.cat([torch.cos(ys).unsqueeze(1).repeat(1, w, 1),
                     torch.cos(xs).unsqueeze(0).repeat(h, 1, 1)], -1).flatten(0, 1)
    sin = torch.cat([torch.zeros(prefix_tokens, head_dim), sin], 0)
    cos = torch.cat([torch.ones(prefix_tokens, head_dim), cos], 0)
    return sin.to(device=device, dtype=dtype), cos.to(device=device, dtype=dtype)


class MALAAttention(nn.Module):
    """MALA's magnitude-aware linear attention as in the released classification code:
    phi = ELU + 1, z_i = s phi(q_i).mean_j phi(k_j), O_i = phi(q_i) [(s/N) sum_j phi(k_j)^T v_j]
    (1 + 1/(z_i + 1e-6)) - z_i mean_j v_j, s = d^-1/2, i.e. A_ij = D_ij (1 + 1/(z_i + eps)) - z_i/N,
    D_ij = c phi(q_i).phi(k_j), c = 1/(sqrt(d) N). Then a 5x5 depthwise convolution of V (LePE) on
    the grid tokens, a multiplicative output gate (the `o` of the released `qkvo`) and the projection.

    rope=True applies the released code's 2-D RoPE to phi(q), phi(k) AFTER z is computed, so D uses
    rotated and z unrotated vectors: the exporter protocol then returns the rotated features as q/k
    (kernel applied) and the unrotated ones as the normaliser features (format.md 1d). The gate
    is returned as output_gate. rope=False (the example models) keeps the attention exactly the
    paper's Eq. 8-9."""

    def __init__(self, dim, num_heads=8, grid=(14, 14), prefix_tokens=1, qkv_bias=True,
                 proj_drop=0.0, rope=False, **_unused):
        super().__init__()
        self.dim = dim
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.grid = tuple(grid)
        self.prefix_tokens = prefix_tokens
        self.rope = rope
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.gate = nn.Linear(dim, dim, bias=qkv_bias)
        self.lepe = nn.Conv2d(dim, dim, 5, 1, 2, groups=dim)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def attnlens_qkv(self, x):
        q, k, v = _split_qkv(self.qkv(x), self.num_heads)
        gate = self.gate(x).reshape(x.shape[0], x.shape[1], self.num_heads, -1).transpose(1, 2)
        if not self.rope:
            return {"q": q, "k": k, "v": v, "output_gate": gate}
        parts = self.attention_parts(x)
        return {"q": parts["phi_q"], "k": parts["phi_k"], "v": v, "output_gate": gate,
                "q_normaliser": F.elu(q) + 1, "k_normaliser": F.elu(k) + 1}

    def attnlens_layer_attrs(self):
        return {"attention": "mala", "kernel_applied": 1 if self.rope else 0, "scale": self.scale}

    def attention_parts(self, x):
        q, k, v = _split_qkv(self.qkv(x), self.num_heads)
        n = k.shape[-2]
        phi_q = F.elu(q) + 1
        phi_k = F.elu(k) + 1
        z = phi_q @ phi_k.mean(dim=-2, keepdim=True).transpose(-2, -1) * self.scale
        if self.rope:
            sin, cos = mala_rope_tables(self.grid, self.prefix_tokens, self.head_dim,
                                        device=x.device, dtype=x.dtype)
            phi_q = phi_q * cos + _rotate_every_two(phi_q) * sin
            phi_k = phi_k * cos + _rotate_every_two(phi_k) * sin
        kv = (phi_k.transpose(-2, -1) * (self.scale / n) ** 0.5) @ (v * (self.scale / n) ** 0.5)
        out = phi_q @ kv * (1 + 1 / (z + RELEASED_EPS)) - z * v.mean(dim=2, keepdim=True)
        return {"out": out, "q": q, "k": k, "v": v, "phi_q": phi_q, "phi_k": phi_k, "z": z}

    def attnlens_local_branch(self, _x=None):
        # LePE: Conv2d(dim, dim, 5, groups=dim) on the merged heads (channel h*d + c).
        return {"kind": "lepe", "channels": "all", "weight": self.lepe.weight[:, 0],
                "bias": self.lepe.bias}

    def attention_with_local_branch(self, x):
        """O + LePE(V) on the grid tokens, per head [B, heads, N, d] (before the gate and the
        projection)."""
        b, n, c = x.shape
        _check_layout(n, self.grid, self.prefix_tokens)
        parts = self.attention_parts(x)
        out = parts["out"]
        h, w, p = self.grid[0], self.grid[1], self.prefix_tokens
        v = _merge_heads(parts["v"])[:, p:, :].transpose(1, 2).reshape(b, c, h, w)
        local = self.lepe(v).reshape(b, self.num_heads, self.head_dim, h * w).transpose(-2, -1)
        return torch.cat([out[:, :, :p], out[:, :, p:] + local], dim=2)

    def forward(self, x):
        out = _merge_heads(self.attention_with_local_branch(x))
        return self.proj_drop(self.proj(out * self.gate(x)))


def window_partition(x, window_size):
    """timm: [B, H, W, C] -> [B * windows, Mh, Mw, C], windows row-major, then positions."""
    b, h, w, c = x.shape
    mh, mw = window_size
    x = x.view(b, h // mh, mh, w // mw, mw, c)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, mh, mw, c)


def window_reverse(windows, window_size, h, w):
    """timm: the inverse of window_partition."""
    mh, mw = window_size
    c = windows.shape[-1]
    x = windows.view(-1, h // mh, w // mw, mh, mw, c)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, h, w, c)


def relative_position_index(mh, mw):
    """timm's get_relative_position_index: [Mh*Mw, Mh*Mw] indices into the bias table."""
    coords = torch.stack(torch.meshgrid(torch.arange(mh), torch.arange(mw), indexing="ij"))
    coords = coords.flatten(1)
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0).contiguous()
    rel[:, :, 0] += mh - 1
    rel[:, :, 1] += mw - 1
    rel[:, :, 0] *= 2 * mw - 1
    return rel.sum(-1)


class WindowAttention(nn.Module):
    """timm's WindowAttention: softmax attention within each window of Mh*Mw tokens, logits
    s q.k + relative position bias (+ the shifted-window mask)."""

    def __init__(self, dim, num_heads, window_size, qkv_bias=True, **_unused):
        super().__init__()
        self.dim = dim
        self.window_size = tuple(window_size)
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        mh, mw = self.window_size
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * mh - 1) * (2 * mw - 1), num_heads))
        self.register_buffer("relative_position_index",
                             relative_position_index(mh, mw).view(-1), persistent=False)
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def _get_rel_pos_bias(self):
        m = self.window_size[0] * self.window_size[1]
        bias = self.relative_position_bias_table[self.relative_position_index].view(m, m, -1)
        return bias.permute(2, 0, 1).contiguous().unsqueeze(0)

    def attention_parts(self, x, mask=None):
        b_, n, _ = x.shape
        q, k, v = _split_qkv(self.qkv(x), self.num_heads)
        attn = (q * self.scale) @ k.transpose(-2, -1) + self._get_rel_pos_bias()
        if mask is not None:
            windows = mask.shape[0]
            attn = attn.view(-1, windows, self.num_heads, n, n) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.num_heads, n, n)
        attn = attn.softmax(dim=-1)
        return {"out": attn @ v, "attn": attn, "q": q, "k": k, "v": v}

    def forward(self, x, mask=None):
        return self.proj(_merge_heads(self.attention_parts(x, mask)["out"]))


class MaskIgnoredInWindows:
    """Mixin for the papers' linear window attentions: Swin's block passes its mask, and they accept
    and ignore it (so their dumps say window_mask = false)."""

    def attnlens_layer_attrs(self):
        return dict(super().attnlens_layer_attrs(), window_mask=False)

    def attention_parts(self, x, mask=None):
        return super().attention_parts(x)

    def forward(self, x, mask=None):
        return super().forward(x)


class WindowLinearReLUAttention(MaskIgnoredInWindows, LinearReLUAttention):
    """LinearReLUAttention within windows (N = Mh*Mw); the mask is accepted and ignored, as in
    the papers' released linear Swin attentions (the dump says window_mask = false)."""

    def __init__(self, dim, num_heads, window_size, qkv_bias=True, **_unused):
        super().__init__(dim, num_heads=num_heads, qkv_bias=qkv_bias)
        self.window_size = tuple(window_size)


class WindowFocusedLinearAttention(MaskIgnoredInWindows, FocusedLinearAttention):
    """FLatten-Swin's FocusedLinearAttention: the focused linear attention within each window
    (N = Mh*Mw, the positional encoding over a window's positions), the mask accepted and ignored,
    and the depthwise convolution of each window's V (zero padding at the window's edges):
    attention_with_local_branch on [B * windows, Mh*Mw, C] treats every window as an image."""

    def __init__(self, dim, num_heads, window_size, qkv_bias=True, kernel_size=5, **_unused):
        super().__init__(dim, num_heads=num_heads, grid=tuple(window_size), prefix_tokens=0,
                         qkv_bias=qkv_bias, kernel_size=kernel_size)
        self.window_size = tuple(window_size)


class WindowInLineAttention(MaskIgnoredInWindows, InLineAttention):
    """InLine-Swin's InLineAttention: InLine attention within each window (N = Mh*Mw), the mask
    accepted and ignored, and the 3x3 residual of each window's V whose kernels the residual MLP
    predicts from that window's mean token (one kernel per image, window and channel)."""

    def __init__(self, dim, num_heads, window_size, qkv_bias=True, kernel_func="identity",
                 **_unused):
        super().__init__(dim, num_heads=num_heads, grid=tuple(window_size), prefix_tokens=0,
                         qkv_bias=qkv_bias, kernel_func=kernel_func)
        self.window_size = tuple(window_size)


class SwinTransformerBlock(nn.Module):
    """timm's SwinTransformerBlock on [B, H, W, C]: x + attn(norm1(x)) computed as roll(-shift),
    window_partition, attention per window (with attn_mask when shifted), window_reverse,
    roll(+shift); then the MLP."""

    def __init__(self, dim, input_resolution, num_heads, window_size=7, shift_size=0,
                 mlp_ratio=2.0, attn_layer=WindowAttention):
        super().__init__()
        self.input_resolution = tuple(input_resolution)
        self.window_size = (window_size, window_size)
        self.shift_size = (shift_size, shift_size)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = attn_layer(dim, num_heads=num_heads, window_size=self.window_size)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        self.register_buffer("attn_mask", self.get_attn_mask(), persistent=False)

    def get_attn_mask(self):
        if not any(self.shift_size):
            return None
        h, w = self.input_resolution
        (mh, mw), (sh, sw) = self.window_size, self.shift_size
        img_mask = torch.zeros((1, h, w, 1))
        cnt = 0
        for hs in ((0, -mh), (-mh, -sh), (-sh, None)):
            for ws in ((0, -mw), (-mw, -sw), (-sw, None)):
                img_mask[:, hs[0]:hs[1], ws[0]:ws[1], :] = cnt
                cnt += 1
        mask_windows = window_partition(img_mask, self.window_size).view(-1, mh * mw)
        mask = mask_windows.unsqueeze(1) - mask_windows.unsqueeze(2)
        return mask.masked_fill(mask != 0, float(-100.0)).masked_fill(mask == 0, float(0.0))

    def windows_of(self, x):
        """[B, H, W, C] -> the attention's input windows [B * windows, Mh*Mw, C]."""
        shifted = torch.roll(x, shifts=(-self.shift_size[0], -self.shift_size[1]), dims=(1, 2)) \
            if any(self.shift_size) else x
        c = x.shape[-1]
        return window_partition(shifted, self.window_size).view(-1, self.window_size[0] *
                                                                self.window_size[1], c)

    def grid_of(self, windows, h, w):
        """The inverse of windows_of: [B * windows, Mh*Mw, C] -> [B, H, W, C]."""
        c = windows.shape[-1]
        shifted = window_reverse(windows.view(-1, *self.window_size, c), self.window_size, h, w)
        return torch.roll(shifted, shifts=self.shift_size, dims=(1, 2)) \
            if any(self.shift_size) else shifted

    def forward(self, x):
        b, h, w, c = x.shape
        attended = self.attn(self.windows_of(self.norm1(x)), mask=self.attn_mask)
        x = x + self.grid_of(attended, h, w)
        x = x.reshape(b, h * w, c)
        x = x + self.mlp(self.norm2(x))
        return x.reshape(b, h, w, c)


ATTENTION_CLASSES = {
    "softmax": Attention,
    "linear_relu": LinearReLUAttention,
    "focused": FocusedLinearAttention,
    "inline": InLineAttention,
    "mala": MALAAttention,
}


def make_attention(paradigm, dim, num_heads, grid, prefix_tokens, **kwargs):
    try:
        cls = ATTENTION_CLASSES[paradigm]
    except KeyError:
        raise ValueError(f"unknown paradigm {paradigm!r}; known: {', '.join(ATTENTION_CLASSES)}")
    return cls(dim, num_heads=num_heads, grid=grid, prefix_tokens=prefix_tokens, **kwargs)


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, attn, dim, mlp_ratio=2.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = attn
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


# ---- CSwin's cross-shaped windows (per-head stripes; format.md 1b) -----------------------------


def cswin_img2windows(t, h_sp, w_sp, h, w):
    """[B, H*W, C] -> [B * windows, h_sp * w_sp, C] (CSwin's img2windows on the transposed map)."""
    b, _, c = t.shape
    t = t.transpose(-2, -1).reshape(b, c, h // h_sp, h_sp, w // w_sp, w_sp)
    return t.permute(0, 2, 4, 3, 5, 1).reshape(-1, h_sp * w_sp, c)


def cswin_windows2img(t, h_sp, w_sp, h, w):
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
        q, k = (cswin_img2windows(t, self.H_sp, self.W_sp, r, r).reshape(
            -1, self.H_sp * self.W_sp, self.num_heads, self.dim // self.num_heads).permute(0, 2, 1, 3)
            for t in (q, k))
        return torch.softmax((q * self.scale) @ k.transpose(-2, -1), dim=-1)

    def forward(self, qkv):
        q, k, v = qkv[0], qkv[1], qkv[2]
        r, (h_sp, w_sp), c = self.resolution, (self.H_sp, self.W_sp), q.shape[-1]
        vw = cswin_img2windows(v, h_sp, w_sp, r, r)  # [B', M, C]
        img = vw.transpose(1, 2).reshape(-1, c, h_sp, w_sp)
        lepe = self.get_v(img).reshape(-1, self.num_heads, c // self.num_heads, h_sp * w_sp)
        lepe = lepe.permute(0, 1, 3, 2)
        vh = vw.reshape(-1, h_sp * w_sp, self.num_heads, c // self.num_heads).permute(0, 2, 1, 3)
        x = self.attention(q, k) @ vh + lepe
        x = x.transpose(1, 2).reshape(-1, h_sp * w_sp, c)
        return cswin_windows2img(x, h_sp, w_sp, r, r)


class CSWinBlock(nn.Module):
    """flatten_cswin.py / inline_cswin.py CSWinBlock: qkv of norm1(x), the first half of the
    channels (and heads) to attns[0] in vertical stripes (reso x split_size), the second to attns[1]
    in horizontal ones (split_size x reso), one attention over the whole grid in the last stage;
    then proj and the residual, then x + mlp(norm2(x)) (mlp_ratio 0: no MLP, the attention part
    alone). Tokens [B, reso*reso, C], no prefix token."""

    def __init__(self, dim, reso, num_heads, split_size=7, mlp_ratio=0.0, qkv_bias=False,
                 last_stage=False):
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
        self.norm2 = nn.LayerNorm(dim) if mlp_ratio > 0 else None
        self.mlp = Mlp(dim, int(dim * mlp_ratio)) if mlp_ratio > 0 else None

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(b, -1, 3, c).permute(2, 0, 1, 3)
        if self.branch_num == 2:
            out = torch.cat([self.attns[0](qkv[:, :, :, :c // 2]),
                             self.attns[1](qkv[:, :, :, c // 2:])], dim=2)
        else:
            out = self.attns[0](qkv)
        x = x + self.proj(out)
        return x if self.mlp is None else x + self.mlp(self.norm2(x))


def sincos_2d_position_embedding(embed_dim, grid, prefix_tokens):
    """MAE's 2D sin-cos position embedding (get_2d_sincos_pos_embed, re-implemented): the first half
    of the channels encode the token's column, the second half its row, each as [sin(p w), cos(p w)]
    with w_i = 1 / 10000^(i / (D/4)), i < D/4; the prefix tokens' rows are zero. [1, P + H*W, D]."""
    if embed_dim % 4:
        raise ValueError(f"2D sin-cos positions need embed_dim divisible by 4, not {embed_dim}")
    quarter = embed_dim // 4
    omega = 1.0 / 10000.0 ** (torch.arange(quarter, dtype=torch.float64) / quarter)
    ys, xs = torch.meshgrid(torch.arange(grid[0], dtype=torch.float64),
                            torch.arange(grid[1], dtype=torch.float64), indexing="ij")

    def one_axis(pos):
        out = pos.reshape(-1, 1) * omega.reshape(1, -1)
        return torch.cat([out.sin(), out.cos()], dim=1)

    table = torch.cat([one_axis(xs), one_axis(ys)], dim=1)
    table = torch.cat([torch.zeros(prefix_tokens, embed_dim, dtype=torch.float64), table], dim=0)
    return table.unsqueeze(0).float()


def mimetic_qk_init(model, gain=2.0):
    """Mimetic initialisation of every attention's fused `qkv` Linear (Trockman & Kolter 2023, as
    issue 46 measured it): W_k := W_q, both scaled by `gain`, the q and k biases zero, so that
    W_q W_k^T starts positive semi-definite and every query starts out attending to keys like
    itself: with 2D sin-cos positions, to its spatial neighbours. V and the other layers keep their
    initialisation. Returns the number of layers changed."""
    changed = 0
    with torch.no_grad():
        for module in model.modules():
            qkv = getattr(module, "qkv", None)
            if not isinstance(qkv, nn.Linear) or qkv.out_features != 3 * qkv.in_features:
                continue
            c = qkv.in_features
            w_q = qkv.weight[:c] * gain
            qkv.weight[:c] = w_q
            qkv.weight[c:2 * c] = w_q
            if qkv.bias is not None:
                qkv.bias[:2 * c] = 0.0
            changed += 1
    return changed


class VisionTransformer(nn.Module):
    """A small timm-style ViT (DeiT layout: CLS token first, then the patch grid row-major;
    `blocks[i].attn` is the attention module). Same size and recipe for every paradigm.

    The patch embedding is a small convolutional stem (3x3 conv, BatchNorm, GELU, then the
    patch_size x patch_size stride-patch_size projection), as MALA's models use, so the token grid
    is that of a plain patch embedding; on the 2-core budget it learns far faster than the plain
    linear patch projection (62% vs 34-47% Fashion-MNIST test accuracy after 3840 images).
    Linear layers keep PyTorch's default initialisation, which learned faster than ViT's
    trunc_normal(0.02) in the same budget. position_init "random" starts the learned position
    embedding at N(0, 0.02) (timm's); "sincos" at MAE's 2D sin-cos table (CLS row zero), still
    learnable: the bundled example's, with mimetic_qk_init (issue 46: without both, a small ViT
    trained on Fashion-MNIST keeps softmax rows nearly flat)."""

    def __init__(self, paradigm="softmax", img_size=28, patch_size=2, in_chans=1, num_classes=10,
                 embed_dim=96, depth=4, num_heads=3, mlp_ratio=2.0, stem_channels=32,
                 attn_kwargs=None, position_init="random"):
        super().__init__()
        self.paradigm = paradigm
        self.patch_size = patch_size
        self.grid = (img_size // patch_size, img_size // patch_size)
        self.prefix_tokens = 1
        n = self.prefix_tokens + self.grid[0] * self.grid[1]
        self.patch_embed = nn.Sequential(
            nn.Conv2d(in_chans, stem_channels, kernel_size=3, padding=1),
            nn.BatchNorm2d(stem_channels),
            nn.GELU(),
            nn.Conv2d(stem_channels, embed_dim, kernel_size=patch_size, stride=patch_size))
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        if position_init == "sincos":  # still learnable, started on the grid's geometry
            self.pos_embed = nn.Parameter(sincos_2d_position_embedding(embed_dim, self.grid,
                                                                       self.prefix_tokens))
        elif position_init == "random":
            self.pos_embed = nn.Parameter(torch.randn(1, n, embed_dim) * 0.02)
        else:
            raise ValueError(f"position_init {position_init!r}: expected 'random' or 'sincos'")
        attn_kwargs = dict(attn_kwargs or {})
        self.blocks = nn.ModuleList([
            Block(make_attention(paradigm, embed_dim, num_heads, self.grid, self.prefix_tokens,
                                 **attn_kwargs), embed_dim, mlp_ratio)
            for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.head = nn.Linear(embed_dim, num_classes)

    def forward_features(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.norm(x)

    def forward(self, x):
        return self.head(self.forward_features(x)[:, 0])


# ---- Spatial-reduction attention (PVT; format.md 1c) ----------------------------------------------


class PvtAttention(nn.Module):
    """PVT's spatial-reduction attention with timm's pvt_v2 parameter names: q from every token,
    k and v from the feature map reduced by a strided sr x sr convolution (then LayerNorm), or, in
    the linear variant, by an adaptive average pool to pool_size (then a 1x1 conv, LayerNorm and
    GELU); softmax over the n reduced keys. forward(x, feat_size) as timm's Block calls it."""

    def __init__(self, dim, num_heads=8, sr_ratio=1, linear_attn=False, pool_size=7, qkv_bias=True,
                 **_unused):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.kv = nn.Linear(dim, dim * 2, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.pool = nn.AdaptiveAvgPool2d(pool_size) if linear_attn else None
        self.sr = nn.Conv2d(dim, dim, kernel_size=1) if linear_attn else (
            nn.Conv2d(dim, dim, kernel_size=sr_ratio, stride=sr_ratio) if sr_ratio > 1 else None)
        self.norm = nn.LayerNorm(dim) if self.sr is not None else None
        self.act = nn.GELU() if linear_attn else None

    def attnlens_layer_attrs(self):
        return {"attention": "softmax", "scale": self.scale}

    def reduced(self, x, feat_size):
        """The tokens k and v are computed from: [B, n, C]."""
        if self.sr is None:
            return x
        b, _, c = x.shape
        x_ = x.permute(0, 2, 1).reshape(b, c, *feat_size)
        if self.pool is not None:
            x_ = self.pool(x_)
        x_ = self.norm(self.sr(x_).reshape(b, c, -1).permute(0, 2, 1))
        return self.act(x_) if self.act is not None else x_

    def attention_parts(self, x, feat_size):
        b, n, c = x.shape
        q = self.q(x).reshape(b, n, self.num_heads, -1).permute(0, 2, 1, 3)
        kv = self.kv(self.reduced(x, feat_size))
        k, v = kv.reshape(b, -1, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        attn = ((q @ k.transpose(-2, -1)) * self.scale).softmax(dim=-1)
        return {"out": attn @ v, "attn": attn, "q": q, "k": k, "v": v}

    def forward(self, x, feat_size):
        return self.proj(_merge_heads(self.attention_parts(x, feat_size)["out"]))


class PvtFocusedLinearAttention(nn.Module):
    """FLatten-PVT's focused linear attention (LeapLabTHU's flatten_pvt.py): k and v from the
    feature map reduced by a strided sr x sr convolution and LayerNorm; a learnable positional
    encoding of the n reduced keys added to k; phi as FocusedLinearAttention's, over all C
    channels; the divide normalisation over the n keys (n ** -0.5 twice and k.mean, as released).
    The released code then adds a depthwise kernel_size x kernel_size convolution (one Conv2d over
    head_dim, shared by the heads) of V linearly interpolated from n to N tokens along the token
    sequence (F.interpolate(mode="linear") on [B * heads, d, n]): exported with values
    "interpolated" (format.md 1c). Forward(x, H, W) as PVT v1's Block calls it."""

    def __init__(self, dim, num_heads=8, grid=(8, 8), sr_ratio=2, qkv_bias=False, focusing_factor=3,
                 kernel_size=5, **_unused):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.grid = tuple(grid)
        self.sr_ratio = sr_ratio
        self.focusing_factor = focusing_factor
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.kv = nn.Linear(dim, dim * 2, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.sr = nn.Conv2d(dim, dim, kernel_size=sr_ratio, stride=sr_ratio)
        self.norm = nn.LayerNorm(dim)
        self.scale = nn.Parameter(torch.zeros(1, 1, dim))
        self.key_grid = (self.grid[0] // sr_ratio, self.grid[1] // sr_ratio)
        self.positional_encoding = nn.Parameter(torch.zeros(1, self.key_grid[0] * self.key_grid[1], dim))
        self.dwc = nn.Conv2d(self.head_dim, self.head_dim, kernel_size=kernel_size, groups=self.head_dim,
                             padding=kernel_size // 2)

    def _features(self, x):
        b, n, c = x.shape
        q = self.q(x)
        x_ = self.sr(x.permute(0, 2, 1).reshape(b, c, *self.grid)).reshape(b, c, -1).permute(0, 2, 1)
        k, v = self.kv(self.norm(x_)).reshape(b, -1, 2, c).permute(2, 0, 1, 3).unbind(0)
        q = _focused(q, self.scale, self.focusing_factor)
        k = _focused(k + self.positional_encoding, self.scale, self.focusing_factor)
        heads = lambda t: t.reshape(b, t.shape[1], self.num_heads, -1).permute(0, 2, 1, 3)
        return heads(q), heads(k), heads(v)

    def attnlens_qkv(self, x):
        return self._features(x)

    def attnlens_layer_attrs(self):
        return {"attention": "focused", "kernel_applied": 1, "scale": self.head_dim ** -0.5,
                "grid": self.grid, "prefix_tokens": 0, "key_grid": self.key_grid,
                "key_stride": (self.sr.stride[0], self.sr.stride[1])}

    def attention_parts(self, x):
        q, k, v = self._features(x)
        return {"out": _released_divide(q, k, v), "q": q, "k": k, "v": v}

    def attnlens_local_branch(self, _x=None):
        return {"kind": "dwc", "channels": "per_head", "weight": self.dwc.weight[:, 0],
                "bias": self.dwc.bias, "values": "interpolated"}

    def attention_with_local_branch(self, x):
        """O + DWC(interpolate(V)) per head [B, heads, N, d] (before the projection), as released."""
        parts = self.attention_parts(x)
        v = parts["v"]
        b, heads, n, d = v.shape
        big_n = self.grid[0] * self.grid[1]
        v = F.interpolate(v.transpose(-2, -1).reshape(b * heads, d, n), size=big_n, mode="linear")
        v = v.reshape(b * heads, d, *self.grid)
        local = self.dwc(v).reshape(b, heads, d, big_n).transpose(-2, -1)
        return parts["out"] + local

    def forward(self, x, h=None, w=None):
        return self.proj(_merge_heads(self.attention_with_local_branch(x)))
