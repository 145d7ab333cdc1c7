"""Vendor RoPE through PyTorch eager: Hugging Face llama's ``x * cos + rotate_half(x) * sin`` on the caller's tensors
(or DLPack views), the unfused formulation a torch model runs (six kernels)."""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.nvidia._torch import TorchCandidate, deliver, tensor


class TorchRope(TorchCandidate):
    name = "torch_rope"
    op = "rope"

    def run(self, region, params):
        from arbiter.ops.rope.torch_ref import ref_rope

        return deliver(region, ref_rope(tensor(region, "x"), tensor(region, "cos"), tensor(region, "sin")))


register(TorchRope())
