"""``rope``: rotary position embedding on q or k, ``x * cos + rotate_half(x) * sin`` (issue 43 item 2).

The op kind is this folder: its region (``Rope``), its float64 oracle, its probe families, its quick-suite shapes,
its torch reference and its torch op (``torch.ops.arbiter.rope``, through ``OpKind.torch_op``), registered with one
line in ``arbiter/ops/__init__.py``. Torch eager computes it in six passes over x-sized memory (two products, the
two halves' copy and negation, the concatenation, the sum); a fused kernel reads x once and writes once.
"""
from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from arbiter.errors import RegionError
from arbiter.keys import layout_class
from arbiter.ops.family import Family, host_array
from arbiter.ops.kind import OpKind, TorchOp
from arbiter.oracles import array_module, host64
from arbiter.regions import Region, dtype_name, random_operand


class Rope(Region):
    """Rotary position embedding, "rotate half" (llama's): ``out = x * cos + rotate_half(x) * sin`` where
    ``rotate_half(x) = concat(-x[..., D/2:], x[..., :D/2])``.

    ``x`` is ``[..., S, D]`` (leading dimensions: batch and heads; D even); ``cos`` and ``sin`` are ``[S, D]``, the
    tables of the S positions (each half holding the same frequencies in Hugging Face's llama; any values are
    served). One dtype throughout. The kernels take ``x`` as ``[rows, S, D]`` (a view where the leading dimensions
    merge, else a copy: a permuted view is computed out of place); the output has x's shape."""

    op = "rope"
    DIMS = ("rows", "seq", "dim")
    OPERAND_RANKS: ClassVar[dict[str, int]] = {"x": 3, "cos": 2, "sin": 2}
    __slots__ = ("x", "cos", "sin", "nd_shape")

    def __init__(self, x, cos, sin, *, out=None):
        self.target, self.x, self.back = self.adopt("x", x)
        self.dtype = dtype_name(self.x.dtype)
        _, self.cos, _ = self.adopt("cos", cos, self.target)
        _, self.sin, _ = self.adopt("sin", sin, self.target)
        self.same_dtype("cos", self.cos)
        self.same_dtype("sin", self.sin)
        if self.x.ndim < 2:
            raise RegionError("x", f"must be [..., S, D], got shape {tuple(self.x.shape)}")
        s, d = self.x.shape[-2:]
        if d % 2:
            raise RegionError("x", f"its last dimension D={d} must be even (rotate_half splits it in two halves)")
        for name, table in (("cos", self.cos), ("sin", self.sin)):
            if tuple(table.shape) != (s, d):
                raise RegionError(name, f"shape {tuple(table.shape)} should be [S, D] = [{s}, {d}] (x's last two)")
        self.nd_shape = None if self.x.ndim == 3 else tuple(self.x.shape)
        if self.nd_shape is not None:
            self.x = self.x.reshape(-1, s, d)
            if self.torch_in is not None and "x" in self.torch_in:
                self.torch_in["x"] = self.x
        rows = self.x.shape[0]
        self.check_out(out, self.nd_shape or (rows, s, d))
        if self.nd_shape is not None and self.out is not None:
            self.out = self.out.reshape(rows, s, d)  # (C-contiguous: a view)
        self.complete(layout_class(self.x) + layout_class(self.cos) + layout_class(self.sin),
                      {"rows": rows, "seq": s, "dim": d}, ())

    def operands(self):
        return {"x": self.x, "cos": self.cos, "sin": self.sin}

    def output_shape(self):
        return tuple(self.x.shape)

    @classmethod
    def random(cls, target: str, dtype: str, dims: dict, attrs: dict | None = None, layout: str = "RRR",
               rng: np.random.Generator | None = None) -> Rope:
        """A random instance: ``dims`` has rows, seq and dim (dim rounded up to even)."""
        rng = rng if rng is not None else np.random.default_rng(0)
        rows, s, d = dims["rows"], dims["seq"], dims["dim"] + dims["dim"] % 2
        return cls(random_operand(target, (rows, s, d), dtype, layout[0], rng),
                   random_operand(target, (s, d), dtype, layout[1], rng),
                   random_operand(target, (s, d), dtype, layout[2], rng))

    def resized(self, dims, rng):
        return self.random(self.target, self.dtype, dims, None, self.layout, rng)


def rotate_half(x):
    half = x.shape[-1] // 2
    xp = array_module(x)
    return xp.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def oracle(region) -> np.ndarray:
    x, cos, sin = host64(region, region.x), host64(region, region.cos), host64(region, region.sin)
    return x * cos + rotate_half(x) * sin


def tables(s: int, d: int, base: float = 10000.0) -> tuple[np.ndarray, np.ndarray]:
    """llama's cos and sin tables of positions 0..s-1 (float64, [s, d], each half the same frequencies)."""
    inv = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    angles = np.outer(np.arange(s, dtype=np.float64), inv)
    angles = np.concatenate([angles, angles], axis=-1)
    return np.cos(angles), np.sin(angles)


def _model_tables(region, rng):
    """llama's own tables (positions 0..S-1, base 10000): the values a model passes."""
    s, d = region.dims["seq"], region.dims["dim"]
    cos, sin = tables(s, d)
    region.cos[...] = host_array(region, (s, d), cos)
    region.sin[...] = host_array(region, (s, d), sin)


def _nan_in_x(region, rng):
    """A NaN in x at a random element of every other row: it reaches its own output element and its partner's
    (D/2 apart), and no other."""
    host = np.asarray(host64(region, region.x)).copy()
    rows, s, d = host.shape
    for r in range(0, rows, 2):
        host[r, rng.integers(0, s), rng.integers(0, d)] = np.nan
    region.x[...] = host_array(region, host.shape, host)


FAMILIES = (
    Family("model_tables", ("rope",), "llama's cos/sin tables of positions 0..S-1 (base 10000, halves equal): what a "
           "model passes (random tables are the benign family's)", _model_tables),
    Family("nan_in_x", ("rope",), "a NaN in x in every other row: it reaches its own element and its rotation "
           "partner's (D/2 apart) only; catches a kernel dropping NaN or spreading it along the row", _nan_in_x),
)

SUITE: tuple[tuple[dict, str, dict], ...] = (
    ({"rows": 8, "seq": 64, "dim": 64}, "float32", {}),
    ({"rows": 3, "seq": 17, "dim": 10}, "float64", {}),
)


def work(dims: dict, dtype: str):
    """Bytes of x read and of the output written (the tables are read once per position, cached over rows)."""
    if not {"rows", "seq", "dim"} <= dims.keys():
        return None
    item = int(np.dtype(dtype).itemsize) if dtype in ("float16", "float32", "float64") else 4
    return 2.0 * item * math.prod((dims["rows"], dims["seq"], dims["dim"])), "B"


def _output_shape(x, cos, sin):
    return tuple(x.shape)


# Its special-value semantics, as docs/budgets.md's table states them (NaN / Inf inputs, masked entries, other).
SPECIAL_VALUES = (
    "a NaN in x reaches its own element and its rotation partner's (D/2 apart) only, as x * cos + rotate_half(x) * "
    "sin computes it",
    "-",
    "llama's own cos/sin tables (base 10000, halves equal)",
)

KIND = OpKind("rope", Rope, oracle, families=FAMILIES, suite=SUITE, work=work,
              work_text="bytes of x read and of the output written",
              torch_reference="arbiter.ops.rope.torch_ref:ref_rope",
              torch_op=TorchOp("(Tensor x, Tensor cos, Tensor sin) -> Tensor", Rope, _output_shape),
              special_values=SPECIAL_VALUES)
