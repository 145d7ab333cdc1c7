"""Composed attention on NVIDIA: cuBLAS batched GEMMs (``cupy.matmul``) for the scores and for
``p @ v``, the softmax as CuPy passes between them. It materialises the whole
``[batch, heads, q_len, k_len]`` score matrix in float32 (what the fused kernel avoids); half types are
computed in float32 and rounded once into out."""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Tier, register
from arbiter.candidates.nvidia._cuda import NvidiaCandidate, cupy


class CupyAttention(NvidiaCandidate):
    name = "cupy_attention"
    capturable = False  # cupy.matmul takes CuPy's cuBLAS handle, which raises under stream capture
    op = "attention"
    tier = Tier.COMPOSED  # generic CuPy passes: the reference of last resort, not a vendor kernel
    priority = 10

    def run(self, region, params):
        cp = cupy()
        out = region.alloc_out()
        if out.size == 0:
            return out
        acc = np.float64 if region.q.dtype == np.float64 else np.float32
        q, k, v = (a.astype(acc, copy=False) for a in (region.q, region.k, region.v))
        scores = cp.matmul(q, cp.swapaxes(k, -1, -2))
        scores *= region.scale
        if region.causal:  # top-left aligned: query i sees keys 0..i
            sq, sk = scores.shape[-2:]
            above = cp.arange(sk)[None, :] > cp.arange(sq)[:, None]
            scores += cp.where(above, -cp.inf, 0.0).astype(acc)  # an additive mask, broadcast over (b, h)
        scores -= scores.max(axis=-1, keepdims=True)
        cp.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        if acc == out.dtype:
            cp.matmul(scores, v, out=out)
        else:
            out[...] = cp.matmul(scores, v)
        return out


register(CupyAttention())
