"""``pointwise``: a chain of elementwise steps on x (unary functions, binary ones with a tensor or a scalar)."""
from __future__ import annotations

import math

import numpy as np

from arbiter import regions, targets
from arbiter.ops.family import FINFO_MAX, SMALLEST_NORMAL, Family, exp_range
from arbiter.ops.kind import OpKind
from arbiter.oracles.pointwise import oracle


def _wide(region, rng):
    """Inputs spread over +-0.45 x the exp range with exact zeros: a tanh or sigmoid built from exp(2x)
    overflows to inf/inf there."""
    lim = 0.45 * exp_range(region.dtype)
    for arr in [region.x] + region.tensors():
        arr *= lim / 3.0
        flat = arr.reshape(-1) if arr.flags.c_contiguous else None
        if flat is not None and flat.size:
            flat[:: 7] = 0


def _nonfinite(region, rng):
    """NaN, +Inf and -Inf in a sixteenth of every operand's elements."""
    for arr in [region.x] + region.tensors():
        host = np.asarray(targets.get(region.target).to_host(arr), dtype=np.float64).copy().reshape(-1)
        spots = rng.permutation(host.size)[: max(1, host.size // 16)]
        host[spots] = rng.choice([np.nan, np.inf, -np.inf], spots.size)
        arr[...] = targets.get(region.target).from_host(host.reshape(arr.shape), region.dtype)


def _huge(region, rng):
    """Magnitudes log-uniform from 1e-2 to half the dtype's largest value, both signs, in every tensor."""
    top = math.log10(FINFO_MAX[region.dtype] / 2.0)
    for arr in [region.x] + region.tensors():
        shape = tuple(arr.shape)
        mags = 10.0 ** rng.uniform(-2.0, top, shape) * np.where(rng.random(shape) < 0.5, -1.0, 1.0)
        arr[...] = targets.get(region.target).from_host(mags, region.dtype)


def _subnormal(region, rng):
    """Inputs below the smallest normal value (subnormals): a kernel that flushes them to zero fails."""
    arr = region.x
    arr *= SMALLEST_NORMAL[region.dtype] / 8.0  # benign x has std 1: |x| around an eighth of the smallest normal


FAMILIES = (
    Family("wide", ("pointwise",),
           "inputs spread over +-0.45x the exp range, every 7th exactly zero: catches tanh/sigmoid/silu built "
           "from exp(2x) (inf/inf)",
           _wide),
    Family("nonfinite", ("pointwise",),
           "NaN, +Inf, -Inf in a sixteenth of the elements of every operand, where the oracle propagates them: "
           "catches relu as fmax(x, 0) and other NaN-dropping shortcuts",
           _nonfinite, special=True),
    Family("huge", ("pointwise",),
           "magnitudes log-uniform from 1e-2 to half the dtype's largest value, both signs: catches exp that "
           "saturates early, and chains that overflow in an intermediate of narrower precision",
           _huge, special=True),
    Family("subnormal", ("pointwise",),
           "x below the smallest normal value: outputs are subnormal, so a kernel that flushes them to zero fails",
           _subnormal, special=True),
)


def sub_rows(region, i0: int, i1: int):
    steps = [(n,) if o is None else (n, o if isinstance(o, float) else o[i0:i1]) for n, o in region.ops]
    return regions.Pointwise(region.x[i0:i1], steps), (slice(i0, i1),)


# Its special-value semantics, as docs/budgets.md's table states them (NaN / Inf inputs, masked entries, other).
SPECIAL_VALUES = (
    "elementwise IEEE semantics step by step; `relu`, `max`, `min` propagate NaN (NumPy's maximum, not fmax)",
    "-",
    "magnitudes up to half the dtype's largest value; subnormal inputs (flush to zero fails)",
)

KIND = OpKind("pointwise", regions.Pointwise, oracle, families=FAMILIES,
              suite=(({"size": 100_000}, "float32", {"chain": "mul[t]>add[s]>relu>tanh"}),), sub_rows=sub_rows,
              torch_reference="arbiter.ops.pointwise.torch_ref:ref_pointwise",
              special_values=SPECIAL_VALUES)
