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


# The accumulation's unit roundoff: float64 kernels sum in float64, every other dtype in float32 at least (a
# half-precision kernel summing in half is wrong at large k, and the budget, not this floor, must say so).
_ACCUMULATE_UNIT = {"float64": 2.0 ** -53, "complex128": 2.0 ** -53}


def rounding(region) -> np.ndarray:
    """The error a correct kernel may make at each element by the order it sums in, on the data's own scale:
    ``4 u sqrt(k) sqrt((a*a) @ (b*b) + bias^2)`` (u the accumulation's unit roundoff, a probabilistic bound
    after Higham and Mary; 4 covers the activations' slope, at most 1.13). The gate subtracts it from each
    difference: the budget is relative to the output, and where a + b and bias nearly cancel (a relu leaving
    nine of eighteen elements, each small) a correct float32 sgemm missed it one gate in 1,500. It is small
    beside any wrong answer: relative to the output about 4 u sqrt(k), 1.5e-5 at k = 4096 in float32, where
    TF32 inputs err 4e-4 and a dropped term its own size."""
    a, b = abs(host64(region, region.a)), abs(host64(region, region.b))
    scale = (a * a) @ (b * b)
    if region.bias is not None:
        scale = scale + abs(host64(region, region.bias)) ** 2
    unit = _ACCUMULATE_UNIT.get(str(region.dtype), 2.0 ** -24)
    return (4.0 * unit * math.sqrt(max(a.shape[-1], 1))) * array_module(scale).sqrt(scale)
