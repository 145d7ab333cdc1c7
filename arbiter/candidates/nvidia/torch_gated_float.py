"""Vendor gated projection (SwiGLU) on NVIDIA through PyTorch with the epilogue in float: two cuBLAS GEMMs
(``torch.mm``), then ``silu(g) * u`` computed in float and rounded once to the dtype, as ``cupy_gated`` does.

One rounding fewer than torch's own composition (``torch_gated``) in half precision, for two more elementwise
passes (the cast to float and the product's cast back): it stands in, next in the tier, at the keys where that
composition misses the gate's budget. In float32 it is ``torch_gated``'s arithmetic and declines.
"""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.nvidia._torch import TorchCandidate, deliver, out_tensor, tensor


class TorchGatedFloat(TorchCandidate):
    name = "torch_gated_float"
    op = "gated"
    priority = 4  # after torch_gated (5): the vendor's composition first where it passes the gate

    def applies_to(self, region):
        if region.dtype not in ("float16", "bfloat16"):
            return f"dtype {region.dtype}: the epilogue is already in the dtype's own precision (torch_gated)"
        return True

    def run(self, region, params):
        import torch

        x = tensor(region, "x")
        gate = torch.mm(x, tensor(region, "w_gate")).float()
        up = torch.mm(x, tensor(region, "w_up"))
        torch.nn.functional.silu(gate, inplace=True)
        out = out_tensor(region) if region.out is not None else torch.empty_like(up)
        torch.mul(gate, up, out=out)  # computed in float, rounded once into the dtype
        return region.out if region.out is not None else deliver(region, out)


register(TorchGatedFloat())
