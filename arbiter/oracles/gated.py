"""Oracle for ``gated`` (SwiGLU): ``silu(x @ w_gate) * (x @ w_up)`` in float64."""
from __future__ import annotations

import numpy as np

from arbiter.oracles import host64


def oracle(region) -> np.ndarray:
    x = host64(region, region.x)
    g = x @ host64(region, region.w_gate)
    return g / (1.0 + np.exp(-g)) * (x @ host64(region, region.w_up))
