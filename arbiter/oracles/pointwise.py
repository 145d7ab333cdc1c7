"""Oracle for ``pointwise`` chains: each step applied in float64, in order."""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from arbiter.oracles import host64

UNARY: dict[str, Callable] = {
    "neg": np.negative,
    "abs": np.abs,
    "relu": lambda v: np.maximum(v, 0.0),
    "exp": np.exp,
    "tanh": np.tanh,
    "sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)),
    "silu": lambda v: v / (1.0 + np.exp(-v)),
    "gelu_tanh": lambda v: 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3))),
    "square": np.square,
}
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def oracle(region) -> np.ndarray:
    v = host64(region, region.x)
    for name, operand in region.ops:
        if operand is None:
            v = UNARY[name](v)
        else:
            v = BINARY[name](v, operand if isinstance(operand, float) else host64(region, operand))
    return v
