"""Vendor matmul on NVIDIA through PyTorch (cuBLASLt), on CuPy memory via DLPack, writing into the given out.

PyTorch fuses the bias into its GEMM (``addmm``); the activation and residual follow as PyTorch ops,
each writing through ``out=`` so the last one lands in the caller's buffer without a copy. This is the
general form (every activation, exact GELU and SiLU included); ``torch_addmm_act`` is the fused one
(bias + ReLU or tanh-GELU in the GEMM's epilogue, a lone residual as the GEMM's C) where torch has it.
"""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.nvidia._torch import TorchCandidate, deliver, gemm_bias, out_tensor, tensor


def _activation(name: str, z, out):
    import torch

    aten = torch.ops.aten
    if name == "relu":
        return torch.clamp_min(z, 0, out=out)
    if name == "gelu":
        if z.device.type == "cpu":
            return _exact_gelu_cpu(z, out)
        return aten.gelu.out(z, approximate="none", out=out)
    if name == "gelu_tanh":
        return aten.gelu.out(z, approximate="tanh", out=out)
    return aten.silu.out(z, out=out)


def _exact_gelu_cpu(z, out):
    """Exact GELU as ``(z/2) * (1 + erf(z/sqrt 2))`` in two buffers. torch's vectorized CPU ``gelu`` (2.x) returns
    NaN for +Inf where the oracle (and this form) gives +Inf, so the gate's ``nonfinite`` probe refuses it; halving
    first keeps a finite z near the dtype's top finite, too."""
    import torch

    t = torch.mul(z, 0.7071067811865476)
    t.erf_().add_(1.0)
    torch.mul(z, 0.5, out=out)
    return out.mul_(t)


class TorchMatmul(TorchCandidate):
    name = "torch_matmul"
    op = "matmul"
    # Ahead of cupy_matmul (10) in the tier: cuBLASLt with the bias fused into the GEMM, and no output
    # conversion for a torch caller. Measured on an H200 (benchmarks/user_path.py, device mode):
    # 2048x4096x1024 fp16 with bias + GELU 41.5 us against cupy_matmul's 71.1 us.
    priority = 11

    def run(self, region, params):
        import torch

        a, b = tensor(region, "a"), tensor(region, "b")
        # Every step writes into o; later steps read it back in place (elementwise, so aliasing is safe).
        if region.out is not None:
            o = out_tensor(region)
            if region.bias is not None:
                torch.addmm(gemm_bias(region), a, b, out=o)
            else:
                torch.mm(a, b, out=o)
        else:
            o = torch.addmm(gemm_bias(region), a, b) if region.bias is not None else torch.mm(a, b)
        if region.activation != "none":
            _activation(region.activation, o, o)
        if region.residual is not None:
            torch.add(o, tensor(region, "residual"), out=o)
        return region.out if region.out is not None else deliver(region, o)


register(TorchMatmul())
