"""Vendor softmax (``torch.softmax``) on the CPU through PyTorch: the nvidia ``torch_softmax``'s code on zero-copy
``torch.from_numpy`` views (see ``arbiter/candidates/cpu/_torch.py``)."""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.cpu._torch import TorchOnCpu
from arbiter.candidates.nvidia.torch_softmax import TorchSoftmax


class TorchSoftmaxCpu(TorchOnCpu, TorchSoftmax):
    name = "torch_softmax"


register(TorchSoftmaxCpu())
