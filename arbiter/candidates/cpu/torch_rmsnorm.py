"""Vendor RMSNorm (``torch.rms_norm``) on the CPU through PyTorch: the nvidia ``torch_rmsnorm``'s code on zero-copy
``torch.from_numpy`` views (see ``arbiter/candidates/cpu/_torch.py``)."""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.cpu._torch import TorchOnCpu
from arbiter.candidates.nvidia.torch_rmsnorm import TorchRMSNorm


class TorchRMSNormCpu(TorchOnCpu, TorchRMSNorm):
    name = "torch_rmsnorm"


register(TorchRMSNormCpu())
