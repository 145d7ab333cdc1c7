"""Vendor LayerNorm (``torch.layer_norm``) on the CPU through PyTorch: the nvidia ``torch_layernorm``'s code on
zero-copy ``torch.from_numpy`` views (see ``arbiter/candidates/cpu/_torch.py``)."""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.cpu._torch import TorchOnCpu
from arbiter.candidates.nvidia.torch_layernorm import TorchLayerNorm


class TorchLayerNormCpu(TorchOnCpu, TorchLayerNorm):
    name = "torch_layernorm"


register(TorchLayerNormCpu())
