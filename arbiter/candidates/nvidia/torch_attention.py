"""Vendor attention on NVIDIA through PyTorch: ``F.scaled_dot_product_attention`` (flash / memory-efficient
/ cuDNN backends as PyTorch picks), on the caller's tensors (or DLPack views of CuPy arrays).

``is_causal=True`` is top-left aligned in PyTorch, as the region defines it. SDPA has no out= form: into a
given out (the gate's) its result is copied; a dispatched call without out= returns SDPA's own output.
"""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.nvidia._torch import TorchCandidate, deliver, tensor


class TorchAttention(TorchCandidate):
    name = "torch_attention"
    op = "attention"

    def run(self, region, params):
        import torch.nn.functional as F

        if 0 in region.output_shape():
            return region.alloc_out()
        q, k, v = tensor(region, "q"), tensor(region, "k"), tensor(region, "v")
        if region.causal and region.scale is not None and region.scale <= 0:
            # SDPA's causal mask is scaled with the scores: -inf * 0 = NaN, -inf * (a negative scale) = +inf, NaN
            # rows either way (torch 2.13 on the CPU; the gate's scalar sentinels found it). The same top-left mask
            # as a boolean attn_mask is applied after the scale: right for every scale.
            import torch

            mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=region.scale)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=region.causal, scale=region.scale)
        return deliver(region, y)


register(TorchAttention())
