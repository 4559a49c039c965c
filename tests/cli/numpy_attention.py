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
