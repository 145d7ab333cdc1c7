"""Synthesized pointwise chains on NVIDIA: one fused CUDA kernel generated from the region's chain.

The generator is ``arbiter.synth.cuda_pointwise``; each (chain structure, dtype, vector width) gets its
own kernel, identified by the content hash of its source (``source_for(region)`` shows it). The
candidate's code identity is the generator's, so a changed generator is verified again. 16-byte vector
loads are used when every operand is 16-byte aligned; the solution index is the block size.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np

from arbiter.candidates import Tier, register
from arbiter.candidates.gpu import aligned16
from arbiter.candidates.nvidia._cuda import NvidiaCandidate
from arbiter.synth import cuda as synth_cuda
from arbiter.synth import cuda_pointwise
from arbiter.targets.kernels import VEC16

MAX_BLOCKS = 4096  # grid-stride beyond this: enough blocks in flight for any current GPU


class SynthPointwise(NvidiaCandidate):
    name = "synth_pointwise_cuda"
    op = "pointwise"
    tier = Tier.SYNTHESIZED
    templates = ()

    def __init__(self):
        self._kernels: dict[tuple, Callable] = {}

    def param_space(self):
        return [{"threads": 256}, {"threads": 512}, {"threads": 128}]

    def applies_to(self, region):
        ok = self.check_dtype(region)
        if ok is not True:
            return ok
        if set(region.layout) != {"R"}:
            return f"layout {region.layout}: the kernel walks flat C-contiguous operands; needs all R"
        return True

    def _vec(self, region, out) -> int:
        v = VEC16[region.dtype]
        return v if aligned16(region.x, out, *region.tensors()) else 1

    def run(self, region, params):
        out = region.alloc_out()
        n = out.size
        if n == 0:
            return out
        vec = self._vec(region, out)
        key = (region.chain, region.dtype, vec)
        fn = self._kernels.get(key)
        if fn is None:
            fn = self._kernels[key] = synth_cuda.compile_kernel(
                cuda_pointwise.pointwise_kernel(region.ops, region.dtype, vec))
        threads = params["threads"]
        blocks = min(MAX_BLOCKS, max(1, -(-(n // vec) // threads)))
        fn((blocks,), (threads,), (region.x, out) + cuda_pointwise.arguments(region) + (np.int64(n),))
        return out

    def source_for(self, region) -> str:
        """The generated kernel for ``region``'s chain (what ``arbiter explain --source`` prints)."""
        return cuda_pointwise.pointwise_kernel(region.ops, region.dtype, self._vec(region, region.alloc_out())).source

    def source(self):
        return inspect.getsource(type(self)) + inspect.getsource(cuda_pointwise)


register(SynthPointwise())
