"""Oracle for ``matmul``: ``activation(a @ b + bias) + residual`` in float64."""
from __future__ import annotations

import functools
import math

import numpy as np

from arbiter.oracles import array_module, host64


def erf(z):
    """Elementwise erf. A device reference (``oracles.on_device``) uses CuPy's; on the host SciPy's (vectorised)
    when installed, else ``math.erf`` per element (exact, slower). SciPy is imported on first use, not with
    arbiter: it is an optional extra and costs 0.2 s to import."""
    if array_module(z) is not np:
        from cupyx.scipy.special import erf as device_erf

        return device_erf(z)
    return _host_erf()(z)


@functools.cache
def _host_erf():
    # Found once, never stored in a module global: a global that changes on first use would change the
    # behaviour identity of every candidate that references this module between two processes.
    try:
        from scipy.special import erf as found
    except ImportError:
        math_erf = np.frompyfunc(math.erf, 1, 1)

        def found(x):
            return math_erf(x).astype(np.result_type(x, np.float32))
    return found


def activation(name: str, z: np.ndarray) -> np.ndarray:
    if name == "none":
        return z
    if name == "relu":
        return np.maximum(z, 0.0)
    if name == "gelu":  # exact: x * Phi(x)
        return 0.5 * z * (1.0 + erf(z / math.sqrt(2.0)))
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
