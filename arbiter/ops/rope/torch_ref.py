"""rope's torch reference (``arbiter.torch.REFERENCE``): Hugging Face llama's ``apply_rotary_pos_emb`` for one
tensor, as torch eager runs it (what ``benchmarks/fused_cpu.py`` times as the unfused peer)."""
from __future__ import annotations

import torch


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def ref_rope(x, cos, sin):
    return x * cos + rotate_half(x) * sin
