"""Oracle for ``attention`` in float64: the full score matrix, masked, softmaxed, times v."""
from __future__ import annotations

import numpy as np

from arbiter.oracles import array_module, host64


def oracle(region, queries=None) -> np.ndarray:
    """The reference output; with ``queries`` (query indices: one list for every head, or an array ``[batch, heads,
    n]`` of each head's own) only those rows: ``[batch, heads, n, d]``.

    The causal mask is anchored at absolute query positions, so sampled rows see the same keys as in the full output.
    """
    q, k, v = (host64(region, a) for a in (region.q, region.k, region.v))
    xp = array_module(q)
    sq_all = q.shape[-2]
    rows = xp.arange(sq_all) if queries is None else xp.asarray(queries)
    if queries is not None:  # the same rows for every head, or [batch, heads, n] rows of each head's own
        q = q[..., rows, :] if rows.ndim == 1 else xp.take_along_axis(q, rows[..., None], axis=-2)
    scores = region.scale * (q @ xp.swapaxes(k, -1, -2))  # [batch, heads, len(rows), k_len]
    if region.causal:  # top-left aligned: query i sees keys 0..i
        sk = scores.shape[-1]
        scores = xp.where(xp.arange(sk) > rows[..., None], -xp.inf, scores)
    if scores.size == 0:
        return xp.zeros(q.shape)
    p = xp.exp(scores - scores.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return p @ v
