"""Synthesized matmul on the CPU: the BLAS product, then the epilogue chain fused into one numba pass.

NumPy's vendor path makes one pass over the output per epilogue step (bias add, the activation's
several ufuncs, residual add), each reading and writing all of ``M x N``. Here the generator
(``arbiter.synth``) writes a kernel from the region's chain (bias -> activation -> residual) that
reads each output element once, applies every step in registers and writes it back.

Parameter (solution index): ``parallel``, whether the pass is split across threads (``prange``)
or runs on one (small outputs, where waking threads costs more than the pass). Each value is its
own generated source.

Code identity: the generator's code (``arbiter.synth`` and its CPU backend) and this module. Together
with the problem key (which fixes the chain and dtype) it fixes every kernel source this candidate
can write; ``source_for(region)`` shows that source and its content hash names its cache file.
"""
from __future__ import annotations

import inspect
import sys

import numpy as np

from arbiter import synth
from arbiter.candidates import Candidate, Tier, register
from arbiter.candidates.cpu._numba import NUMBA_MISSING, SerialLaunches, contiguous_reason, dtype_reason
from arbiter.synth import cpu as synth_cpu


class NumbaEpilogue(SerialLaunches, Candidate):
    name = "numba_epilogue_synth"
    target = "cpu"
    op = "matmul"
    tier = Tier.SYNTHESIZED

    def __init__(self):
        # (key attrs, dtype, parallel) -> generated kernel: the hot path is one dict lookup.
        self._kernels: dict = {}
        self._last_compile_s = 0.0  # private: a public attribute is part of the behaviour identity

    @property
    def last_compile_s(self) -> float:
        return self._last_compile_s

    def available(self):
        return NUMBA_MISSING or True

    def applies_to(self, region):
        ok = dtype_reason(region)
        if ok is not True:
            return ok
        if not region.has_epilogue:
            return "no epilogue: nothing to fuse after the product (the vendor candidate computes a @ b)"
        for argument in ("bias", "residual"):
            ok = contiguous_reason(argument, getattr(region, argument))
            if ok is not True:
                return ok
        return True

    def param_space(self):
        return [{"parallel": True}, {"parallel": False}]

    def generated(self, region, params) -> synth_cpu.SynthKernel:
        sig = (region.key.attrs, region.dtype, params["parallel"])
        found = self._kernels.get(sig)
        if found is None:
            found = self._kernels[sig] = synth_cpu.kernel(synth.epilogue_chain(region), region.dtype,
                                                          params["parallel"])
        return found

    def source_for(self, region, params=None) -> str:
        """The generated kernel source for ``region`` (default parameters unless given), hash first."""
        k = self.generated(region, params or self.param_space()[0])
        return f"# content hash {k.hash}, file {k.path}\n{k.source}"

    def run(self, region, params):
        out = region.alloc_out()
        if region.residual is not None and np.may_share_memory(region.residual, out):
            z = np.matmul(region.a, region.b)  # out= is the residual (in place): the product may not overwrite it
        else:
            z = np.matmul(region.a, region.b, out=out)
        k = self.generated(region, params)
        args = (z, out) + tuple(getattr(region, o) for o in ("bias", "residual") if getattr(region, o) is not None)
        if region.dtype not in k.compile_s:
            self._last_compile_s = k.ensure(region.dtype, args)
        k.fn(*args)
        return out

    def source(self):
        return "".join(inspect.getsource(sys.modules[m]) for m in (__name__, "arbiter.synth", "arbiter.synth.cpu"))


register(NumbaEpilogue())
