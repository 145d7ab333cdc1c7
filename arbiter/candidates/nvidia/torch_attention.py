"""Vendor attention on NVIDIA through PyTorch: ``F.scaled_dot_product_attention`` (flash / memory-efficient
/ cuDNN backends as PyTorch picks), on CuPy memory via DLPack.

``is_causal=True`` is top-left aligned in PyTorch, as the region defines it. SDPA has no out= form, so its
result is copied into the given out: one extra pass over the output, shown honestly in the timings.
"""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.nvidia._torch import TorchCandidate, view


class TorchAttention(TorchCandidate):
    name = "torch_attention"
    op = "attention"

    def run(self, region, params):
        import torch.nn.functional as F

        out = region.alloc_out()
        if out.size == 0:
            return out
        y = F.scaled_dot_product_attention(view(region.q), view(region.k), view(region.v),
                                           is_causal=region.causal, scale=region.scale)
        view(out).copy_(y)
        return out


register(TorchAttention())
