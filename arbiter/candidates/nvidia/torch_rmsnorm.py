"""Vendor RMSNorm on NVIDIA through PyTorch (``torch.rms_norm``, what ``F.rms_norm`` calls) on the caller's
tensors (or DLPack views).

PyTorch has no out= form of rms_norm: into a given out (the gate's) its result is copied; a dispatched
call without out= returns torch's own output, no extra pass.
"""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.nvidia._torch import TorchCandidate, deliver, tensor


class TorchRMSNorm(TorchCandidate):
    name = "torch_rmsnorm"
    op = "rmsnorm"

    def available(self):
        ok = super().available()
        if ok is not True:
            return ok
        import torch

        return True if hasattr(torch, "rms_norm") else "this PyTorch has no torch.rms_norm (needs 2.4+)"

    def run(self, region, params):
        import torch

        # torch.rms_norm: the op F.rms_norm wraps, without its Python-level dispatch checks (a warm call's cost)
        return deliver(region, torch.rms_norm(tensor(region, "x"), (region.dims["cols"],), tensor(region, "weight"),
                                              region.eps))


register(TorchRMSNorm())
