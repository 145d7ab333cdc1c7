"""matmul's torch reference (``arbiter.torch.REFERENCE``)."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def apply_activation(name: str, z):
    if name == "none":
        return z
    if name == "relu":
        return torch.relu(z)
    if name == "gelu":
        return F.gelu(z)
    if name == "gelu_tanh":
        return F.gelu(z, approximate="tanh")
    if name == "silu":
        return F.silu(z)
    raise ValueError(f"activation: {name!r} is not one of none, relu, gelu, gelu_tanh, silu")


def ref_matmul(a, b, bias, residual, activation):
    z = a @ b
    if bias is not None:
        z = z + bias
    z = apply_activation(activation, z)
    return z if residual is None else z + residual
