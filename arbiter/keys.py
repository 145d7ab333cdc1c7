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

import numpy as np


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


def memory_root(array):
    """The object that owns ``array``'s memory, as far as identity tells it without a memory-overlap test: a
    NumPy/CuPy view's ``base``, a torch view's ``_base``, and through a NumPy view of a torch tensor (what
    ``tensor.numpy()`` gives) to that tensor's own base. ``array`` itself when it owns its memory."""
    kind = type(array)
    if kind is np.ndarray:
        base = array.base
        if base is None:
            return array
        if type(base) is np.ndarray:  # NumPy keeps ``base`` at the owner: no chain to walk
            return base
        array, kind = base, type(base)  # a NumPy view of another object (a torch tensor, a buffer)
    base = getattr(array, "_base" if kind.__module__.startswith("torch") else "base", None)
    return array if base is None else base


def _pointer_strides(array) -> tuple[int, int, list[int]]:
    """(pointer, itemsize, strides in bytes) of a NumPy, CuPy or torch array."""
    if hasattr(array, "data_ptr"):  # torch: strides in elements
        ptr, item = int(array.data_ptr()), int(array.element_size())
        return ptr, item, [int(s) * item for s in array.stride()]
    given = getattr(getattr(array, "data", None), "ptr", None)  # CuPy's; NumPy's from its interface
    ptr = int(array.__array_interface__["data"][0] if given is None else given)
    return ptr, int(array.dtype.itemsize), [int(s) for s in array.strides]


def follows(a, b) -> bool:
    """Whether ``a`` continues ``b`` along the last axis: the two halves ``w[..., :n]`` and ``w[..., n:]`` of one
    array ``w`` (a concatenated gate/up weight, a torch ``Linear`` weight's row blocks transposed), so that one
    view of twice the width covers both (``concatenated``)."""
    if tuple(a.shape) != tuple(b.shape) or not a.shape or a.shape[-1] == 0 or a.dtype != b.dtype:
        return False
    pa, _, sa = _pointer_strides(a)
    pb, _, sb = _pointer_strides(b)
    return sa == sb and pa == pb + a.shape[-1] * sb[-1]


def concatenated(first, second):
    """The one view of twice the width whose halves are ``first`` and ``second`` (``follows(second, first)``), on
    ``first``'s memory (the caller's buffer: no copy), or None when they are not such halves."""
    if not follows(second, first):
        return None
    shape = (*first.shape[:-1], 2 * first.shape[-1])
    if hasattr(first, "data_ptr"):  # torch: within its storage only (a tensor made from a NumPy view holds the view)
        end = first.storage_offset() + sum((n - 1) * st for n, st in zip(shape, first.stride())) + 1
        return first.as_strided(shape, first.stride()) if end * first.element_size() <= \
            first.untyped_storage().nbytes() else None
    if type(first).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy.lib.stride_tricks.as_strided(first, shape, first.strides)
    return np.lib.stride_tricks.as_strided(first, shape, first.strides)


def _bounds(array) -> tuple[int, int]:
    """[lo, hi) bytes ``array``'s elements may touch (NumPy, CuPy or torch)."""
    ptr, item, strides = _pointer_strides(array)
    lo = hi = 0
    for n, s in zip(array.shape, strides):
        if n == 0:
            return ptr, ptr
        lo += min(0, (n - 1) * s)
        hi += max(0, (n - 1) * s)
    return ptr + lo, ptr + hi + item


def overlap(a, b) -> bool:
    """Whether the memory ranges of ``a`` and ``b`` intersect (bounds only: an interleaved pair counts)."""
    if type(a) is np.ndarray and type(b) is np.ndarray:
        return bool(np.may_share_memory(a, b))
    (alo, ahi), (blo, bhi) = _bounds(a), _bounds(b)
    return alo < bhi and blo < ahi


def shared_pairs(items, roots=None) -> tuple[tuple, tuple]:
    """(same, views) of ``items`` (arrays or tensors, None skipped), each ((i, j), ...) with j < i the first such:
    ``same`` where ``items[i] is items[j]`` (one array passed twice: ``attention(q, k, k)``), ``views`` where they
    are different arrays over one allocation (``memory_root``) whose memory ranges overlap (``matmul(a, a.T)``;
    q, k and v cut apart from one packed buffer do not overlap: not a pair), or ``(i, i - 1, ">")`` where an item
    continues the one before it along the last axis (``follows``: the halves of one concatenated weight, which a
    kernel may read as one). ``roots``: the items' roots where the
    caller has them (arbiter.torch reads ``_base`` inline). One pass for the key (``layouts.shared_operands``), the
    region memo's signature and arbiter.torch's fast-path signature: identity first, the bounds compared only where
    the roots match; plain loops and counters (that fast path counts Python calls)."""
    roots = [None if t is None else memory_root(t) for t in items] if roots is None else roots
    same: tuple = ()
    views: tuple = ()
    i = 0
    for r in roots:
        if r is not None:
            t, j = items[i], 0
            view: tuple | None = None
            for u in roots:
                if j == i:
                    break
                if u is r:
                    if items[j] is t:  # the same array: that pair, not a view
                        same += ((i, j),)
                        view = None
                        break
                    if view is None and overlap(t, items[j]):
                        view = (i, j)
                j += 1
            if j == i and i and roots[i - 1] is r and follows(t, items[i - 1]):
                # the second half of one array whose first half is the operand before (a gate/up weight): the more
                # telling fact than the overlap of a row-major weight's interleaved column halves
                view = (i, i - 1, ">")
            if view is not None:
                views += (view,)
        i += 1  # noqa: SIM113 (the same)
    return same, views
