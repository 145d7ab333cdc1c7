"""Composed pointwise chains on NVIDIA through PyTorch: one torch elementwise kernel per step, in place on
one float32 working tensor for half types (rounded once at the end, as the oracle's budget assumes).

A chain of generic passes is not a vendor kernel: it sits in the composed tier, the fallback of last
resort beneath the emitted and synthesized kernels. Where CuPy is absent it is what serves the op.
"""
from __future__ import annotations

from arbiter.candidates import Tier, register
from arbiter.candidates.nvidia._torch import TorchCandidate, deliver, view

SQRT_2_OVER_PI = 0.7978845608028654


def _unary(name: str, v):
    import torch.nn.functional as F

    if name == "neg":
        v.neg_()
    elif name == "abs":
        v.abs_()
    elif name == "relu":
        v.relu_()
    elif name == "exp":
        v.exp_()
    elif name == "tanh":
        v.tanh_()
    elif name == "sigmoid":
        v.sigmoid_()
    elif name == "silu":
        F.silu(v, inplace=True)
    elif name == "gelu_tanh":
        v.copy_(F.gelu(v, approximate="tanh"))
    else:  # square
        v.square_()


def _binary(name: str, v, operand):
    import torch

    if isinstance(operand, float):
        if name == "max":
            v.clamp_(min=operand)
        elif name == "min":
            v.clamp_(max=operand)
        else:
            {"add": v.add_, "sub": v.sub_, "mul": v.mul_}[name](operand)
        return
    {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "max": torch.maximum,
     "min": torch.minimum}[name](v, operand, out=v)


class TorchPointwise(TorchCandidate):
    name = "torch_pointwise"
    op = "pointwise"
    tier = Tier.COMPOSED

    @staticmethod
    def working_dtype(dtype):
        """The dtype the chain runs in: float32 for half types (rounded once at the end), else the caller's."""
        import torch

        return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype

    def run(self, region, params):
        import torch

        given = region.torch_in or {}
        x = given.get("x", None)
        x = view(region.x) if x is None else x
        work = self.working_dtype(x.dtype)
        v = torch.empty(tuple(x.shape), dtype=work, device=x.device).copy_(x)  # C-contiguous, whatever x's layout
        for i, (name, operand) in enumerate(region.ops):
            if operand is None:
                _unary(name, v)
            elif isinstance(operand, float):
                _binary(name, v, operand)
            else:
                theirs = given.get(f"ops[{i}]")
                _binary(name, v, view(operand) if theirs is None else theirs)
        return deliver(region, v.to(x.dtype))


register(TorchPointwise())
