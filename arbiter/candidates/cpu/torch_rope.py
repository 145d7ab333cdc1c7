"""Vendor RoPE (torch eager's ``x * cos + rotate_half(x) * sin``) on the CPU through PyTorch: the nvidia
``torch_rope``'s code on zero-copy ``torch.from_numpy`` views (see ``arbiter/candidates/cpu/_torch.py``)."""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.cpu._torch import TorchOnCpu
from arbiter.candidates.nvidia.torch_rope import TorchRope


class TorchRopeCpu(TorchOnCpu, TorchRope):
    name = "torch_rope"


register(TorchRopeCpu())
