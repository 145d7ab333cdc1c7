"""Emitted FFT on the CPU: a radix-2 Stockham autosort kernel in numba, power-of-two lengths only.

Stockham ping-pongs between two buffers, so no bit-reversal pass is needed: stage ``s``
(stride ``s = 1, 2, 4, ...``, half-length ``h = n / 2s``) computes, for ``p < h`` and ``q < s``,
``y[q + s*2p] = a + b`` and ``y[q + s*(2p+1)] = (a - b) * w^(p*s)`` from ``a = x[q + s*p]`` and
``b = x[q + s*(p+h)]``, with ``w = exp(-2 pi i / n)``. Twiddles are computed once per (n, dtype,
direction) in float64 and rounded to the working precision. Rows of the batch run in parallel.

r2c runs the complex kernel on the real row promoted to complex and keeps the half spectrum;
c2r rebuilds the full Hermitian spectrum (numpy.fft.irfft's convention) and keeps the real part.
Every other length is declined in ``applies_to`` (the vendor candidate serves it).
"""
from __future__ import annotations

import functools

import numpy as np

from arbiter.candidates import register
from arbiter.candidates.cpu._numba import NumbaKernelCandidate, njit, prange

_COMPLEX = {"float32": np.complex64, "float64": np.complex128, "complex64": np.complex64,
            "complex128": np.complex128}


@njit(parallel=True, cache=True, fastmath={"contract"})
def stockham_rows(x, out, twiddles, scale):
    """out[r] = scale * DFT(x[r]) (twiddles[k] = w^k for k < n/2 fix the direction); n a power of two."""
    batch, n = x.shape
    for r in prange(batch):
        a = x[r].copy()
        y = np.empty(n, dtype=x.dtype)
        s = 1
        length = n
        while length > 1:
            h = length // 2
            for p in range(h):
                w = twiddles[p * s]
                for q in range(s):
                    u = a[q + s * p]
                    t = a[q + s * (p + h)]
                    y[q + s * 2 * p] = u + t
                    y[q + s * (2 * p + 1)] = (u - t) * w
            a, y = y, a
            s *= 2
            length = h
        for j in range(n):
            out[r, j] = a[j] * scale


@functools.lru_cache(maxsize=64)
def twiddles(n: int, dtype, inverse: bool) -> np.ndarray:
    sign = 1.0 if inverse else -1.0
    return np.exp(sign * 2j * np.pi * np.arange(max(n // 2, 1)) / n).astype(dtype)


def hermitian_full(half: np.ndarray, n: int, dtype) -> np.ndarray:
    """The full spectrum [rows, n] of real signals from their half spectra (DC and Nyquist imaginary parts dropped)."""
    full = np.empty((half.shape[0], n), dtype=dtype)
    h = n // 2 + 1
    full[:, :h] = half
    full[:, 0] = full[:, 0].real
    if n % 2 == 0:
        full[:, n // 2] = full[:, n // 2].real
    full[:, h:] = np.conj(half[:, 1:(n + 1) // 2][:, ::-1])
    return full


class StockhamFFT(NumbaKernelCandidate):
    name = "numba_stockham_fft"
    op = "fft"
    kernel = staticmethod(stockham_rows)

    def applies_to(self, region):
        n = region.n
        if n & (n - 1):
            return f"n={n} is not a power of two; this radix-2 kernel needs one (the vendor FFT takes any n)"
        return True

    def run(self, region, params):
        out = region.alloc_out()
        n, cdtype = region.n, _COMPLEX[region.dtype]
        x = region.x.reshape(-1, region.x.shape[-1])
        rows = out.reshape(-1, out.shape[-1])
        if rows.size == 0:
            return out
        if region.kind == "c2c":
            work = np.ascontiguousarray(x)
            dest = rows
        elif region.inverse:
            work, dest = hermitian_full(x, n, cdtype), np.empty((x.shape[0], n), cdtype)
        else:
            work, dest = x.astype(cdtype), np.empty((x.shape[0], n), cdtype)
        args = (work, dest, twiddles(n, cdtype, region.inverse), cdtype(1.0 / n if region.inverse else 1.0))
        self.compile_log.ensure(np.dtype(cdtype).name, args)
        stockham_rows(*args)
        if region.kind == "r2c":
            rows[...] = dest.real if region.inverse else dest[:, : n // 2 + 1]
        return out


register(StockhamFFT())
