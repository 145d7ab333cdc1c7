"""add_rmsnorm's torch reference (``arbiter.torch.REFERENCE``): a llama block's residual add and the next RMSNorm as
torch eager runs them (the sum, then Hugging Face's ``LlamaRMSNorm``: three more passes), stacked as the op returns
them."""
from __future__ import annotations

import torch


def ref_add_rmsnorm(x, residual, weight, eps):
    s = x + residual
    return torch.stack((s, s * torch.rsqrt((s * s).mean(-1, keepdim=True) + eps) * weight))
