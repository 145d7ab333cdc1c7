"""Vendor matmul on NVIDIA through PyTorch (cuBLASLt), on CuPy memory via DLPack, writing into the given out.

PyTorch fuses the bias into its GEMM (``addmm``); the activation and residual follow as PyTorch ops,
each writing through ``out=`` so the last one lands in the caller's buffer without a copy.
"""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.nvidia._torch import TorchCandidate, view


def _activation(name: str, z, out):
    import torch

    aten = torch.ops.aten
    if name == "relu":
        return torch.clamp_min(z, 0, out=out)
    if name == "gelu":
        return aten.gelu.out(z, approximate="none", out=out)
    if name == "gelu_tanh":
        return aten.gelu.out(z, approximate="tanh", out=out)
    return aten.silu.out(z, out=out)


class TorchMatmul(TorchCandidate):
    name = "torch_matmul"
    op = "matmul"

    def run(self, region, params):
        import torch

        out = region.alloc_out()
        a, b, o = view(region.a), view(region.b), view(out)
        # Every step writes into o; later steps read it back in place (elementwise, so aliasing is safe).
        if region.bias is not None:
            torch.addmm(view(region.bias), a, b, out=o)
        else:
            torch.matmul(a, b, out=o)
        if region.activation != "none":
            _activation(region.activation, o, o)
        if region.residual is not None:
            torch.add(o, view(region.residual), out=o)
        return out


register(TorchMatmul())
