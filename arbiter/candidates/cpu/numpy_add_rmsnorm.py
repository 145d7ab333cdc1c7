"""Vendor residual add + RMSNorm on the CPU: composed NumPy passes. The sum is written straight into ``out[0]``, its
mean square is one ``einsum`` pass (no ``s * s`` temporary), the scale one division into ``out[1]`` and the weight one
in-place product: four passes over x-sized memory where torch eager's add and ``LlamaRMSNorm`` make six. Half
precision: computed in float32, each result rounded once."""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Candidate, Tier, register
from arbiter.candidates.cpu._common import accumulate_dtype


class NumpyAddRMSNorm(Candidate):
    name = "numpy_add_rmsnorm"
    target = "cpu"
    op = "add_rmsnorm"
    tier = Tier.HAND_TUNED

    def run(self, region, params):
        out = region.alloc_out()
        acc = accumulate_dtype(out.dtype)
        if acc == out.dtype:
            s = np.add(region.x, region.residual, out=out[0])
        else:  # half precision: the sum in float32, rounded once into out[0]; the norm of the unrounded sum
            s = region.x.astype(acc) + region.residual
            out[0] = s
        rms = np.einsum("ij,ij->i", s, s)[:, None]
        rms /= s.shape[-1]
        rms += region.eps
        np.sqrt(rms, out=rms)
        if acc == out.dtype:
            np.divide(s, rms, out=out[1])
            out[1] *= region.weight
        else:
            np.multiply(s / rms, region.weight, out=out[1], casting="same_kind")
        return out


register(NumpyAddRMSNorm())
