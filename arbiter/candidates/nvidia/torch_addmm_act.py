"""Vendor matmul with its epilogue fused into the GEMM, through PyTorch: one torch op where torch has one.

* bias + ReLU, bias + GELU (tanh): ``torch._addmm_activation``, whose CUDA path is cuBLASLt's RELU_BIAS /
  GELU_BIAS epilogue; every GPU path of it computes the tanh form of GELU (pytorch/pytorch#104061; its CPU
  path computes erf), so it serves ``gelu_tanh`` and never exact ``gelu``. A residual follows as one
  in-place add.
* residual alone: ``torch.addmm(residual, a, b)``, the residual entering the GEMM as its C (beta = 1).

Everything else (no epilogue, exact GELU, SiLU, an activation without bias, bias + residual; and where the H200's
gate found cuBLASLt's epilogue wrong: ReLU, which drops NaN, and tanh-GELU in float32) is ``torch_matmul``'s:
this candidate declines it, so the arbiter measures the two side by side only where both fuse something
different. Into a given out (the gate's) the same ops write through ``out=``.
"""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.nvidia._torch import TorchCandidate, deliver, gemm_bias, out_tensor, tensor

# The activations torch._addmm_activation computes on CUDA, by the region's name: use_gelu.
FUSED = {"relu": False, "gelu_tanh": True}
# cuBLASLt's ReLU epilogues turn NaN into 0 (measured: see applies_to); cublaslt_matmul declines them too.
RELU_DROPS_NAN = "cuBLASLt's ReLU epilogue turns NaN into 0 (the oracle keeps NaN)"


def fused_form(region) -> str | None:
    """Which single torch op serves ``region``: "activation" (bias + a fused activation, residual after),
    "residual" (the residual as addmm's C), or None when torch fuses nothing more than ``torch_matmul``."""
    if region.bias is not None and region.activation in FUSED:
        return "activation"
    if region.residual is not None and region.bias is None and region.activation == "none":
        return "residual"
    return None


class TorchAddmmAct(TorchCandidate):
    name = "torch_addmm_act"
    op = "matmul"
    # Ahead of torch_matmul (11) in the tier: where it applies it runs one GEMM and no separate activation
    # pass (plus the residual add), torch_matmul a GEMM and one or two elementwise passes.
    priority = 12

    def applies_to(self, region):
        if fused_form(region) is None:
            return ("epilogue: torch fuses bias + relu or gelu_tanh (_addmm_activation) and a lone residual "
                    f"(addmm); activation={region.activation}, bias={region.bias is not None}, "
                    f"residual={region.residual is not None} is torch_matmul's")
        if region.activation == "relu" and self.target == "nvidia":
            # cuBLASLt's RELU_BIAS epilogue turns NaN into 0 (the oracle keeps it): on an H200 (torch 2.11) the
            # gate's nonfinite probe got 0.0 where the oracle has NaN in float16 and bfloat16 (2026-12-03), and
            # in float32 with a column-major A (2026-12-04; row-major float32 took a path that kept it).
            # torch_matmul serves it (addmm, then clamp_min, which keeps NaN).
            return f"relu: {RELU_DROPS_NAN}"
        if region.activation == "gelu_tanh" and region.dtype == "float32" and self.target == "nvidia":
            # cuBLASLt's GELU_BIAS epilogue evaluates an approximate tanh: on an H200 (torch 2.11, 2026-12-04) the
            # gate measured a relative error of 3.8e-05 at 1x1x1 with a bias (an exact product), against float32's
            # 1e-05. torch_matmul serves it (addmm, then F.gelu(approximate="tanh") in float32).
            return "gelu_tanh in float32: cuBLASLt's GELU epilogue is approximate (3.8e-05 against the 1e-05 budget)"
        if region.activation == "gelu_tanh" and region.residual is not None and region.dtype != "float32":
            # The fused GELU's output is rounded to half precision, then the residual is added and rounded
            # again: on an H200 that missed the half-precision budgets at 1x1x1 (4.9e-02 against 2e-02 in
            # bfloat16). torch_matmul serves it; bias + relu + residual is exact after the GEMM's rounding.
            return f"gelu_tanh + residual in {region.dtype}: two roundings (activation, then residual add)"
        return True

    def run(self, region, params):
        import torch

        a, b = tensor(region, "a"), tensor(region, "b")
        o = out_tensor(region) if region.out is not None else None
        if region.bias is None:  # a lone residual: C of the GEMM
            r = tensor(region, "residual")
            y = torch.addmm(r, a, b) if o is None else torch.addmm(r, a, b, out=o)
        else:
            bias, gelu = gemm_bias(region), FUSED[region.activation]
            y = (torch._addmm_activation(bias, a, b, use_gelu=gelu) if o is None
                 else torch._addmm_activation(bias, a, b, use_gelu=gelu, out=o))
            if region.residual is not None:
                y.add_(tensor(region, "residual"))  # elementwise, in place: the one pass left
        return region.out if o is not None else deliver(region, y)


register(TorchAddmmAct())
