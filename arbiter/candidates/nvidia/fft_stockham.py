"""Emitted FFT (``fft.cu``): Stockham radix-2 over power-of-two lengths, c2c, r2c and c2r, both precisions.

A row that fits shared memory twice over (complex64 up to 2048 points, complex128 up to 1024) is
transformed by one block in one launch (``fft_smem``, the solution index is its block size); longer rows
take one launch per stage through global memory (``fft_load`` / ``fft_stage`` / ``fft_store``). Other
lengths are refused: cuFFT (``cupy_fft``) serves them.
"""
from __future__ import annotations

import numpy as np

from arbiter.candidates import Tier, register
from arbiter.candidates.nvidia._cuda import NvidiaCandidate, cupy
from arbiter.targets.nvrtc import kernel

SMEM_MAX = {False: 2048, True: 1024}  # longest row for fft_smem: 2 buffers x N complex <= 32 KiB
_KIND = {("c2c", False): 0, ("c2c", True): 0, ("r2c", False): 1, ("r2c", True): 2}
STAGE_THREADS = 256


class FFTStockham(NvidiaCandidate):
    name = "fft_stockham"
    op = "fft"
    tier = Tier.EMITTED
    priority = 5
    templates = ("fft.cu",)

    def param_space(self):
        return [{"threads": 256}, {"threads": 128}, {"threads": 512}]

    def applies_to(self, region):
        n = region.n
        if n & (n - 1):
            return f"length {n} is not a power of two (radix-2 only); cuFFT serves it"
        if region.layout != "R":
            return f"needs C-contiguous x (layout R), got {region.layout}; cuFFT serves others"
        return True

    def run(self, region, params):
        out = region.alloc_out()
        n, batch = region.n, region.dims["batch"]
        if batch == 0:
            return out
        f64 = region.dtype in ("float64", "complex128")
        threads = min(params["threads"], max(32, n // 2))
        smem = n <= SMEM_MAX[f64]
        defines = (("N", n), ("FFT_F64", int(f64)), ("KIND", _KIND[(region.kind, region.inverse)]),
                   ("INVERSE", int(region.inverse)), ("THREADS", threads), ("USE_SMEM", int(smem)))
        ldx, ldy = np.int64(region.x.shape[-1]), np.int64(out.shape[-1])
        if smem:
            kernel("fft_smem", "float32", ("fft.cu",), defines)((batch,), (threads,), (region.x, out, ldx, ldy))
            return out
        cp = cupy()
        complex_type = np.complex128 if f64 else np.complex64
        a, b = cp.empty((batch, n), complex_type), cp.empty((batch, n), complex_type)
        nb = np.int64(batch)

        def grid(items):
            return ((items + STAGE_THREADS - 1) // STAGE_THREADS,)

        kernel("fft_load", "float32", ("fft.cu",), defines)(grid(batch * n), (STAGE_THREADS,), (region.x, a, nb, ldx))
        stage = kernel("fft_stage", "float32", ("fft.cu",), defines)
        ns = 1
        while ns < n:
            stage(grid(batch * (n // 2)), (STAGE_THREADS,), (a, b, nb, np.int32(ns)))
            a, b = b, a
            ns *= 2
        kernel("fft_store", "float32", ("fft.cu",), defines)(grid(batch * out.shape[-1]), (STAGE_THREADS,),
                                                           (a, out, nb, ldy))
        return out


register(FFTStockham())
