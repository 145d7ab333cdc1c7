"""Vendor gated projection (SwiGLU) on the CPU, composed: two BLAS GEMMs, then silu and the product as NumPy passes.
Where the two weights are the halves of one concatenated gate/up weight (``keys.follows``: a model's fused
``gate_up_proj``), one GEMM of twice the width on that weight, as the model's own code runs it."""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Candidate, Tier, register
from arbiter.candidates.cpu._common import BlasBacked, accumulate_dtype
from arbiter.keys import concatenated


class NumpyGated(BlasBacked, Candidate):
    name = "numpy_gated"
    target = "cpu"
    op = "gated"
    tier = Tier.HAND_TUNED

    def _compute(self, region):
        out = region.alloc_out()
        acc = accumulate_dtype(out.dtype)
        x = region.x.astype(acc, copy=False)
        whole = concatenated(region.w_gate, region.w_up)
        if whole is not None:  # the halves of one gate/up weight: one GEMM of twice the width, x read once
            z = x @ whole.astype(acc, copy=False)
            n = region.dims["n"]
            gate, up = z[:, :n], z[:, n:]
        else:
            gate = x @ region.w_gate.astype(acc, copy=False)
            up = x @ region.w_up.astype(acc, copy=False)
        with np.errstate(over="ignore"):  # exp -> inf for gate << 0 gives gate / inf = 0, the right value
            denom = np.exp(np.negative(gate))
        denom += 1.0
        gate /= denom
        np.multiply(gate, up, out=out, casting="same_kind")
        return out


register(NumpyGated())
