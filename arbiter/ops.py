"""Op kinds: each op's region type and oracle, registered by name.

Built-in kinds are registered here; users add their own with ``register_op``
from outside the package, and every rule (gate, selection, persistence,
counters) applies to them unchanged.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from arbiter import regions
from arbiter.oracles import attention, fft, gated, layernorm, matmul, pointwise, rmsnorm, softmax


@dataclass(frozen=True)
class OpKind:
    name: str
    region_type: type[regions.Region]
    oracle: Callable  # region -> float64 numpy array


OPS: dict[str, OpKind] = {}


def register_op(name: str, region_type: type[regions.Region], oracle: Callable) -> OpKind:
    """Register (or replace) an op kind. ``region_type.op`` must equal ``name``."""
    if getattr(region_type, "op", None) != name:
        raise ValueError(f"region_type: {region_type.__name__}.op is {getattr(region_type, 'op', None)!r}, "
                         f"expected {name!r}")
    kind = OPS[name] = OpKind(name, region_type, oracle)
    return kind


def op_kind(name: str) -> OpKind:
    kind = OPS.get(name)
    if kind is None:
        raise ValueError(f"op: unknown op {name!r}; known: {', '.join(sorted(OPS))}")
    return kind


register_op("matmul", regions.Matmul, matmul.oracle)
register_op("softmax", regions.Softmax, softmax.oracle)
register_op("rmsnorm", regions.RMSNorm, rmsnorm.oracle)
register_op("layernorm", regions.LayerNorm, layernorm.oracle)
register_op("attention", regions.Attention, attention.oracle)
register_op("fft", regions.FFT, fft.oracle)
register_op("gated", regions.Gated, gated.oracle)
register_op("pointwise", regions.Pointwise, pointwise.oracle)
