"""Helpers shared by the CPU candidates."""
from __future__ import annotations

import numpy as np

from arbiter.oracles.matmul import erf
from arbiter.targets.cpu import blas_info

SQRT_2_OVER_PI = float(np.sqrt(2.0 / np.pi))


def accumulate_dtype(dtype) -> np.dtype:
    """Half-precision inputs accumulate in float32, as every vendor library does."""
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def activation_inplace(name: str, z: np.ndarray) -> None:
    """Apply the named activation to ``z`` in place (z is float32 or float64)."""
    if name == "none":
        return
    if name == "relu":
        np.maximum(z, 0, out=z)
    elif name == "gelu":
        z *= 0.5 * (1.0 + erf(z * (1.0 / np.sqrt(2.0))))
    elif name == "gelu_tanh":
        z *= 0.5 * (1.0 + np.tanh(SQRT_2_OVER_PI * (z + 0.044715 * z * z * z)))
    elif name == "silu":
        with np.errstate(over="ignore"):  # exp(-z) -> inf for z << 0 gives z / inf = 0, the right value
            z /= 1.0 + np.exp(-z)
    else:
        raise ValueError(f"activation: unknown {name!r}")


def blas_identity() -> str:
    info = blas_info()
    return f"{info['blas']} {info['blas_version']}"
