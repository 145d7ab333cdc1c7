"""Vendor FFT on NVIDIA: cuFFT through ``cupy.fft``, any length, in the input's own precision.

c2c uses ``fft``/``ifft``, r2c ``rfft``, c2r ``irfft`` with the region's ``n`` on a copy of the input
whose zero and Nyquist bins are made real (cuFFT's c2r would otherwise use their imaginary parts).
The result is copied into the given out.
"""
from __future__ import annotations

from arbiter.candidates import Tier, register
from arbiter.candidates.nvidia._cuda import NvidiaCandidate, cupy


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
            # The region ignores the imaginary parts of the zero and Nyquist bins (numpy.fft.irfft's
            # convention); cuFFT's c2r leaks them into the result at some lengths, so they are cleared.
            x = x.copy()
            x[..., 0] = x[..., 0].real
            if region.n % 2 == 0:
                x[..., region.n // 2] = x[..., region.n // 2].real
            y = cp.fft.irfft(x, n=region.n, axis=-1)
        else:
            y = cp.fft.rfft(x, axis=-1)
        out[...] = y
        return out


register(CupyFFT())
