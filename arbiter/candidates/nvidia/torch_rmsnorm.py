"""Vendor RMSNorm on NVIDIA through PyTorch (``F.rms_norm``) on the caller's tensors (or DLPack views).

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
        import torch.nn.functional as F

        return True if hasattr(F, "rms_norm") else "this PyTorch has no F.rms_norm (needs 2.4+)"

    def run(self, region, params):
        import torch.nn.functional as F

        w = tensor(region, "weight")
        return deliver(region, F.rms_norm(tensor(region, "x"), (w.shape[0],), w, region.eps))


register(TorchRMSNorm())
