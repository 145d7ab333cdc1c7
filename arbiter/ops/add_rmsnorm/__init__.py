"""``add_rmsnorm``: a residual add and the RMSNorm of its sum, both returned (issue 43 item 2).

``s = x + residual``; ``out = (s, s / sqrt(mean(s^2) + eps) * weight)``, stacked as one ``[2, ..., cols]`` output
(``out[0]`` the sum a llama block carries on as its residual stream, ``out[1]`` the normalised rows the next
projection reads). Torch eager reads and writes x-sized memory in four kernels (the add; the squares' mean; the
scale; the weight); a fused kernel reads x and residual once and writes the two results once.

The op kind is this folder: region (``AddRMSNorm``), float64 oracle, probe families (rmsnorm's, drawn as the sum
and split exactly between the two inputs), quick-suite shapes, torch reference and ``torch.ops.arbiter.add_rmsnorm``
(``OpKind.torch_op``). The two results are judged apart (``OpKind.parts``): the sum's scale is the residual
stream's, far above the normalised rows', and one norm over both would hide the smaller one's error.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from arbiter.errors import RegionError
from arbiter.keys import layout_class
from arbiter.ops import rows
from arbiter.ops.family import Family, poke
from arbiter.ops.kind import OpKind, TorchOp
from arbiter.oracles import array_module, host64
from arbiter.regions import RowRegion, as_rows, check_eps, random_operand


class AddRMSNorm(RowRegion):
    """``s = x + residual``, then ``s / sqrt(mean(s**2, axis=-1) + eps) * weight``; both returned as ``[2, ...]``.

    ``x`` and ``residual`` have one shape ``[..., cols]`` (leading dimensions are rows), ``weight`` is ``[cols]``;
    one dtype throughout. ``eps`` is a runtime scalar, not part of the problem key. The kernels take ``[rows,
    cols]`` views (a copy where the leading dimensions do not merge); the output is ``[2, *x.shape]``."""

    op = "add_rmsnorm"
    __slots__ = ("residual", "weight", "eps", "nd_shape")

    def __init__(self, x, residual, weight, eps: float = 1e-6, *, out=None):
        n_rows, cols = self.adopt_rows(x, -1)
        shape = tuple(self.x.shape)
        _, self.residual, _ = self.adopt("residual", residual, self.target)
        _, self.weight, _ = self.adopt("weight", weight, self.target)
        self.same_dtype("residual", self.residual)
        self.same_dtype("weight", self.weight)
        if tuple(self.residual.shape) != shape:
            raise RegionError("residual", f"shape {tuple(self.residual.shape)} should be x's {shape}")
        if tuple(self.weight.shape) != (cols,):
            raise RegionError("weight", f"shape {tuple(self.weight.shape)} should be ({cols},), the size of x's "
                                        "last axis")
        self.eps = check_eps(eps, self.dtype)
        self.nd_shape = None if self.x.ndim == 2 else (2, *shape)
        if self.x.ndim != 2:
            self.x, self.residual = as_rows(self, "x", self.x), as_rows(self, "residual", self.residual)
            self.axis = 1
        self.check_out(out, (2, *shape))
        if self.out is not None and self.nd_shape is not None:
            self.out = self.out.reshape(2, n_rows, cols)  # (C-contiguous: a view)
        self.complete(layout_class(self.x) + layout_class(self.residual), {"rows": n_rows, "cols": cols}, ())

    def operands(self):
        return {"x": self.x, "residual": self.residual, "weight": self.weight}

    def output_shape(self):
        return (2, *self.x.shape)

    def runtime_args(self):
        return {"eps": self.eps}

    @classmethod
    def random(cls, target: str, dtype: str, dims: dict, attrs: dict | None = None, layout: str = "RR",
               rng: np.random.Generator | None = None, eps: float = 1e-6) -> AddRMSNorm:
        """A random instance: ``dims`` has rows, cols."""
        rng = rng if rng is not None else np.random.default_rng(0)
        layout = (layout * 2)[:2]
        return cls(cls.random_x(target, dtype, dims, True, layout[0], rng),
                   cls.random_x(target, dtype, dims, True, layout[1], rng),
                   random_operand(target, (dims["cols"],), dtype, "R", rng), eps=eps)

    def resized(self, dims, rng):
        return self.random(self.target, self.dtype, dims, None, self.layout, rng, eps=self.eps)


def oracle(region) -> np.ndarray:
    s = host64(region, region.x) + host64(region, region.residual)
    xp = array_module(s)
    normed = s / xp.sqrt(xp.mean(s * s, axis=-1, keepdims=True) + region.eps) * host64(region, region.weight)
    return xp.stack([s, normed])


def sub_rows(region, i0: int, i1: int):
    return (AddRMSNorm(region.x[i0:i1], region.residual[i0:i1], region.weight, eps=region.eps),
            (slice(None), slice(i0, i1)))


# --- probe families: rmsnorm's, drawn as the sum ---------------------------------------------------------------
_MANTISSA = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}


def split_sum(region) -> None:
    """Split the rows a norm family drew into ``x`` between ``x`` and ``residual`` so that ``x + residual`` is
    exactly those rows: Veltkamp's split in the dtype (the leading half of each mantissa and the rest, whose sum
    is exact), the large part in ``residual`` on even rows (a residual stream dominating the sublayer's output) and
    in ``x`` on odd rows. Non-finite values, and values the split would overflow, stay whole in one input (the
    other gets 0 there)."""
    t = region.x
    xp = array_module(t)
    sigma = t.dtype.type(2.0 ** math.ceil(_MANTISSA.get(str(t.dtype), 24) / 2) + 1)
    with np.errstate(over="ignore", invalid="ignore"):
        c = sigma * t
        big = c - (c - t)
        whole = ~(xp.isfinite(c) & xp.isfinite(big))
        big = xp.where(whole, t, big)
        small = xp.where(whole, t.dtype.type(0), t - big)
    even = (xp.arange(t.shape[0]) % 2 == 0)[:, None]
    region.residual[...] = xp.where(even, big, small)
    region.x[...] = xp.where(even, small, big)


def _as_sum(family):
    def apply(region, rng):
        family.apply(region, rng)
        split_sum(region)
    return replace(family, ops=("add_rmsnorm",), apply=apply,
                   text=family.text + " (drawn as the sum x + residual, split exactly between the two)")


def _nonfinite_inputs(region, rng):
    """A NaN in x in one row and in residual in another, +Inf in x and -Inf in residual in two more (distinct rows
    where there are four): each input's own non-finite values, which the sum families' split puts in one input."""
    n, cols = region.x.shape
    picks = rng.permutation(max(n, 4))[:4] % max(n, 1)
    for (name, value), r in zip((("x", np.nan), ("residual", np.nan), ("x", np.inf), ("residual", -np.inf)), picks):
        poke(region, getattr(region, name), (int(r), int(rng.integers(0, cols))), value)


FAMILIES = (*(_as_sum(f) for f in rows.norm_families("add_rmsnorm", centred=False)),
            Family("nonfinite_inputs", ("add_rmsnorm",), "a NaN in x and one in residual (other rows), +Inf in x, "
                   "-Inf in residual: catches a kernel masking one input's non-finite values", _nonfinite_inputs,
                   special=True))

SUITE: tuple[tuple[dict, str, dict], ...] = (
    ({"rows": 64, "cols": 1000}, "float32", {}),
    ({"rows": 33, "cols": 129}, "float64", {}),
)


def work(dims: dict, dtype: str):
    """x and residual read once, the sum and the normalised rows written once."""
    one = rows.work(dims, dtype)
    return None if one is None else (2.0 * one[0], one[1])


def _output_shape(x, residual, weight, eps):
    return (2, *x.shape)


# Its special-value semantics, as docs/budgets.md's table states them (NaN / Inf inputs, masked entries, other).
SPECIAL_VALUES = (
    "the sum x + residual carries IEEE semantics elementwise (+Inf + -Inf is NaN); the normalised rows are "
    "rmsnorm's of the sum; a NaN or Inf in one input is never masked by the other",
    "-",
    "rows with zero first and last elements (rmsnorm's families, on the sum)",
)

KIND = OpKind("add_rmsnorm", AddRMSNorm, oracle, families=FAMILIES, suite=SUITE, sub_rows=sub_rows,
              row_count=lambda region: region.dims["rows"], parts=(0, 1), work=work,
              work_text="bytes read + written (x, residual, the sum and the normalised rows)",
              torch_reference="arbiter.ops.add_rmsnorm.torch_ref:ref_add_rmsnorm",
              torch_op=TorchOp("(Tensor x, Tensor residual, Tensor weight, float eps) -> Tensor", AddRMSNorm,
                               _output_shape),
              special_values=SPECIAL_VALUES)
