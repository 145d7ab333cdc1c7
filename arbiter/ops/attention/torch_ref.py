"""attention's torch reference (``arbiter.torch.REFERENCE``)."""
from __future__ import annotations

import math

import torch


def ref_attention(q, k, v, causal, scale):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = scale * (q @ k.transpose(-1, -2))
    if causal:  # top-left aligned, as the region and the oracle
        sq, sk = scores.shape[-2:]
        mask = torch.ones(sq, sk, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, -1) @ v
