"""Vendor residual add + RMSNorm on the CPU through PyTorch: the nvidia ``torch_add_rmsnorm``'s code on zero-copy
``torch.from_numpy`` views (see ``arbiter/candidates/cpu/_torch.py``)."""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.cpu._torch import TorchOnCpu
from arbiter.candidates.nvidia.torch_add_rmsnorm import TorchAddRMSNorm


class TorchAddRMSNormCpu(TorchOnCpu, TorchAddRMSNorm):
    name = "torch_add_rmsnorm"


register(TorchAddRMSNormCpu())
