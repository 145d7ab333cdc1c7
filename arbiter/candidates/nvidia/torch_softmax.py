"""Vendor softmax on NVIDIA through PyTorch: ``torch.softmax`` on the caller's tensors (or DLPack views of
CuPy arrays); into a given out through aten's out= overload (no extra copy pass)."""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.nvidia._torch import TorchCandidate, deliver, out_tensor, tensor


class TorchSoftmax(TorchCandidate):
    name = "torch_softmax"
    op = "softmax"

    def run(self, region, params):
        import torch

        if region.out is not None:
            torch.ops.aten._softmax.out(tensor(region, "x"), region.axis, False, out=out_tensor(region))
            return region.out
        return deliver(region, torch.softmax(tensor(region, "x"), region.axis))


register(TorchSoftmax())
