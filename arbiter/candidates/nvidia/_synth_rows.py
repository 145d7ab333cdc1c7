"""Shared by the synthesized row candidates: a fused kernel per (op, dtype, exact cols, vector width)."""
from __future__ import annotations

import inspect

import numpy as np

from arbiter import synth
from arbiter.candidates import Tier
from arbiter.candidates.gpu import aligned16
from arbiter.candidates.gpu_rows import MAX_PER_THREAD, MAX_THREADS, check_rows
from arbiter.candidates.nvidia._cuda import NvidiaCandidate
from arbiter.synth import cuda as synth_cuda
from arbiter.targets.kernels import VEC16

MAX_COLS = MAX_THREADS * MAX_PER_THREAD


class SynthRows(NvidiaCandidate):
    """A row op served by ``arbiter.synth.cuda.row_kernel``, specialised on the exact column count."""

    tier = Tier.SYNTHESIZED
    templates = ("rows_common.cuh",)

    def __init__(self):
        self._kernels: dict[tuple, tuple] = {}

    def applies_to(self, region):
        return check_rows(region, self.dtypes, MAX_COLS)

    def source(self):
        return super().source() + inspect.getsource(synth) + inspect.getsource(synth_cuda)

    def launch(self, region, out, extra: tuple, weights: tuple = ()):
        cols, rows = region.dims["cols"], region.dims["rows"]
        v = VEC16[region.dtype]
        vec = v if cols % v == 0 and aligned16(region.x, out, *weights) else 1
        key = (region.dtype, cols, vec)
        found = self._kernels.get(key)
        if found is None:
            kernel = synth_cuda.row_kernel(self.op, region.dtype, cols, vec)
            threads, rpb, _ = synth_cuda.row_shape(cols, vec)
            found = self._kernels[key] = (synth_cuda.compile_kernel(kernel), threads, rpb)
        fn, threads, rpb = found
        if rows and cols:
            fn(((rows + rpb - 1) // rpb,), (threads * rpb,),
               (region.x,) + weights + (out, np.int32(rows), np.int64(cols), np.int64(cols)) + extra)
        return out
