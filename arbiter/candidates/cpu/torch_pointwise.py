"""Vendor pointwise chains (one torch elementwise op per step, in place; composed tier, as on NVIDIA) on the CPU
through PyTorch: the nvidia ``torch_pointwise``'s code on zero-copy ``torch.from_numpy`` views (see
``arbiter/candidates/cpu/_torch.py``)."""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.cpu._torch import TorchOnCpu
from arbiter.candidates.nvidia.torch_pointwise import TorchPointwise


class TorchPointwiseCpu(TorchOnCpu, TorchPointwise):
    name = "torch_pointwise"


register(TorchPointwiseCpu())
