"""Vendor gated projection (SwiGLU: two ``torch.mm`` and torch's silu and product) on the CPU through PyTorch: the
nvidia ``torch_gated``'s code on zero-copy ``torch.from_numpy`` views (see
``arbiter/candidates/cpu/_torch.py``)."""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.cpu._torch import TorchOnCpu
from arbiter.candidates.nvidia.torch_gated import TorchGated


class TorchGatedCpu(TorchOnCpu, TorchGated):
    name = "torch_gated"


register(TorchGatedCpu())
