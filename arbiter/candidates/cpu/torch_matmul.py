"""Vendor matmul with any epilogue (``addmm`` with the bias, then exact GELU, SiLU, ReLU through aten's out= ops)
on the CPU through PyTorch: the nvidia ``torch_matmul``'s code on zero-copy ``torch.from_numpy`` views (see
``arbiter/candidates/cpu/_torch.py``)."""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.cpu._torch import TorchOnCpu
from arbiter.candidates.nvidia.torch_matmul import TorchMatmul


class TorchMatmulCpu(TorchOnCpu, TorchMatmul):
    name = "torch_matmul"


register(TorchMatmulCpu())
