"""The attention matrices the CLI checks (locality_check, rollout_check, reduction_check) compute
independently of AttnLens, from a dump's q and k in float64: each row normalised over the k's n
keys (n = N unless the keys lie on a reduced grid, format.md 1c)."""

import numpy as np


def attention(name, q, k, scale):
    """A for the preset `name` (softmax, linear_relu, inline), or None for another paradigm."""
    n = k.shape[0]
    if name == "softmax":
        logits = scale * q @ k.T
        a = np.exp(logits - logits.max(axis=1, keepdims=True))
        return a / a.sum(axis=1, keepdims=True)
    if name == "linear_relu":  # FLatten's divide: phi = ReLU, n eps in the denominator
        pq, pk = np.maximum(q, 0), np.maximum(k, 0)
        num = pq @ pk.T
        return num / (num.sum(axis=1, keepdims=True) + n * 1e-6)
    if name == "inline":  # InLine's subtract, identity kernel, c = 1/(sqrt(d) n)
        c = 1.0 / (np.sqrt(q.shape[1]) * n)
        d = c * (q @ k.T)
        return d - d.sum(axis=1, keepdims=True) / n + 1.0 / n
    return None


def _elu1(x):
    return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))


def _focused(x, p=3, shift=1e-6):
    """FLatten's f_p(ReLU(x) + shift) = ||y|| / ||y^p|| y^p, y^3 by multiplication (as PyTorch)."""
    y = np.maximum(x, 0) + shift
    yp = y * y * y if p == 3 else y ** p
    return np.linalg.norm(y, axis=1, keepdims=True) / np.linalg.norm(yp, axis=1, keepdims=True) * yp


def preset_attention(name, q, k, scale, kernel_applied=False):
    """A for each of the eight presets (docs/DEFINITIONS.md "Paradigms", default parameters), N x n. On a layer
    whose q and k went through the model's kernel already (kernel_applied), kernels are the identity."""
    n, d = k.shape[0], q.shape[1]
    identity = lambda x: x  # noqa: E731
    relu = identity if kernel_applied else (lambda x: np.maximum(x, 0))
    elu1 = identity if kernel_applied else _elu1
    focused = identity if kernel_applied else _focused
    if name == "softmax":
        return attention("softmax", q, k, scale)
    if name == "softmax_l2":
        return attention("softmax", q / np.linalg.norm(q, axis=1, keepdims=True), k, scale)
    if name in ("linear_relu", "linear_elu", "focused"):
        phi = {"linear_relu": relu, "linear_elu": elu1, "focused": focused}[name]
        num = phi(q) @ phi(k).T
        return num / (num.sum(axis=1, keepdims=True) + n * 1e-6)
    c = 1.0 / (np.sqrt(d) * n)
    if name in ("inline", "inline_relu"):  # InLine's subtract
        phi = identity if name == "inline" else relu
        dd = c * (phi(q) @ phi(k).T)
        return dd - dd.sum(axis=1, keepdims=True) / n + 1.0 / n
    if name == "mala":  # MALA Eq. 8-9: magnitude normalisation, phi = ELU + 1
        dd = c * (elu1(q) @ elu1(k).T)
        z = dd.sum(axis=1, keepdims=True)
        return dd * (1.0 + 1.0 / (z + 1e-6)) - z / n
    raise ValueError(f"not a preset: {name}")
