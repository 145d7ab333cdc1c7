"""Vendor LayerNorm on NVIDIA through PyTorch (``F.layer_norm``) on the caller's tensors (or DLPack views).

PyTorch has no out= form of layer_norm: into a given out (the gate's) its result is copied; a dispatched
call without out= returns torch's own output, no extra pass.
"""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.nvidia._torch import TorchCandidate, deliver, tensor


class TorchLayerNorm(TorchCandidate):
    name = "torch_layernorm"
    op = "layernorm"

    def run(self, region, params):
        import torch

        b = tensor(region, "bias") if region.bias is not None else None
        # torch.layer_norm: the op F.layer_norm wraps, without its Python-level dispatch checks
        return deliver(region, torch.layer_norm(tensor(region, "x"), (region.dims["cols"],), tensor(region, "weight"),
                                                b, region.eps))


register(TorchLayerNorm())
