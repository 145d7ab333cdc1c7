"""Problem keys and shape buckets.

A problem key is what a decision is keyed on:
``(target, op, dtype, layout class, structural attributes, shape bucket)``.
It is computed from shapes, dtypes and strides only, never from array data.

Shape buckets. A bucket policy maps each named dimension to a bound:

* ``pow2`` (the default): ``n -> 2**ceil(log2 n)``; 0 stays 0, 1 stays 1.
  The bucket with bound ``B`` holds ``B//2 + 1 .. B`` (for ``B >= 2``), so
  ``1, 2, 3..4, 5..8, 9..16, ...``. Its edge shapes are ``B//2 + 1`` and ``B``.
* ``exact``: the bound is the size itself; the only edge is the size.

Ops choose a policy per dimension (``Region.bucket_policy``); a policy is any
object with ``bound(n)`` and ``edges(bound)``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


def params_id(params: dict) -> str:
    """Canonical text of a parameter set (the stored solution index)."""
    return json.dumps(params, sort_keys=True, separators=(",", ":")) if params else "{}"


class Pow2:
    name = "pow2"

    @staticmethod
    def bound(n: int) -> int:
        return n if n <= 1 else 1 << (n - 1).bit_length()

    @staticmethod
    def edges(bound: int) -> tuple[int, ...]:
        # 0, 1 and 2 are buckets of one size; wider buckets have two edges.
        return (bound,) if bound <= 2 else (bound // 2 + 1, bound)


class Exact:
    name = "exact"

    @staticmethod
    def bound(n: int) -> int:
        return n

    @staticmethod
    def edges(bound: int) -> tuple[int, ...]:
        return (bound,)


POW2 = Pow2()
EXACT = Exact()


@dataclass(frozen=True, slots=True)
class ProblemKey:
    """One decision's key. ``id`` is its canonical text; equality and hashing use it."""

    target: str
    op: str
    dtype: str
    layout: str
    attrs: tuple[tuple[str, str], ...]
    bucket: tuple[tuple[str, int], ...]
    id: str

    @classmethod
    def make(cls, target, op, dtype, layout, attrs, bucket) -> ProblemKey:
        attrs = tuple(attrs)
        bucket = tuple(bucket)
        text = "{}:{}:{}:{}:{}:{}".format(
            target, op, dtype, layout,
            ",".join(f"{k}={v}" for k, v in attrs) or "-",
            ",".join(f"{k}{v}" for k, v in bucket),
        )
        return cls(target, op, dtype, layout, attrs, bucket, text)

    @classmethod
    def parse(cls, text: str) -> ProblemKey:
        """Inverse of ``id``; raises ValueError naming the text when it is malformed."""
        parts = text.split(":")
        if len(parts) != 6:
            raise ValueError(f"not a problem key: {text!r}")
        target, op, dtype, layout, attrs, bucket = parts
        attr_pairs = [] if attrs == "-" else [tuple(p.split("=", 1)) for p in attrs.split(",")]
        dims = []
        for item in bucket.split(","):
            name = item.rstrip("0123456789")
            dims.append((name, int(item[len(name):])))
        return cls.make(target, op, dtype, layout, attr_pairs, dims)

    def __eq__(self, other):
        return isinstance(other, ProblemKey) and other.id == self.id

    def __hash__(self):
        return hash(self.id)

    def __str__(self):
        return self.id

    @property
    def fields(self) -> dict[str, str]:
        """The six parts of ``id`` by name, as text (what the registry's problem_keys table stores)."""
        return dict(zip(("target", "op", "dtype", "layout", "attrs", "bucket"), self.id.split(":")))

    @property
    def shape_text(self) -> str:
        return "x".join(str(v) for _, v in self.bucket)

    def with_bucket(self, bucket) -> ProblemKey:
        return ProblemKey.make(self.target, self.op, self.dtype, self.layout, self.attrs, bucket)


def bucket_of(dims: dict[str, int], policies: dict) -> tuple[tuple[str, int], ...]:
    return tuple((name, policies.get(name, POW2).bound(n)) for name, n in dims.items())


def edge_shapes(bucket, policies) -> list[dict[str, int]]:
    """The bucket's corner shapes: every dimension at its low edge, then at its high edge."""
    per_dim = [(name, policies.get(name, POW2).edges(bound)) for name, bound in bucket]
    low = {name: e[0] for name, e in per_dim}
    high = {name: e[-1] for name, e in per_dim}
    return [low] if low == high else [low, high]


def layout_class(array) -> str:
    """'R' C-contiguous, 'C' column-major (Fortran-contiguous 2-D), 'S' any other strides."""
    flags: Any = getattr(array, "flags", None)  # NumPy's and CuPy's flags; None on a torch tensor
    if flags is None and hasattr(array, "is_contiguous"):  # a torch tensor: the same classes by its strides
        if array.is_contiguous():
            return "R"
        return "C" if array.permute(*range(array.ndim - 1, -1, -1)).is_contiguous() else "S"
    if flags.c_contiguous:
        return "R"
    if flags.f_contiguous:
        return "C"
    return "S"


def identical_pairs(items) -> tuple:
    """((i, j), ...) where ``items[i] is items[j]``, j < i the first such, None skipped: one array (tensor) passed
    twice. The one definition for the key (``layouts.shared_operands``), the region memo's signature and arbiter.torch's
    fast-path signature; plain loops and counters, no builtin called (that fast path counts Python calls)."""
    found: tuple = ()
    i = 0
    for t in items:
        if t is not None:
            j = 0
            for u in items:
                if j == i:
                    break
                if u is t:
                    found += ((i, j),)
                    break
                j += 1  # noqa: SIM113 (enumerate is a builtin call per loop)
        i += 1  # noqa: SIM113 (the same)
    return found
