"""Vendor matmul on NVIDIA: cuBLAS through ``cupy.matmul``, then the epilogue as one CuPy elementwise kernel.

For half types the product is rounded to the dtype before the epilogue (as PyTorch's addmm + activation does)."""
from __future__ import annotations

from arbiter.candidates import Tier, register
from arbiter.candidates.nvidia._cuda import NvidiaCandidate, compose_epilogue, cupy


class CupyMatmul(NvidiaCandidate):
    name = "cupy_matmul"
    capturable = False  # cupy.matmul takes CuPy's cuBLAS handle, which raises under stream capture
    op = "matmul"
    tier = Tier.HAND_TUNED
    priority = 10  # the lead-safe default: cuBLAS

    def run(self, region, params):
        cp = cupy()
        out = region.alloc_out()
        if not region.has_epilogue:
            return cp.matmul(region.a, region.b, out=out)
        cp.matmul(region.a, region.b, out=out)
        compose_epilogue(region, out, out)  # one elementwise pass, in float, in place
        return out


register(CupyMatmul())
