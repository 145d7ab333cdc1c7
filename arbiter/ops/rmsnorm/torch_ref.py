"""rmsnorm's torch reference (``arbiter.torch.REFERENCE``)."""
from __future__ import annotations

import torch


def ref_rmsnorm(x, weight, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * weight
