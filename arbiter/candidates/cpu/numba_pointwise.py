"""Synthesized pointwise chains on the CPU: one fused numba kernel generated from the region's chain.

The generator is ``arbiter.synth.pointwise``; each chain structure and dtype gets its own kernel
(identified by the content hash of its source; ``source_for(region)`` shows it). The candidate's
code identity is the generator's, so a changed generator is verified again.

Parameter (solution index): ``parallel``, whether the pass is split across threads (``prange``): a short chain
costs less than waking the pool, a long one is memory-bound and gains from both cores; measurement decides.
"""
from __future__ import annotations

import inspect

from arbiter.candidates import Candidate, Tier, register
from arbiter.candidates.cpu._numba import NUMBA_MISSING, SerialLaunches, dtype_reason
from arbiter.memo import Memo
from arbiter.synth import pointwise


class SynthPointwise(SerialLaunches, Candidate):
    name = "synth_pointwise_fused"
    target = "cpu"
    op = "pointwise"
    tier = Tier.SYNTHESIZED

    def available(self):
        return NUMBA_MISSING or True

    def applies_to(self, region):
        ok = dtype_reason(region)
        if ok is not True:
            return ok
        if set(region.layout) != {"R"}:
            return f"layout {region.layout}: the kernel walks flat C-contiguous operands; needs all R"
        return True

    def param_space(self):
        return [{"parallel": True}, {"parallel": False}]

    # (chain structure, dtype, parallel) -> its kernel: a warm call is one dict lookup, not the source's text and
    # content hash (which cost more than the whole kernel at a few thousand elements)
    kernels = Memo()

    def run(self, region, params):
        out = region.alloc_out()
        if out.size:
            sig = (region.chain, region.dtype, params.get("parallel", True))
            k = self.kernels.get(sig)
            if k is None:
                k = self.kernels[sig] = pointwise.kernel(region.ops, region.dtype, sig[2])
            args = (region.x.reshape(-1), out.reshape(-1)) + pointwise.arguments(region)
            k.ensure(region.chain, args)
            k.fn(*args)
        return out

    def source_for(self, region, params=None) -> str:
        """The generated kernel for ``region``'s chain (what ``arbiter explain --source`` prints)."""
        return pointwise.source(region.ops, region.dtype, (params or {}).get("parallel", True))

    def source(self):
        return inspect.getsource(type(self)) + inspect.getsource(pointwise)


register(SynthPointwise())
