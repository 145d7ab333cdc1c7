"""Helpers shared by the CPU candidates."""
from __future__ import annotations

import numpy as np

from arbiter import cpu_threads
from arbiter.candidates import params_id
from arbiter.candidates.cpu._numba import NUMBA_MISSING, gelu_exact_inplace
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
        if NUMBA_MISSING is None and z.flags.c_contiguous and z.size >= 4096:
            with cpu_threads.LAUNCH_LOCK:  # numba's workqueue layer: one launch at a time
                gelu_exact_inplace(z.reshape(-1))
        else:  # small, strided, or no numba: NumPy passes and scipy's erf
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


class BlasBacked:
    """A mixin for candidates whose time is mostly BLAS calls: the BLAS pool's thread count is a solution
    parameter (``cpu_threads.BLAS_PARAMS``: the library's own count, then one thread), so tuning measures
    which serves the key on this machine; ``run`` wraps the subclass's ``_compute(region)`` in
    ``cpu_threads.blas_threads`` (one thread for a torch caller), and the BLAS library and its version are part
    of the code identity (``source``)."""

    def run(self, region, params):
        with cpu_threads.blas_threads(cpu_threads.guest_threads(region.torch_caller, params.get("blas_threads"))):
            return self._compute(region)

    def _compute(self, region):
        raise NotImplementedError

    def source(self):
        # The BLAS library and its version are part of what computes the result.
        return super().source() + blas_identity()  # type: ignore[misc]  # a mixin: Candidate follows in the MRO

    def param_space(self):
        return [dict(p) for p in cpu_threads.BLAS_PARAMS]

    def launch_signature(self, region, params):
        # One thread where the pool has one already, or for a torch caller (cpu_threads.guest_threads): the same
        # calls, timed once.
        threads = params.get("blas_threads")
        if region.torch_caller or (threads is not None and blas_info()["blas_threads"] == str(threads)):
            return params_id({})
        return params_id(params)
