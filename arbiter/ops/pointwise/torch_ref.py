"""pointwise's torch reference (``arbiter.torch.REFERENCE``), and the chain parser ``arbiter.torch`` shares."""
from __future__ import annotations

import torch
import torch.nn.functional as F

_UNARY = {"neg": torch.neg, "abs": torch.abs, "relu": torch.relu, "exp": torch.exp, "tanh": torch.tanh,
          "sigmoid": torch.sigmoid, "silu": F.silu, "gelu_tanh": lambda v: F.gelu(v, approximate="tanh"),
          "square": torch.square}
_BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "max": torch.maximum, "min": torch.minimum}


def steps(chain: str, tensors, scalars) -> list[tuple]:
    """``mul[t]>add[s]>relu`` with its operands in order -> the region's steps ``[("mul", t0), ...]``."""
    found: list[tuple] = []  # (name,) or (name, operand)
    t, s = iter(tensors), iter(scalars)
    for part in filter(None, chain.split(">")):
        name, _, kind = part.partition("[")
        if kind == "t]":
            found.append((name, next(t, None)))
        elif kind == "s]":
            found.append((name, next(s, None)))
        elif part == "copy":
            continue
        else:
            found.append((name,))
        if len(found[-1]) == 2 and found[-1][1] is None:
            raise ValueError(f"chain: step {part!r} has no operand left in "
                             f"{'tensors' if kind == 't]' else 'scalars'}")
    if next(t, None) is not None or next(s, None) is not None:
        raise ValueError(f"chain: {chain!r} uses fewer operands than given in tensors/scalars")
    return found


def ref_pointwise(x, chain, tensors, scalars):
    v = x
    for step in steps(chain, tensors, scalars):
        if len(step) == 1:
            v = _UNARY[step[0]](v)
        else:
            operand = step[1]
            v = _BINARY[step[0]](v, operand if torch.is_tensor(operand) else torch.tensor(operand, dtype=v.dtype,
                                                                                         device=v.device))
    return v
