"""Vendor gated projection (SwiGLU) on NVIDIA, composed: two cuBLAS GEMMs (``cupy.matmul``), then
``silu(g) * u`` as one CuPy elementwise kernel in float, rounded once into out."""
from __future__ import annotations

from arbiter.candidates import Tier, register
from arbiter.candidates.nvidia._cuda import NvidiaCandidate, cupy

_swiglu = None


def swiglu():
    """The elementwise ``out = silu(g) * u`` kernel (float arithmetic for every element type)."""
    global _swiglu
    if _swiglu is None:
        _swiglu = cupy().ElementwiseKernel("T g, T u", "T out",
                                           "float gv = (float)g; out = (T)(gv / (1.0f + expf(-gv)) * (float)u);",
                                           "arbiter_swiglu")
    return _swiglu


class CupyGated(NvidiaCandidate):
    name = "cupy_gated"
    capturable = False  # cupy.matmul takes CuPy's cuBLAS handle, which raises under stream capture
    op = "gated"
    tier = Tier.HAND_TUNED
    priority = 10

    def run(self, region, params):
        cp = cupy()
        out = region.alloc_out()
        if out.size == 0:
            return out
        g = cp.matmul(region.x, region.w_gate)
        u = cp.matmul(region.x, region.w_up)
        swiglu()(g, u, out)
        return out


register(CupyGated())
