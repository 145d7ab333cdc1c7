"""Vendor FFT on NVIDIA: cuFFT through CuPy's plan objects, any length, in the input's own precision.

c2c and r2c execute a cached ``cupy.cuda.cufft.Plan1d`` (one per length, type, batch and device) straight into
the output: ``alloc_out`` (CuPy's pool) for a dispatched call, the given out otherwise, so no result is copied.
``cupy.fft.fft`` caches the same plans (``cupy.fft.config.get_plan_cache()``, keyed on length, type, batch and
devices), but reaches them through its argument handling, a locked LRU lookup and a new output on every call;
holding the plan per key skips all of that. Like CuPy's cache the plans are per thread: a plan's work area
serves one call at a time. The inverse c2c scales by 1/n afterwards (cuFFT's inverse is unscaled), as CuPy does.

c2r is a c2c inverse of the Hermitian-extended spectrum, not cuFFT's c2r: cuFFT's single-precision c2r through
``cupy.fft.irfft`` missed the float32 budget on an H200 (relative error 6e-3 to 1.5e-2 at n = 4096 and 16384;
complex128 and other lengths passed), see docs/gpu_results.md. Its result is copied into the output.
"""
from __future__ import annotations

import threading

from arbiter.candidates import Tier, register
from arbiter.candidates.nvidia._cuda import NvidiaCandidate, cupy

_PLANS_MAX = 32  # per thread; each plan holds a cuFFT work area
_FORWARD, _INVERSE = -1, 1  # CUFFT_FORWARD, CUFFT_INVERSE (cufft.h)
_local = threading.local()


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


def _fft_type(kind: str, dtype: str) -> int:
    from cupy.cuda import cufft

    return {("c2c", "complex64"): cufft.CUFFT_C2C, ("c2c", "complex128"): cufft.CUFFT_Z2Z,
            ("r2c", "float32"): cufft.CUFFT_R2C, ("r2c", "float64"): cufft.CUFFT_D2Z}[(kind, dtype)]


def plan_for(n: int, kind: str, dtype: str, batch: int, device: int):
    """This thread's cuFFT plan for ``batch`` transforms of length ``n`` (kind, input dtype) on ``device``,
    made on first use; at ``_PLANS_MAX`` plans the thread's cache starts over."""
    plans = getattr(_local, "plans", None)
    if plans is None:
        plans = _local.plans = {}
    key = (n, kind, dtype, batch, device)
    plan = plans.get(key)
    if plan is None:
        from cupy.cuda import cufft

        if len(plans) >= _PLANS_MAX:
            plans.clear()
        # Made under the device's context: a thread's first plan may come before any CuPy call there made the
        # device's primary context current (cuFFT then fails its first execution in that thread).
        with cupy().cuda.Device(device):
            plan = plans[key] = cufft.Plan1d(n, _fft_type(kind, dtype), batch)
    return plan


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
        if region.c2r:
            out[...] = c2r_via_c2c(cp, x, region.n)
            return out
        if not x.flags.c_contiguous:  # the plan reads batch after batch of n contiguous elements
            x = cp.ascontiguousarray(x)
        elif x.data.ptr % 16:
            # cuFFT's kernels may read real input as complex pairs and complex data as 16-byte vectors: an array one
            # element off a 16-byte boundary (a view at an offset) could fault on a misaligned address, which
            # poisons the process's CUDA context. A fresh copy is aligned; only such calls pay for it.
            x = x.copy()
        n = region.n
        plan = plan_for(n, region.kind, region.dtype, x.size // n, x.device.id)
        y = out if out.data.ptr % 16 == 0 else cp.empty_like(out)  # the same reason, for the output
        plan.fft(x, y, _INVERSE if region.inverse else _FORWARD)  # on CuPy's current stream
        if y is not out:
            out[...] = y
        if region.inverse:  # NumPy's "backward" normalisation: the inverse scales by 1/n
            cp.multiply(out, 1.0 / n, out=out)
        return out


register(CupyFFT())
