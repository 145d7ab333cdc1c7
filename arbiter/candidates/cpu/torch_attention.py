"""Vendor attention (``F.scaled_dot_product_attention``: torch's fused flash kernel on the CPU) on the CPU through
PyTorch: the nvidia ``torch_attention``'s code on zero-copy ``torch.from_numpy`` views (see
``arbiter/candidates/cpu/_torch.py``)."""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.cpu._torch import TorchOnCpu
from arbiter.candidates.nvidia.torch_attention import TorchAttention


class TorchAttentionCpu(TorchOnCpu, TorchAttention):
    name = "torch_attention"


register(TorchAttentionCpu())
