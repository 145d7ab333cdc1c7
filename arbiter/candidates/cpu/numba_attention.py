"""Emitted flash-style attention on the CPU: one fused numba kernel that never materialises the scores.

Each query row (parallel over batch x heads x q_len) walks the keys in blocks of ``block``: it
computes the block's scores into a ``block``-long scratch, and keeps an online softmax, the
running maximum ``m``, denominator ``den`` and un-normalised output ``acc[d]``; when a block raises
the maximum, ``den`` and ``acc`` are rescaled by ``exp(m_old - m_new)``. Memory beyond q, k, v and
out is O(block + d) per thread instead of the composed version's ``q_len x k_len`` per head.
Causal (top-left aligned) rows stop at key ``i``, so masked blocks are never computed.

Parameter (solution index): ``block``, keys per online step (a runtime argument: one compiled
kernel per dtype serves every block size). Larger blocks rescale less often; smaller ones keep
the scratch in registers and L1.
"""
from __future__ import annotations

import numpy as np

from arbiter.candidates import register
from arbiter.candidates.cpu._numba import (
    FASTMATH,
    NumbaKernelCandidate,
    dtype_reason,
    fast_exp,
    first_reason,
    layout_reason,
    njit,
    prange,
)


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def flash_attention(q, k, v, out, scale, causal, block):
    """out = softmax(scale * q @ k^T [+ causal mask]) @ v over 4-D C-contiguous arrays of one dtype."""
    nb, nh, sq, d = q.shape
    sk = k.shape[2]
    t = q.dtype.type
    sc = t(scale)
    for row in prange(nb * nh * sq):
        b = row // (nh * sq)
        h = (row // sq) % nh
        i = row % sq
        acc = np.zeros(d, dtype=q.dtype)
        scores = np.empty(block, dtype=q.dtype)
        m = t(-np.inf)
        den = t(0)
        kend = min(sk, i + 1) if causal else sk
        for j0 in range(0, kend, block):
            j1 = min(j0 + block, kend)
            bm = t(-np.inf)
            for j in range(j0, j1):
                s = t(0)
                for c in range(d):
                    s += q[b, h, i, c] * k[b, h, j, c]
                s *= sc
                scores[j - j0] = s
                bm = max(bm, s)
            if bm > m:  # the running max grew: rescale what is summed so far
                alpha = fast_exp(m - bm)
                den *= alpha
                for c in range(d):
                    acc[c] *= alpha
                m = bm
            for j in range(j0, j1):
                p = fast_exp(scores[j - j0] - m)
                den += p
                for c in range(d):
                    acc[c] += p * v[b, h, j, c]
        inv = t(1) / den
        for c in range(d):
            out[b, h, i, c] = acc[c] * inv


class NumbaFlashAttention(NumbaKernelCandidate):
    name = "numba_flash_attention"
    op = "attention"
    kernel = staticmethod(flash_attention)

    def applies_to(self, region):
        return first_reason(dtype_reason(region), layout_reason(region, "RRR", "reads C-contiguous q, k, v"))

    def param_space(self):
        return [{"block": 64}, {"block": 16}, {"block": 256}]

    def run(self, region, params):
        out = region.alloc_out()
        if out.size:
            args = (region.q, region.k, region.v, out, region.scale, region.causal, params["block"])
            self.compile_log.ensure(region.dtype, args)
            flash_attention(*args)
        return out


register(NumbaFlashAttention())
