"""Vendor matmul on the CPU: NumPy's BLAS GEMM, then the epilogue composed from NumPy ops."""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Candidate, Tier, register
from arbiter.candidates.cpu._common import BlasBacked, accumulate_dtype, activation_inplace


class NumpyMatmul(BlasBacked, Candidate):
    name = "numpy_matmul"
    target = "cpu"
    op = "matmul"
    tier = Tier.HAND_TUNED

    def _compute(self, region):
        out = region.alloc_out()
        acc = accumulate_dtype(out.dtype)
        a, b = region.a, region.b
        # out= may be the residual (an in-place residual add): then the product must not land on it before it is read
        in_place = region.residual is not None and np.may_share_memory(region.residual, out)
        if acc == out.dtype and not in_place:
            z = np.matmul(a, b, out=out)
        elif acc == out.dtype:
            z = np.matmul(a, b)
        else:  # half precision: multiply in float32, round once at the end
            z = np.matmul(a.astype(acc), b.astype(acc))
        if region.bias is not None:
            z += region.bias
        activation_inplace(region.activation, z)
        if region.residual is not None:
            z += region.residual
        if z is not out:
            out[...] = z
        return out


register(NumpyMatmul())
