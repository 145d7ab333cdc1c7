"""Vendor attention on NVIDIA through PyTorch: ``F.scaled_dot_product_attention`` (flash / memory-efficient
/ cuDNN backends as PyTorch picks), on the caller's tensors (or DLPack views of CuPy arrays).

``is_causal=True`` is top-left aligned in PyTorch, as the region defines it. SDPA has no out= form: into a
given out (the gate's) its result is copied; a dispatched call without out= returns SDPA's own output.
"""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.nvidia._torch import TorchCandidate, deliver, tensor


def _aligned(t):
    """``t``, or a copy of it where its data does not start on a 16-byte boundary: SDPA (torch 2.11) faulted with
    cudaErrorMisalignedAddress, which poisons the process's CUDA context, on float32 q, k, v one element off a
    boundary on an H200 (2026-12-03, the gate's pointer shift): the backend it picks loads 16 bytes at a time
    without checking the pointer. The copy costs a pass over the input, on such calls only."""
    return t.clone() if t.is_cuda and t.data_ptr() % 16 else t


class TorchAttention(TorchCandidate):
    name = "torch_attention"
    op = "attention"

    def run(self, region, params):
        import torch.nn.functional as F

        if 0 in region.output_shape():
            return region.alloc_out()
        q, k, v = (_aligned(tensor(region, name)) for name in ("q", "k", "v"))
        scale = region.scale
        if scale is not None and scale < 0:
            # FlashAttention (SDPA's half-precision backend on the GPU) subtracts the row max of the unscaled
            # scores, which a negative scale makes the row minimum: exp overflows. The gate's negative-scale
            # sentinel failed it in float16/bfloat16 only (H200, 2026-12-03). (-q) k^T (-s) = q k^T s exactly
            # (negation is exact): the same result with a positive scale, for one pass over q. It also keeps a
            # causal mask right, which SDPA scales with the scores (-inf * a negative scale = +inf).
            q, scale = -q, -scale
        if scale == 0:
            # A zero scale makes SDPA's backends compute -inf * 0 = NaN: the causal mask scaled by 0 (torch 2.13
            # on the CPU) and, with no mask at all, whole rows in float16/bfloat16 on an H200 (FlashAttention's
            # padding, 2026-12-03; the gate's scalar sentinels found both). A boolean attn_mask is applied after
            # the scale and sends SDPA to a backend without that product: top-left for causal, all keys if not.
            import torch

            mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.tril() if region.causal else mask,
                                               scale=scale)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=region.causal, scale=scale)
        return deliver(region, y)


register(TorchAttention())
