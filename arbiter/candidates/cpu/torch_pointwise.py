"""Vendor pointwise chains (one torch elementwise op per step, in place; composed tier, as on NVIDIA) on the CPU
through PyTorch: the nvidia ``torch_pointwise``'s code on zero-copy ``torch.from_numpy`` views (see
``arbiter/candidates/cpu/_torch.py``)."""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.cpu._torch import TorchOnCpu
from arbiter.candidates.nvidia.torch_pointwise import TorchPointwise


class TorchPointwiseCpu(TorchOnCpu, TorchPointwise):
    name = "torch_pointwise"

    @staticmethod
    def working_dtype(dtype):
        """float64 for every float type, as ``numpy_pointwise`` does on the CPU: a float32 chain whose intermediate
        overflows (``mul`` by a large scalar, then ``silu``) would give -inf * 0 = NaN where the oracle is finite."""
        import torch

        return torch.float64 if dtype in (torch.float16, torch.bfloat16, torch.float32) else dtype


register(TorchPointwiseCpu())
