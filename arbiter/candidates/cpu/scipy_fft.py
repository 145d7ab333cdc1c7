"""Vendor FFT on the CPU: scipy.fft (pocketfft), any length, in the input's own precision.

c2c uses ``fft``/``ifft``, r2c ``rfft``, c2r ``irfft`` with the region's ``n``; scipy.fft keeps
single precision single (numpy.fft before 2.0 did not), so complex64 work is not done in complex128.
SciPy is the optional ``cpu-fft`` extra: without it this candidate is listed as unavailable and
``numpy_fft`` serves every length.
"""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Candidate, Tier, register

try:
    import scipy
    import scipy.fft as sfft
except ModuleNotFoundError as exc:
    if exc.name != "scipy":
        raise
    scipy = sfft = None


class ScipyFFT(Candidate):
    name = "scipy_fft"
    target = "cpu"
    op = "fft"
    tier = Tier.HAND_TUNED

    def available(self):
        return True if scipy is not None else "needs scipy: pip install 'kernel-arbiter[cpu-fft]'"

    def run(self, region, params):
        out = region.alloc_out()
        x = region.x
        if region.kind == "c2c":
            y = sfft.ifft(x, axis=-1) if region.inverse else sfft.fft(x, axis=-1)
        elif region.inverse:
            y = sfft.irfft(x, n=region.n, axis=-1)
        else:
            y = sfft.rfft(x, axis=-1)
        np.copyto(out, y, casting="same_kind")
        return out

    def source(self):
        return super().source() + f"scipy {scipy.__version__ if scipy is not None else 'absent'}"


register(ScipyFFT())
