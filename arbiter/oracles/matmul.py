"""Oracle for ``matmul``: ``activation(a @ b + bias) + residual`` in float64."""
from __future__ import annotations

import math

import numpy as np

from arbiter.oracles import array_module, host64

try:  # SciPy's erf is vectorised; math.erf per element is the exact fallback
    from scipy.special import erf as _ERF
except ImportError:
    _ERF = np.vectorize(math.erf, otypes=[np.float64])


def _erf(z):
    if array_module(z) is not np:  # a device reference (oracles.on_device)
        from cupyx.scipy.special import erf

        return erf(z)
    return _ERF(z)


def activation(name: str, z: np.ndarray) -> np.ndarray:
    if name == "none":
        return z
    if name == "relu":
        return np.maximum(z, 0.0)
    if name == "gelu":  # exact: x * Phi(x)
        return 0.5 * z * (1.0 + _erf(z / math.sqrt(2.0)))
    if name == "gelu_tanh":
        return 0.5 * z * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z**3)))
    if name == "silu":
        return z / (1.0 + np.exp(-z))
    raise ValueError(f"activation: unknown {name!r}")


def oracle(region) -> np.ndarray:
    z = host64(region, region.a) @ host64(region, region.b)
    if region.bias is not None:
        z = z + host64(region, region.bias)
    z = activation(region.activation, z)
    if region.residual is not None:
        z = z + host64(region, region.residual)
    return z
