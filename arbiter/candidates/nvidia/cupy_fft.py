"""Vendor FFT on NVIDIA: cuFFT through ``cupy.fft``, any length, in the input's own precision.

c2c uses ``fft``/``ifft`` and r2c ``rfft``. c2r is a c2c inverse of the Hermitian-extended spectrum, not
``irfft``: cuFFT's single-precision c2r through ``cupy.fft.irfft`` missed the float32 budget on an H200
(relative error 6e-3 to 1.5e-2 at n = 4096 and 16384; complex128 and other lengths passed), see
docs/gpu_results.md. The result is copied into the given out.
"""
from __future__ import annotations

from arbiter.candidates import Tier, register
from arbiter.candidates.nvidia._cuda import NvidiaCandidate, cupy


def c2r_via_c2c(xp, x, n: int):
    """The real inverse of half spectrum ``x`` (length n // 2 + 1 on the last axis) as the real part of a
    c2c inverse of the full Hermitian spectrum, built as numpy.fft.irfft defines it (the imaginary parts of
    the zero and, for even n, the Nyquist bin ignored). ``xp`` is CuPy (NumPy in the CPU-side test)."""
    full = xp.empty(x.shape[:-1] + (n,), dtype=x.dtype)
    h = n // 2 + 1
    full[..., :h] = x
    full[..., 0] = full[..., 0].real
    if n % 2 == 0:
        full[..., n // 2] = full[..., n // 2].real
    m = (n + 1) // 2  # bins 1 .. m - 1 have their conjugate mirrors at n - 1 .. n - m + 1
    if m > 1:
        full[..., n - m + 1:] = xp.conj(x[..., 1:m][..., ::-1])
    return xp.fft.ifft(full, axis=-1).real


class CupyFFT(NvidiaCandidate):
    name = "cupy_fft"
    op = "fft"
    tier = Tier.HAND_TUNED
    priority = 10

    def run(self, region, params):
        cp = cupy()
        out = region.alloc_out()
        if out.size == 0:
            return out
        x = region.x
        if region.kind == "c2c":
            y = cp.fft.ifft(x, axis=-1) if region.inverse else cp.fft.fft(x, axis=-1)
        elif region.inverse:
            y = c2r_via_c2c(cp, x, region.n)
        else:
            y = cp.fft.rfft(x, axis=-1)
        out[...] = y
        return out


register(CupyFFT())
