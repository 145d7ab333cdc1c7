"""Vendor attention on the CPU, composed: batched BLAS GEMM for the scores, NumPy softmax, BLAS GEMM for p @ v.

It materialises the whole ``[batch, heads, q_len, k_len]`` score matrix (what a fused kernel avoids).
Half-precision inputs are computed in float32 and rounded once.
"""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Candidate, Tier, register
from arbiter.candidates.cpu._common import BlasBacked, accumulate_dtype


class NumpyAttention(BlasBacked, Candidate):
    name = "numpy_attention"
    target = "cpu"
    op = "attention"
    tier = Tier.HAND_TUNED

    def _compute(self, region):
        out = region.alloc_out()
        acc = accumulate_dtype(out.dtype)
        q, k, v = (a.astype(acc, copy=False) for a in (region.q, region.k, region.v))
        scores = np.matmul(q, np.swapaxes(k, -1, -2))
        scores *= region.scale
        if region.causal:  # top-left aligned: query i sees keys 0..i
            sq, sk = scores.shape[-2:]
            scores[..., np.triu(np.ones((sq, sk), dtype=bool), k=1)] = -np.inf
        if scores.size:
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
        if acc == out.dtype:
            np.matmul(scores, v, out=out)
        else:
            np.copyto(out, np.matmul(scores, v), casting="same_kind")
        return out


register(NumpyAttention())
