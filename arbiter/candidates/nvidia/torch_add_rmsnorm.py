"""Vendor residual add + RMSNorm through PyTorch eager: the add, then ``torch.rms_norm`` (what ``F.rms_norm`` and a
fused-norm llama call), each into its half of one ``[2, rows, cols]`` output, on the caller's tensors (or DLPack
views)."""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.nvidia._torch import deliver, new_out, tensor
from arbiter.candidates.nvidia.torch_rmsnorm import TorchRMSNorm


class TorchAddRMSNorm(TorchRMSNorm):
    """``torch_rmsnorm``'s availability (torch.rms_norm, PyTorch 2.4+), its own op."""

    name = "torch_add_rmsnorm"
    op = "add_rmsnorm"

    def run(self, region, params):
        import torch

        x = tensor(region, "x")
        both = new_out(region, (2, *x.shape), x)
        torch.add(x, tensor(region, "residual"), out=both[0])
        both[1] = torch.rms_norm(both[0], (region.dims["cols"],), tensor(region, "weight"), region.eps)
        return region.out if region.out is not None else deliver(region, both)


register(TorchAddRMSNorm())
