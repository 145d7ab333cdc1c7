"""Vendor matmul with bias + ReLU fused (``torch._addmm_activation``) or a lone residual as addmm's C on the CPU
through PyTorch: the nvidia ``torch_addmm_act``'s code on zero-copy ``torch.from_numpy`` views (see
``arbiter/candidates/cpu/_torch.py``)."""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.cpu._torch import TorchOnCpu
from arbiter.candidates.nvidia.torch_addmm_act import TorchAddmmAct


class TorchAddmmActCpu(TorchOnCpu, TorchAddmmAct):
    name = "torch_addmm_act"

    def applies_to(self, region):
        # On the CPU torch._addmm_activation(use_gelu=True) computes exact (erf) GELU, not the tanh form the
        # region asks for: only bias + ReLU and the lone residual are the same op here.
        if region.activation == "gelu_tanh":
            return "activation gelu_tanh: torch's CPU _addmm_activation computes exact GELU; torch_matmul serves it"
        return super().applies_to(region)


register(TorchAddmmActCpu())
