"""Op kinds: one package per op (``arbiter/ops/<op>/``), registered here by name.

An op's package builds its ``OpKind`` (``arbiter.ops.kind``): region type, oracle, budgets, probe families,
large-shape check, torch reference, quick-suite shapes. The core asks the kind, never the op's name, so adding
an op kind is its folder and one ``register_op_kind`` line below (or, from outside the package, one call:
every rule, gate, selection, persistence and counters, applies to it unchanged).
"""
from __future__ import annotations

from arbiter.ops import add_rmsnorm, attention, fft, gated, layernorm, matmul, pointwise, rmsnorm, rope, softmax
from arbiter.ops.kind import OPS, OpKind, Product, TorchOp, op_kind, register_op, register_op_kind, unregister_op

__all__ = ["OPS", "OpKind", "Product", "TorchOp", "op_kind", "register_op", "register_op_kind", "unregister_op"]

register_op_kind(matmul.KIND)
register_op_kind(softmax.KIND)
register_op_kind(rmsnorm.KIND)
register_op_kind(layernorm.KIND)
register_op_kind(attention.KIND)
register_op_kind(fft.KIND)
register_op_kind(gated.KIND)
register_op_kind(pointwise.KIND)
register_op_kind(rope.KIND)
register_op_kind(add_rmsnorm.KIND)
