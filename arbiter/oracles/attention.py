"""Oracle for ``attention`` in float64: the full score matrix, masked, softmaxed, times v."""
from __future__ import annotations

import numpy as np

from arbiter.oracles import host64


def oracle(region) -> np.ndarray:
    q, k, v = (host64(region, a) for a in (region.q, region.k, region.v))
    scores = region.scale * (q @ np.swapaxes(k, -1, -2))  # [batch, heads, q_len, k_len]
    if region.causal:  # top-left aligned: query i sees keys 0..i
        sq, sk = scores.shape[-2:]
        scores = np.where(np.arange(sk)[None, :] > np.arange(sq)[:, None], -np.inf, scores)
    if scores.size == 0:
        return np.zeros(q.shape)
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return p @ v
