"""Vendor FFT on the CPU with the base install: numpy.fft (pocketfft), any length.

NumPy 2 computes float32/complex64 input in single precision; NumPy 1.x computes in double and the
result is rounded into the region's output. Ranked after ``scipy_fft`` (same library, which also keeps
single precision single on NumPy 1.x), so it decides only where SciPy is absent or measured slower.
"""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Candidate, Tier, register


class NumpyFFT(Candidate):
    name = "numpy_fft"
    target = "cpu"
    op = "fft"
    tier = Tier.HAND_TUNED
    priority = -1  # after scipy_fft

    def run(self, region, params):
        out = region.alloc_out()
        x = region.x
        y: np.ndarray  # complex, or real for the inverse of r2c
        if region.kind == "c2c":
            y = np.fft.ifft(x, axis=-1) if region.inverse else np.fft.fft(x, axis=-1)
        elif region.inverse:
            y = np.fft.irfft(x, n=region.n, axis=-1)
        else:
            y = np.fft.rfft(x, axis=-1)
        np.copyto(out, y, casting="same_kind")
        return out

    def source(self):
        return super().source() + f"numpy {np.__version__}"


register(NumpyFFT())
