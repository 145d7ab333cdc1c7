"""Oracle for ``fft``: the discrete Fourier transform by its definition, in complex128.

For ``n <= DIRECT_MAX`` each output is the direct sum ``sum_j x[j] * exp(-+2 pi i j f / n)``
with twiddles indexed by ``(j * f) mod n`` (exact integer reduction, so every angle is
accurate to one rounding), computed as a product with the DFT matrix in row blocks. This
shares no code with any FFT library. Longer transforms use numpy.fft in complex128
(pocketfft, error ~1e-16 * log n, far under every budget): an O(n^2) sum there costs
more than it proves; this is the one place the oracle and a vendor candidate share a library.
"""
from __future__ import annotations

import numpy as np

from arbiter import targets

DIRECT_MAX = 4096
_ROWS = 256  # DFT-matrix rows per block: 256 x 4096 complex128 is 16 MiB


def host128(region, array) -> np.ndarray:
    return np.asarray(targets.get(region.target).to_host(array), dtype=np.complex128)


def dft(x: np.ndarray, inverse: bool) -> np.ndarray:
    """Unnormalised DFT of complex128 ``x`` over its last axis (sign + for ``inverse``)."""
    n = x.shape[-1]
    if n > DIRECT_MAX:
        return np.fft.ifft(x, axis=-1) * n if inverse else np.fft.fft(x, axis=-1)
    sign = 1.0 if inverse else -1.0
    roots = np.exp(sign * 2j * np.pi * np.arange(n) / n)
    j = np.arange(n)
    out = np.empty(x.shape, dtype=np.complex128)
    for f0 in range(0, n, _ROWS):
        f = np.arange(f0, min(f0 + _ROWS, n))
        out[..., f0:f0 + len(f)] = x @ roots[np.outer(j, f) % n]
    return out


def hermitian_full(half: np.ndarray, n: int) -> np.ndarray:
    """The full spectrum of a real signal of length n from its half (numpy.fft.irfft's convention)."""
    full = np.zeros(half.shape[:-1] + (n,), dtype=np.complex128)
    h = n // 2 + 1
    full[..., :h] = half[..., :h]
    full[..., 0] = full[..., 0].real
    if n % 2 == 0:
        full[..., n // 2] = full[..., n // 2].real
    k = np.arange(1, (n + 1) // 2)
    full[..., n - k] = np.conj(half[..., k])
    return full


def oracle(region) -> np.ndarray:
    x = host128(region, region.x)
    n = region.n
    if region.kind == "c2c":
        y = dft(x, region.inverse)
        return y / n if region.inverse else y
    if not region.inverse:  # r2c
        return dft(x, False)[..., : n // 2 + 1]
    return (dft(hermitian_full(x, n), True) / n).real  # c2r
