"""The F4 gate: correctness before speed, written against an adversary rather than a typo.

``verify(candidate, params, region)`` runs one solution on a plan of probes (``probe_plan``):

* the real shape twice, each time with fresh random data (a memoized or stale output fails): first
  benign data with the caller's runtime scalars, then the op's first adversarial value family with
  varied scalars; above ``EXTRA_WORK_FLOOR`` work units the second at the real shape ``reduced`` along one
  dimension to ``SECOND_WORK_FACTOR`` of its work (the other dimensions, tails and layouts the caller's), so a
  large key runs its real shape once;
* a shape whose dimensions all differ, with odd tails (not multiples of 8 ... 128), varied scalars
  (always, whatever it costs);
* every adversarial value family of the op (``arbiter.probes``: large logits, near-constant rows,
  large offsets, tiny values, NaN/Inf, masked blocks, huge magnitudes, subnormals, ...) at the bucket's low
  corner, or at a shrunk shape when the cost cap binds (a family is never dropped), with varied scalars
  (the sentinels 1.0, 0.0, the op's default, negatives in turn);
* the bucket's corners with each dimension low or high independently, then sizes inside the bucket
  (``interior_shapes``);
* ``REPEATS`` runs of one probe on the same inputs, compared bitwise (``_repeats``);
* the program's state and context (``_context``): the same arrays updated in place, two calls without
  ``out=`` with the first result kept (the second on read-only inputs), a worker thread, four concurrent
  threads, BLAS and torch on one thread; and around every run the thread's floating-point environment
  (``arbiter.fpenv``: flush-to-zero, denormals-are-zero, rounding) unchanged,

every operand in the caller's layout (``arbiter.layouts``: the key's ``layouts`` attribute), a legal
in-place key probed in place, alternate probes one element off a 16-byte boundary, the output inside a
poisoned guard band; the families and corners within a cost cap (``EXTRA_WORK_FACTOR`` x the real shape's
work, or ``EXTRA_WORK_FLOOR``).
Each probe's data is fresh (entropy-seeded; the seed is named in a failure so it can be replayed
with ``ARBITER_GATE_SEED``). The candidate gets its own copy of the inputs and an output the gate
allocated and poisoned with NaN itself (never the production allocator); the oracle reads a
pristine copy. The candidate fails when it raises, declines (returns ``Fallback``), returns
anything but the given output, writes to any input, leaves an element unwritten, produces
NaN/Inf where the oracle is finite, or misses the budget (the op's, or the family's published
one) anywhere.

Large probes are checked at about the cost of one run (``check_output``): matmul with a linear
epilogue by Freivalds products with random sign vectors in float64 (every row's error norm and
the relative Frobenius error, so one wrong element anywhere fails) plus the exact reference on
sampled rows, the last row and the last and a random column; nonlinear products (gated, matmul
with an activation) by the exact reference on sampled rows and columns, the last ones, and a diagonal
holding one element of every 1x8 and 8x1 run (``_diagonal``) and 10 random 128x128 output tiles in full
(``_full_tiles``); attention on sampled query rows, each head its own; row
ops (softmax, norms, fft, pointwise) by the full reference in bounded row chunks. The bucket's
smaller probes of the sampled products are compared in full where that costs at most a quarter
of the real shape's work and fits the scratch bound. On a GPU target the float64 reference is computed
on the device (``oracles.on_device``).

Memory: gating a call allocates the probe's operands twice (the candidate's copy and the
pristine one) and one output, never the caller's arrays, plus at most ``CHUNK_ELEMENTS`` float64
temporaries per reference step (``DEVICE_CHUNK_ELEMENTS`` for a product's check on a device): at most 3x the
call's operand and output bytes plus 64 MiB.

A candidate declaring accuracy looser than the op's budget is excluded unless the caller opted
in (``region.allow_looser()``, ``arbiter.configure(looser_accuracy=True)``, ``--allow-looser``);
the opt-in is part of the problem key (attribute ``accuracy=looser``).

``verdict_for`` adds the cache: one verdict per (behaviour identity, solution index, problem key,
environment), where the identity covers the candidate's code, the project modules it uses, its
captured constants and the gate's own version (``arbiter.gate.gate_version``).
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import math
import os
import threading
import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from arbiter import cpu_threads, fpenv, layouts, oracles, probes, targets
from arbiter.candidates import Candidate, Fallback
from arbiter.keys import POW2
from arbiter.memo import Memo
from arbiter.ops import Product, op_kind
from arbiter.oracles import array_module
from arbiter.oracles.budgets import Budget, budget_for
from arbiter.region_memo import slots_of
from arbiter.solution import Solution
from arbiter.store import Verdict, VerdictKey

if TYPE_CHECKING:
    from arbiter.regions import Region

# Beyond the two real-shape probes, the other probes together cost at most this multiple of the real
# shape's work ("work units": m*n*k for matmul, rows*cols for row ops), or EXTRA_WORK_FLOOR units,
# whichever is larger: small buckets are probed fully, a huge key stays near two runs.
EXTRA_WORK_FACTOR = 0.2
EXTRA_WORK_FLOOR = 1 << 27
# The part of that cap the adversarial families share (at the bucket's low corner, or shrunk to fit).
FAMILY_SHARE = 0.5
# A key above EXTRA_WORK_FLOOR runs its real shape once: the second probe (the first adversarial family, varied
# scalars) runs at the real shape ``reduced`` to this multiple of its work (matmul 2048^3: 128 x 2048 x 2048).
SECOND_WORK_FACTOR = 0.0625
# Products (matmul, gated, attention) with more work than this are checked with randomized/sampled
# references; smaller ones against the full float64 oracle.
CHEAP_CHECK_WORK = 1 << 27
# Float64 elements per reference step (row chunks): bounds the gate's scratch memory (8 B each, a few live).
CHUNK_ELEMENTS = 1 << 20
FREIVALDS_VECTORS = 4
SAMPLED_ROWS = 8
LOOSER_ATTR = ("accuracy", "looser")


@dataclass(frozen=True)
class Probe:
    dims: dict
    family: probes.Family
    vary_scalars: bool
    # False for a shape outside the key's bucket: a family shrunk to fit the cost cap, an interior size with the
    # other dimensions shrunk. A candidate may decline those (it need not serve other buckets); ``fallback``
    # is then probed instead (the family at the bucket's low corner), or nothing when it is None.
    inside: bool = True
    fallback: dict | None = None

    @property
    def label(self) -> str:
        text = "x".join(str(v) for v in self.dims.values())
        return text if self.family is probes.BENIGN else f"{text} {self.family.name}"


def budget_of(candidate: Candidate, op: str, dtype: str) -> tuple[Budget, bool]:
    default = budget_for(op, dtype)
    c = candidate.contract
    if c is not None and c.accuracy == "bounded":
        declared = Budget(c.rel_fro, c.atol, c.rtol)  # type: ignore[arg-type]  # a bounded Contract sets all three
        return declared, declared.looser_than(default)
    return default, False


def consents_to_looser(region) -> bool:
    """Whether the caller opted in to looser-than-budget accuracy for this key."""
    return LOOSER_ATTR in region.key.attrs


def _cost(dims: dict) -> int:
    return math.prod(max(v, 1) for v in dims.values())


def _edges(region) -> list[tuple[str, tuple[int, ...]]]:
    return [(name, region.bucket_policy.get(name, POW2).edges(bound)) for name, bound in region.key.bucket]


def corner_shapes(region) -> list[dict]:
    """The bucket's corners with each dimension low or high independently (2^d of them, fewer where equal)."""
    edges = _edges(region)
    names = [n for n, _ in edges]
    combos = itertools.product(*[sorted({e[0], e[-1]}) for _, e in edges])
    return [dict(zip(names, c)) for c in combos]


def skew_shape(region) -> dict:
    """A shape inside the bucket whose dimensions differ from each other where the bucket allows, with odd
    tails: dimension i is ``low + 2i`` (clipped to the bucket), so m != n != k, seq_q != seq_k, rows != cols."""
    shape = {}
    for i, (name, e) in enumerate(_edges(region)):
        lo, hi = e[0], e[-1]
        shape[name] = min(lo + 2 * i, hi) if hi > lo else lo
    return shape


def shrunk(dims: dict, region, work: float) -> dict:
    """``dims`` with its bucketed-by-powers-of-two dimensions scaled down together until the shape costs at most
    ``work`` units, each ending in an odd tail (exactly bucketed dimensions, attention's ``d`` and fft's ``n``,
    stay: kernels specialise on them)."""
    free = [n for n, v in dims.items() if v > 1 and region.bucket_policy.get(n, POW2) is POW2]
    if not free or _cost(dims) <= work:
        return dict(dims)
    fixed = _cost({n: v for n, v in dims.items() if n not in free})
    factor = (max(work / fixed, 1.0) / math.prod(dims[n] for n in free)) ** (1.0 / len(free))
    out = dict(dims)
    for n in free:
        v = max(1, int(dims[n] * factor))
        out[n] = v if v < 3 or v % 2 else v - 1  # odd: not a multiple of any tile
    return out


TAIL_PERIOD = 128  # a reduced dimension keeps its remainder modulo this (the tails of 8, 16, 32, 64 and 128 tiles)


def reduced(dims: dict, region, work: float) -> dict:
    """``dims`` with one dimension cut down until the shape costs at most ``work`` units, or as far as it goes: the
    first power-of-two-bucketed one above ``TAIL_PERIOD`` in key order (matmul's m, a row op's rows, attention's
    batch, heads or q). Every other dimension stays exactly the caller's, and the cut one keeps its remainder
    modulo ``TAIL_PERIOD`` (its tail and 16-byte alignment class), at least one period where that is 0: a probe
    of the real key's inner loops, layout and tails at a fraction of its work (at most 255/v of it)."""
    out = dict(dims)
    for name, v in dims.items():
        if v <= TAIL_PERIOD or region.bucket_policy.get(name, POW2) is not POW2:
            continue
        tail = v % TAIL_PERIOD
        limit = work / (_cost(out) / v)
        steps = max(int((limit - tail) // TAIL_PERIOD), 0 if tail else 1)
        out[name] = min(v, tail + TAIL_PERIOD * steps)
        break
    return out


INTERIOR_MIN = 64  # buckets of at least this bound get interior sizes (smaller ones are probed at every corner)


def size_classes(bound: int) -> list[int]:
    """Three sizes inside the power-of-two bucket (B/2, B]: an odd multiple of 128 near 5B/8, one just past 3B/4
    with an odd tail, an odd multiple of 64 near 15B/16 (B=1024: 640, 771, 960; B=2048: 1408, 1539, 1856). A
    kernel with a path for column counts that are odd multiples of 128 (640, 896), for a K above 768 that is not a
    multiple of 128, or for sizes that are multiples of 64 but not of 128, is probed there. Small buckets, where
    no such multiple lies inside, get 5B/8 + 3 and 7B/8 + 3 instead."""
    q128, q64 = bound * 5 // 8 // 128, bound * 15 // 16 // 64
    by128 = (q128 | 1) * 128 if bound >= 512 else min(bound * 5 // 8 + 3, bound)
    by64 = (q64 if q64 % 2 else q64 - 1) * 64 if bound >= 256 else min(bound * 7 // 8 + 3, bound)
    return [by128, min(bound * 6 // 8 + 3, bound), by64]


def interior_shapes(region) -> list[dict]:
    """Sizes inside a bucket, not only at its corners: for each power-of-two dimension, its ``size_classes``,
    the other dimensions at the bucket's low corner. A first call at any other exact size is checked when it is
    served (``arbiter.audit``'s first calls): a size whose index arithmetic crosses 2^31 inside a bucket too."""
    low = corner_shapes(region)[0]
    shapes = []
    for name, bound in region.key.bucket:
        if region.bucket_policy.get(name, POW2) is not POW2 or bound < INTERIOR_MIN:
            continue
        for size in size_classes(bound):
            shape = dict(low)
            shape[name] = size
            shapes.append(shape)
    return shapes


def probe_plan(region) -> list[Probe]:
    """The probes of one verification, in order (see the module docstring). No family is ever dropped: one that
    does not fit the cost cap at the bucket's low corner runs at a shrunk shape."""
    real = dict(region.dims)
    fams = probes.families(region.op, targets.get(region.target).special_values_verified)
    corners = corner_shapes(region)
    low = corners[0]
    plan = [Probe(real, probes.BENIGN, False)]
    second = fams[1] if len(fams) > 1 else probes.BENIGN
    if _cost(real) <= EXTRA_WORK_FLOOR:
        plan.append(Probe(real, second, True))
    else:  # a large key runs its real shape once; the second probe keeps every dimension but one (see reduced)
        dims = reduced(real, region, SECOND_WORK_FACTOR * _cost(real))
        inside = dims == real
        plan.append(Probe(dims, second, True, inside, None if inside else dict(low)))
    # Unequal dimensions with odd tails (and varied scalars) are always probed, whatever they cost: a square
    # first call must not certify a kernel that assumes square matrices or seq_q == seq_k. Then, within the
    # cap, each adversarial family at the bucket's cheapest shape (shrunk when it does not fit: never dropped),
    # then the mixed corners, then sizes inside the bucket.
    skew = skew_shape(region)
    if skew != real:
        plan.append(Probe(skew, probes.BENIGN, True))
    cap = max(EXTRA_WORK_FACTOR * _cost(real), EXTRA_WORK_FLOOR)
    spent = _cost(skew) if skew != real else 0  # the skew probe counts against the cap it is exempt from
    family_probes = fams[1:]  # the first ran at the real shape already; it runs at the low corner too
    share = cap * FAMILY_SHARE / max(len(family_probes), 1)
    for fam in family_probes:
        dims = low if _cost(low) <= share else shrunk(low, region, share)
        inside = dims == low
        plan.append(Probe(dims, fam, True, inside, None if inside else dict(low)))
        spent += _cost(dims)
    seen = {(p.label, p.vary_scalars) for p in plan}
    extra = [Probe(c, probes.BENIGN, i % 2 == 1) for i, c in enumerate(sorted(corners, key=_cost))]
    extra += [Probe(d, probes.BENIGN, True) for d in interior_shapes(region)]
    for probe in extra:
        if (probe.label, probe.vary_scalars) in seen or (probe.dims == real and probe.family is probes.BENIGN):
            continue
        cost = _cost(probe.dims)
        if spent + cost > cap:
            continue
        seen.add((probe.label, probe.vary_scalars))
        spent += cost
        plan.append(probe)
    return plan


def probe_shapes(region) -> list[dict]:
    """The distinct shapes ``probe_plan`` probes, in order."""
    shapes = []
    for p in probe_plan(region):
        if p.dims not in shapes:
            shapes.append(p.dims)
    return shapes


def _draw(region, probe: Probe, rng, shift: bool = False, dims: dict | None = None, index: int = 0,
          caller_layout: bool = True) -> Region:
    """A fresh random instance for ``probe`` (at ``dims`` where given) in the caller's layout of every operand
    (``arbiter.layouts``: the key's ``layouts`` attribute: padding, transposition, permutation, broadcast, rank);
    ``shift``: every operand one element off a 16-byte boundary (the plan alternates, so a kernel that picks its
    path by pointer alignment is probed on both)."""
    args = probes.varied_scalars(region, rng, index) if probe.vary_scalars else region.runtime_args()
    fresh = region.random(region.target, region.dtype, dict(dims or probe.dims), dict(region.attrs), region.layout,
                          rng, **args)
    if all(int(a.size) for a in fresh.operands().values()):  # an empty operand has no values to shape
        probe.family.apply(fresh, rng)
    if not caller_layout:  # drawn on the host for an opaque target: plain layouts (``_upload`` moves them)
        return fresh
    layouts.reproduce(fresh, region.attrs, shift)
    tokens, aliased = layouts.parse(region.attrs)
    if tokens or aliased or layouts.shares(region.attrs):  # the probe is of the caller's key: its layout attributes
        from arbiter.keys import ProblemKey

        k = fresh.key
        fresh.layout, fresh.attrs = region.layout, tuple(region.attrs)
        fresh.key = ProblemKey.make(k.target, k.op, k.dtype, region.key.layout, region.attrs, k.bucket)
    return fresh


def _native(array) -> bool:
    """NumPy or CuPy: arrays the gate can copy, compare and rewrite in place on their own device."""
    return isinstance(array, np.ndarray) or array_module(array) is not np


_draws: Memo = Memo()  # target name -> whether its drawn arrays are native


def _draws_native(target: str) -> bool:
    """Whether ``target``'s own arrays (what ``random_operand`` draws there) are ones ``_native`` accepts."""
    found = _draws.get(target)
    if found is None:
        found = _draws[target] = _native(targets.get(target).from_host(np.ones(1, np.float32), "float32"))
    return found


def _upload(array, target, dtype: str):
    """A host probe operand on ``target`` in the same layout class and form (C, Fortran, padded rows, or an
    every-other-element view)."""
    t = targets.get(target)
    if array.flags.c_contiguous or array.ndim == 0:
        return t.from_host(array, dtype)
    if array.flags.f_contiguous:
        return t.from_host(array, dtype, order="F")
    if array.ndim >= 2 and array.strides[-1] == array.itemsize:  # padded rows (``random_operand``'s P form)
        padded = np.zeros(array.shape[:-1] + (array.strides[-2] // array.itemsize,), dtype=array.dtype)
        padded[..., : array.shape[-1]] = array
        return t.from_host(padded, dtype)[..., : array.shape[-1]]
    wide = np.zeros(array.shape[:-1] + (2 * array.shape[-1],), dtype=array.dtype)
    wide[..., ::2] = array
    return t.from_host(wide, dtype)[..., ::2]


def _on_target(host_region, target: str):
    """``host_region`` (drawn on the CPU) with every operand moved to ``target``; for targets whose arrays the
    gate cannot work on in place (ROCm's device arrays): the host region stays the pristine copy."""
    from arbiter.keys import ProblemKey

    def move(value):
        if isinstance(value, np.ndarray):
            return _upload(value, target, host_region.dtype if value.dtype.kind != "c" else str(value.dtype))
        if isinstance(value, tuple):
            return tuple(move(v) for v in value)
        if isinstance(value, list):
            return [move(v) for v in value]
        return value

    clone = object.__new__(type(host_region))
    for slot in slots_of(type(host_region)):
        if hasattr(host_region, slot):
            object.__setattr__(clone, slot, None if slot in ("out", "back") else move(getattr(host_region, slot)))
    k = host_region.key
    clone.target = target
    clone.key = ProblemKey.make(target, k.op, k.dtype, k.layout, k.attrs, k.bucket)
    return clone


def _copy(value):
    if hasattr(value, "shape") and hasattr(value, "dtype") and hasattr(value, "copy"):
        return value.copy()
    if isinstance(value, tuple):
        return tuple(_copy(v) for v in value)
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def pristine_copy(region):
    """A copy of ``region`` whose operands are copies (the oracle's inputs, and the unchanged-inputs reference)."""
    clone = object.__new__(type(region))
    for slot in slots_of(type(region)):
        if hasattr(region, slot):
            object.__setattr__(clone, slot, None if slot == "out" else _copy(getattr(region, slot)))
    return clone


def pristine_copy_target(region, target: str):
    """A shallow stand-in of ``region`` that ``_draw`` builds probes from on ``target`` (attributes, layout and
    runtime scalars are the region's; only the target differs)."""
    clone = region.with_out(None)
    clone.target = target
    return clone


def _bits(a):
    """``a`` as unsigned integers of its width where its float type is one NumPy and CuPy do not class as floating
    (ml_dtypes' bfloat16: kind 'V', where ``equal`` and ``array_equal`` say NaN != NaN even with ``equal_nan``);
    else ``a``. Equal bit patterns then compare equal, a NaN included."""
    if a.dtype.kind == "V" and a.dtype.itemsize in (1, 2, 4):
        return a.view(f"uint{8 * a.dtype.itemsize}")
    return a


def changed_inputs(region, pristine, skip=()) -> str:
    """"" when every operand of ``region`` equals (bitwise, NaN included) its pristine copy, else which changed;
    ``skip``: operands that are the output (a legal in-place key)."""
    found = []
    theirs = pristine.operands()
    for name, arr in region.operands().items():
        if name in skip:
            continue
        ref = theirs[name]
        xp = array_module(arr)
        if not _native(arr) or array_module(ref) is not xp:
            # opaque device arrays, or a probe uploaded from a host pristine copy (a torch caller's region,
            # ROCm): compare on the host
            host = targets.get(region.target).to_host
            arr = arr if isinstance(arr, np.ndarray) else np.asarray(host(arr))
            ref = ref if isinstance(ref, np.ndarray) else np.asarray(host(ref))
            xp = np
        arr, ref = _bits(arr), _bits(ref)
        if bool(xp.array_equal(arr, ref)):  # one pass; the element count below only when something differs
            continue
        same = xp.equal(arr, ref) | (xp.isnan(arr) & xp.isnan(ref)) if arr.dtype.kind in "fc" else xp.equal(arr, ref)
        bad = int(arr.size - int(same.sum())) if arr.size else 0
        if bad:
            found.append(f"{name!r} ({bad} element(s) changed)")
    return ", ".join(found)


def _scalar(v):
    v = v.item() if hasattr(v, "item") else v
    return v


# Half the smallest subnormal's spacing per output dtype (float64's is below anything the oracle resolves).
ROUNDING_FLOOR = {"float16": 2.0 ** -25, "bfloat16": 2.0 ** -134, "float32": 2.0 ** -150,
                  "complex64": 2.0 ** -150}


class Tally:
    """The comparison with the oracle, accumulated over chunks of one output (or a sample of it).

    Passes when y is finite wherever ref is (and non-finite elements match), the relative Frobenius
    error is within ``rel_fro`` and every element satisfies ``|y - ref| <= atol * rms(ref) + rtol * |ref|``,
    rms taken over the whole output (given, for sampled checks, as an estimate).
    """

    def __init__(self, nan_fills_row: bool = False):
        self.nan_fills_row = nan_fills_row  # OpKind.nan_fills_row: NaN anywhere in a row the oracle makes NaN
        self.diff2 = self.judged2 = self.ref2 = 0.0  # squared error norms (reported, beyond rounding) and ref's
        self.count = 0
        # (|d| - rtol|ref|, index, y, ref, |d|) of the worst element so far
        self.worst: tuple[float, Any, Any, Any, Any] = (-math.inf, None, None, None, None)
        self.reason = ""

    def add(self, y, ref, budget: Budget, origin=None, shape=None, floor=None) -> str:
        """Compare one chunk; ``origin`` maps a chunk index to the output's index; ``floor`` the rounding error a
        correct summation order may make per element (``OpKind.rounding``). Returns a fatal reason or ""."""
        if self.reason:
            return self.reason
        xp = array_module(ref)
        if array_module(y) is not xp:
            y = np.asarray(targets.to_host(y)) if xp is np else xp.asarray(y)
        if y.shape != ref.shape:
            self.reason = f"output shape {tuple(y.shape)} should be {tuple(ref.shape)}"
            return self.reason
        where = origin or (lambda idx: idx)
        limit = probes.FINFO_MAX.get(str(y.dtype))
        if limit is not None and str(y.dtype) not in ("float64", "complex128"):
            # The exact answer rounded to the output's dtype: beyond its largest finite value that is +-inf,
            # which is what a correct kernel stores (an fp16 exp(12) overflows in every implementation).
            over = xp.abs(ref) > limit
            if bool(over.any()):
                ref = xp.where(over, xp.sign(ref.real if ref.dtype.kind == "c" else ref) * xp.inf, ref)
        if self.nan_fills_row and ref.ndim:
            filled = xp.isnan(ref).any(axis=-1, keepdims=True) & xp.isnan(y)
            if bool(filled.any()):
                ref = xp.where(filled, xp.nan, ref)
        finite_ref = xp.isfinite(ref)
        bad = ~xp.isfinite(y) & finite_ref
        if bool(bad.any()):
            idx = tuple(int(i) for i in xp.argwhere(bad)[0])
            what = "NaN (unwritten or computed)" if bool(xp.isnan(y[idx])) else "Inf"
            self.reason = (f"{int(bad.sum())} element(s) {what} where the oracle is finite, "
                           f"first at {where(idx)}")
            return self.reason
        same_nonfinite = (y == ref) | (xp.isnan(y) & xp.isnan(ref))
        if bool((~finite_ref & ~same_nonfinite).any()):
            idx = tuple(int(i) for i in xp.argwhere(~finite_ref & ~same_nonfinite)[0])
            self.reason = (f"non-finite elements differ from the oracle's, first at {where(idx)}: "
                           f"{_scalar(y[idx])} where the oracle has {_scalar(ref[idx])}")
            return self.reason
        if not bool(finite_ref.all()):
            y, ref = y[finite_ref], ref[finite_ref]
            floor = None if floor is None else floor[finite_ref]
            flat_index = xp.argwhere(finite_ref)

            def origin_of(i, at=flat_index):  # the finite elements' own indices
                return where(tuple(int(v) for v in at[i]))
        else:
            def origin_of(i, at=ref.shape):  # the flat index in the output's shape
                return where(tuple(int(v) for v in np.unravel_index(i, at)))
        if ref.size == 0:
            return ""
        # Half the spacing of the output format's subnormals is the least error any kernel storing the exact
        # answer makes there (an fp16 5.0e-7 stores as 4.77e-7): below that, a difference is the format's.
        diff = xp.maximum(xp.abs(y - ref) - ROUNDING_FLOOR.get(str(y.dtype), 0.0), 0.0)
        self.diff2 += float((diff * diff).sum())
        if floor is not None:  # judged beyond the summation's rounding; the error itself is still what is reported
            diff = xp.maximum(diff - xp.where(xp.isfinite(floor), floor, 0.0), 0.0)
            self.judged2 += float((diff * diff).sum())
        else:
            self.judged2 = self.diff2
        self.ref2 += float((xp.abs(ref) ** 2).sum())
        self.count += int(ref.size)
        slack = diff - budget.rtol * xp.abs(ref)
        i = int(xp.argmax(slack.reshape(-1)))
        s = float(slack.reshape(-1)[i])
        if s > self.worst[0]:
            self.worst = (s, origin_of(i), _scalar(y.reshape(-1)[i]), _scalar(ref.reshape(-1)[i]),
                          float(diff.reshape(-1)[i]))
        return ""

    def finish(self, budget: Budget, rms: float | None = None, rel: float | None = None) -> tuple[str, float, float]:
        """(failure reason or "", relative Frobenius error, worst elementwise excess)."""
        if self.reason:
            return self.reason, math.nan, math.inf
        if self.count == 0:
            return "", 0.0, 0.0
        ref_norm = math.sqrt(self.ref2)
        if rel is None:
            rel = math.sqrt(self.diff2) / ref_norm if ref_norm > 0 else math.sqrt(self.diff2)
            judged = math.sqrt(self.judged2) / ref_norm if ref_norm > 0 else math.sqrt(self.judged2)
        else:
            judged = rel
        if rms is None:
            rms = ref_norm / math.sqrt(self.count)
        s, idx, yv, rv, d = self.worst
        allowed = budget.atol * max(rms, np.finfo(np.float64).tiny) + budget.rtol * abs(rv)
        worst = d / allowed if allowed > 0 else (math.inf if d > 0 else 0.0)
        if s > budget.atol * max(rms, np.finfo(np.float64).tiny):
            return (f"element {idx} is {yv:.6g}, oracle {rv:.6g} "
                    f"({worst:.3g}x the elementwise budget; relative error {rel:.2e})"), rel, worst
        if judged > budget.rel_fro:
            beyond = f" ({judged:.3e} beyond the summation's rounding)" if judged != rel else ""
            return f"relative error {rel:.3e}{beyond} over budget {budget.rel_fro:.0e}", rel, worst
        return "", rel, worst


def compare(y, ref, budget: Budget, nan_fills_row: bool = False, floor=None, parts: tuple = ()
            ) -> tuple[str, float, float]:
    """(failure reason or "", relative Frobenius error, worst elementwise excess) of a whole output; ``floor``:
    ``Tally.add``'s; ``parts``: ``OpKind.parts`` (each part judged alone, the worst reported)."""
    if y.shape != ref.shape:
        return f"output shape {tuple(y.shape)} should be {tuple(ref.shape)}", math.nan, math.inf
    tallies = []
    for part in parts or (None,):
        tally = Tally(nan_fills_row)
        index = () if part is None else (part,)
        tally.add(y[index], ref[index], budget, None if part is None else (lambda i, p=part: (p, *i)),
                  floor=None if floor is None else floor[index])
        tallies.append(tally)
    return _worst_part(tallies, budget)


def _worst_part(tallies: list[Tally], budget: Budget, rms=None) -> tuple[str, float, float]:
    """The first failing part's verdict, else the largest error and excess of the parts."""
    verdicts = [t.finish(budget, rms) for t in tallies]
    failed = [v for v in verdicts if v[0]]
    if failed:
        return failed[0]
    return "", max(v[1] for v in verdicts), max(v[2] for v in verdicts)


# --- checking one probe's output -------------------------------------------------
def _sub_rows(region, i0: int, i1: int):
    """``region`` restricted to output rows i0:i1 (a smaller region of the same op), or None (``OpKind.sub_rows``)."""
    kind = op_kind(region.op)
    return None if kind.sub_rows is None else kind.sub_rows(region, i0, i1)


def _row_count(region) -> int:
    return op_kind(region.op).rows_of(region)


def _chunked(region, y, budget) -> tuple[str, float, float]:
    """The full float64 reference of a row op, a bounded chunk of rows at a time."""
    oracle = op_kind(region.op).oracle
    size = math.prod(region.output_shape())
    rows = _row_count(region)
    step = max(1, CHUNK_ELEMENTS // max(1, size // max(rows, 1)))
    kind = op_kind(region.op)
    tally = Tally(kind.nan_fills_row)
    if size // max(rows, 1) > CHUNK_ELEMENTS:  # one row alone passes the bound: its reference a piece at a time
        row_pieces = op_kind(region.op).row_pieces
        pieces = None if row_pieces is None else row_pieces(region, CHUNK_ELEMENTS)
        if pieces is not None:
            for index, origin, ref in pieces:
                if tally.add(y[index], ref, budget, origin):
                    break
            return tally.finish(budget)
    parts = kind.parts or (None,)
    tallies = [tally] + [Tally(kind.nan_fills_row) for _ in parts[1:]]
    for i0 in range(0, rows, step):
        sub, index = _sub_rows(region, i0, min(rows, i0 + step))
        axis = 1 if len(index) == 2 else 0
        got, ref = y[index], oracle(sub)
        for part, part_tally in zip(parts, tallies):
            def origin(idx, i0=i0, axis=axis, part=part):
                idx = idx if part is None else (part, *idx)
                return tuple(v + i0 if d == axis else v for d, v in enumerate(idx))

            at = () if part is None else (part,)
            if part_tally.add(got[at], ref[at], budget, origin):
                return part_tally.finish(budget)
    return _worst_part(tallies, budget)


def _rademacher(xp, rng, n: int, s: int):
    return xp.asarray(rng.integers(0, 2, (n, s)).astype(np.float64) * 2.0 - 1.0)


# Float64 elements per chunk step of a product check on a device: each step is a dozen kernel launches (and as
# many Python calls), so a device takes few large steps (4096 columns: 4 of 1024 rows, not 64 of 64 rows); 32 MiB.
DEVICE_CHUNK_ELEMENTS = CHUNK_ELEMENTS * 4


def _row_step(cols: int, xp=np) -> int:
    """Rows per chunk step: float64 chunks of ~2 MiB on the host (they stay in cache), 32 MiB on a device."""
    return max(1, (CHUNK_ELEMENTS // 4 if xp is np else DEVICE_CHUNK_ELEMENTS) // max(cols, 1))


def _sample_rows(rng, m: int, count: int) -> list[int]:
    """Random rows, plus the first, the last, and the last row of every partial tile of 8..128."""
    rows = {0, m - 1} | {int(r) for r in rng.integers(0, m, min(count, m))}
    rows |= {m - 1 - (m % t) for t in (8, 16, 32, 64, 128) if m % t}
    return sorted(r for r in rows if 0 <= r < m)


def _products_sampled(region, product: Product, y, budget, rng) -> tuple[str, float, float]:
    """A product op (matmul, gated: ``OpKind.product``) at large shapes, at about one pass over each operand in
    float64.

    * The exact float64 reference of sampled rows (random ones, the first, the last, the last of every
      partial tile) and sampled columns (a random one, the last, the last partial tile's), epilogue included,
      compared element by element.
    * For matmul without an activation (a linear map), Freivalds: ``D = y X - (a (b X) + bias X + residual X)``
      for random sign vectors ``X`` (a linear ``product``). Row i of ``D`` has
      ``E[D_i^2] = ||row i of (y - ref)||^2``, so every
      row's error norm is estimated (a single wrong element ``e`` gives ``|D_i| = |e|`` exactly) and so is
      the relative Frobenius error. Nonlinear epilogues have no such identity: their real-shape probe is
      checked on the samples, and the bucket's smaller probes are compared in full.
    """
    xp = array_module(y)
    left, rights, finish, linear = product.left, product.rights, product.finish, product.linear
    m, n = y.shape
    k = left.shape[1]
    # Freivalds already bounds every row of a linear product: its exact samples are a second, elementwise look.
    rows = _sample_rows(rng, m, SAMPLED_ROWS // 2 if linear else 4 * SAMPLED_ROWS)
    cols = sorted({n - 1, int(rng.integers(0, n))} | ({n - 1 - n % 128} if n % 128 else set()))
    if not linear:  # no Freivalds over every row: every row and column of the partial last tile of 128
        rows = sorted(set(rows) | set(range(m - m % 128, m)))
        cols = sorted(set(cols) | set(range(n - n % 128, n)))
    # Float64 chunks go through one reused buffer: a fresh multi-MiB array per chunk costs page faults.
    step = _row_step(max(k, n), xp)
    buf = xp.empty((step, max(k, n)))

    def as64(part):
        view = buf[:part.shape[0], :part.shape[1]]
        view[...] = part
        return view

    # Columns where the bias or the residual holds NaN or Inf (the nonfinite family): Freivalds' random sums would
    # carry them into every row (Inf - Inf = NaN), so they leave the sums and are compared exactly, in full.
    special = _nonfinite_columns(xp, product, as64, step) if linear else []
    cols = sorted(set(cols) | set(special))
    ridx, cidx = xp.asarray(rows), xp.asarray(cols)
    X = _rademacher(xp, rng, n, FREIVALDS_VECTORS) if linear else None
    sidx = xp.asarray(special) if special else None
    if X is not None and sidx is not None:  # (their y, bias and residual elements are zeroed too: NaN x 0 is NaN)
        X[sidx] = 0.0
    a_rows = left[ridx].astype(np.float64)
    z_rows = [xp.zeros((len(rows), n)) for _ in rights]
    w_cols = [w[:, cidx].astype(np.float64) for w in rights]
    bx: Any = xp.empty((k, FREIVALDS_VECTORS)) if linear else None

    a_rows_t = xp.ascontiguousarray(a_rows.T)
    for k0 in range(0, k, step):  # one pass over each right operand
        for z, w in zip(z_rows, rights):
            chunk = as64(w[k0:k0 + step])
            z += a_rows_t[k0:k0 + chunk.shape[0]].T @ chunk
            if linear:
                bx[k0:k0 + chunk.shape[0]] = chunk @ X
    z_cols = [xp.empty((m, len(cols))) for _ in rights]
    ref_x: Any = xp.empty((m, FREIVALDS_VECTORS)) if linear else None
    y_x: Any = xp.empty((m, FREIVALDS_VECTORS)) if linear else None
    for i0 in range(0, m, step):  # one pass over the left operand (and y)
        chunk = as64(left[i0:i0 + step])
        for zc, wc in zip(z_cols, w_cols):
            zc[i0:i0 + step] = chunk @ wc
        if linear:
            ref_x[i0:i0 + step] = chunk @ bx
            y_x[i0:i0 + step] = _without(as64(y[i0:i0 + step]), sidx) @ X
            if product.residual is not None:
                ref_x[i0:i0 + step] += _without(as64(product.residual[i0:i0 + step]), sidx) @ X

    rms = rel = None
    if linear:
        if product.bias is not None:
            ref_x += _without(product.bias.astype(np.float64), sidx) @ X
        d = y_x - ref_x
        if not bool(xp.isfinite(d).all()):
            bad = int(xp.argwhere(~xp.isfinite(d).all(axis=1))[0][0])
            return f"row {bad} holds NaN or Inf (unwritten or computed) where the oracle is finite", math.nan, math.inf
        err_rows = xp.sqrt((d * d).mean(axis=1))
        ref_rows2 = (ref_x * ref_x).mean(axis=1)
        rms = math.sqrt(float(ref_rows2.sum()) / max(m * n, 1))
        rel = math.sqrt(float((err_rows ** 2).sum()) / max(float(ref_rows2.sum()), 1e-300))
        # A row may carry at most the error its elements may: sqrt(sum_j (atol rms + rtol |ref_ij|)^2)
        # <= sqrt(2 (n atol^2 rms^2 + rtol^2 ||ref_i||^2)); 3x for the estimate's own noise.
        allowed = 3.0 * xp.sqrt(2.0 * (n * (budget.atol * rms) ** 2 + budget.rtol ** 2 * ref_rows2))
        ratio = err_rows / xp.maximum(allowed, 1e-300)
        worst_row = int(xp.argmax(ratio))
        if float(ratio[worst_row]) > 1.0:
            return (f"row {worst_row} is wrong: its error norm {float(err_rows[worst_row]):.3g} is "
                    f"{float(ratio[worst_row]) * 3.0:.3g}x what the elementwise budget allows a row "
                    f"(Freivalds check; relative error {rel:.2e})"), rel, math.inf
        if rel > budget.rel_fro:
            return f"relative error {rel:.3e} over budget {budget.rel_fro:.0e} (Freivalds estimate)", rel, math.inf
    tally = Tally()
    all_cols, all_rows = slice(None), slice(None)
    for ref, ys, origin in ((finish(z_rows, ridx, all_cols), y[ridx], lambda i: (rows[i[0]], i[1])),
                            (finish(z_cols, all_rows, cidx), y[:, cidx], lambda i: (i[0], cols[i[1]]))):
        if tally.add(ys, ref, budget, origin):
            break
    if not linear and not tally.reason:  # (a linear product's Freivalds sums see every element wherever it sits)
        _diagonal(region, y, left, rights, finish, tally, budget, int(rng.integers(0, DIAGONAL)))
        if not tally.reason:
            _full_tiles(y, left, rights, finish, tally, budget, rng)
    return tally.finish(budget, rms=rms, rel=rel)


def _without(part, columns):
    """``part`` (float64, a scratch copy) with ``columns`` of its last axis set to 0 (None: as it is)."""
    if columns is not None:
        part[..., columns] = 0.0
    return part


def _nonfinite_columns(xp, product: Product, as64, step: int) -> list[int]:
    """The columns whose bias element or residual column holds NaN or Inf (one pass over the residual)."""
    bad = None
    if product.bias is not None:
        bad = ~xp.isfinite(product.bias.astype(np.float64))
    residual = product.residual
    if residual is not None:
        for i0 in range(0, residual.shape[0], step):
            part = (~xp.isfinite(as64(residual[i0:i0 + step]))).any(axis=0)
            bad = part if bad is None else bad | part
    return [] if bad is None else [int(i) for i in xp.flatnonzero(bad).tolist()]


DIAGONAL = 8  # the diagonal check's period: every run of 8 adjacent outputs, across or down, holds one checked


def _diagonal(region, y, left, rights, finish, tally, budget, shift: int) -> None:
    """The exact reference of every output (i, j) with ``(j - i) % 8 == shift`` (``shift`` random per probe), into
    ``tally``. Every 1x8 run of a row and every 8x1 run of a column holds exactly one such element, so a wrong
    1x8 (or 8x1) fragment anywhere is caught with certainty, a single wrong element with probability 1/8, at
    1/8 of the product's work in float64: rows ``g::8`` against columns ``(g + shift) % 8::8`` for g in 0..7."""
    m, n = y.shape
    k = left.shape[1]
    step = max(1, _row_step(k, array_module(y)) // 2)
    for g in range(min(DIAGONAL, m)):
        c0 = (g + shift) % DIAGONAL
        if c0 >= n:
            continue
        cols = slice(c0, n, DIAGONAL)
        w_cols = [w[:, cols].astype(np.float64) for w in rights]
        row_ids = range(g, m, DIAGONAL)
        for r0 in range(0, len(row_ids), step):
            rsel = slice(g + r0 * DIAGONAL, min(m, g + (r0 + step) * DIAGONAL), DIAGONAL)
            a64 = left[rsel].astype(np.float64)
            ref = finish([a64 @ wc for wc in w_cols], rsel, cols)
            first_row = g + r0 * DIAGONAL

            def origin(i, first_row=first_row, c0=c0):
                return (first_row + DIAGONAL * i[0], c0 + DIAGONAL * i[1])

            if tally.add(y[rsel, cols], ref, budget, origin):
                return


# The sampled checks' stated guarantee (issue 38 item 6), whatever the positions of the wrong elements: a linear
# product's Freivalds sums see every element; a nonlinear one (an activation, gated) is also compared in full on
# FULL_TILES of its TILE x TILE output tiles drawn at random (without replacement), so
# a kernel wrong anywhere in a fraction f of the tiles is caught with probability >= 1 - (1 - f)^FULL_TILES (one
# wrong element in every tile: certainly; in half of them: 0.999); attention draws each head's query rows
# (``attention_rows``). The diagonal's single residue and the random rows alone caught one wrong element at one
# place in every tile 1 time in 3 (tests/test_gate_sampling_catch.py).
TILE = 128
FULL_TILES = 10
MISS_BOUND = 1e-3


def _full_tiles(y, left, rights, finish, tally, budget, rng) -> None:
    """The exact reference of FULL_TILES random TILE x TILE output tiles (all of them where there are fewer)."""
    m, n = y.shape
    tiles_m, tiles_n = math.ceil(m / TILE), math.ceil(n / TILE)
    picked = rng.choice(tiles_m * tiles_n, min(FULL_TILES, tiles_m * tiles_n), replace=False)
    for t in sorted(int(p) for p in picked):
        r0, c0 = (t // tiles_n) * TILE, (t % tiles_n) * TILE
        rsel, csel = slice(r0, min(m, r0 + TILE)), slice(c0, min(n, c0 + TILE))
        ref = finish([left[rsel].astype(np.float64) @ w[:, csel].astype(np.float64) for w in rights], rsel, csel)

        def origin(i, r0=r0, c0=c0):
            return (r0 + i[0], c0 + i[1])

        if tally.add(y[rsel, csel], ref, budget, origin):
            return


def attention_rows(leads: int, sq: int) -> int:
    """Query rows sampled per (batch, head) at large shapes: enough that W = leads x sq/TILE rows, one wrong row per
    TILE-row tile of every head (any rows), are all missed with probability <= MISS_BOUND, each head drawing its own
    rows: (1 - 1/TILE)^(rows x leads) <= MISS_BOUND."""
    need = math.ceil(math.log(MISS_BOUND) / (leads * math.log1p(-1.0 / TILE)))
    return min(sq, max(SAMPLED_ROWS, need))


def _rows_sampled(region, rows_oracle, y, budget, rng) -> tuple[str, float, float]:
    """At large shapes (attention): the exact reference (``OpKind.rows_oracle``) of sampled query rows (output axis -2)
    of every leading index (batch, head), each head its own random rows (``attention_rows`` of them) plus the
    first, the last and the last of every partial tile, which every head checks."""
    xp = array_module(y)
    sq = y.shape[-2]
    lead_shape = tuple(y.shape[:-2])
    leads = math.prod(lead_shape)
    count = attention_rows(leads, sq)
    fixed = _sample_rows(rng, sq, 0)
    own = np.sort(np.stack([rng.choice(sq, count, replace=False) for _ in range(leads)]), axis=1)
    rows = np.concatenate([np.broadcast_to(np.asarray(fixed), (leads, len(fixed))), own], axis=1)
    rows = rows.reshape(*lead_shape, rows.shape[-1])
    ridx = xp.asarray(rows)
    tally = Tally(op_kind(region.op).nan_fills_row)
    got = xp.take_along_axis(y, ridx[..., None], axis=-2)
    tally.add(got, rows_oracle(region, rows), budget,
              lambda i: (*i[:-2], int(rows[tuple(i[:-2]) + (i[-2],)]), i[-1]))
    return tally.finish(budget)


def _one_blas_thread():
    """The check's products are skinny (n x 4, 40 x k): one BLAS thread runs them in microseconds, where a
    thread pool's wake-up costs milliseconds each (15 ms per call measured on a loaded two-core machine).
    Through ``cpu_threads.blas_threads``: concurrent gates leave the pool as they found it."""
    return cpu_threads.blas_threads(1)


def _freivalds_covers(region) -> bool:
    """Whether the randomized check of ``region`` sees every element (a linear product) or only samples."""
    product = op_kind(region.op).product
    return product is not None and product(region).linear


def check_output(region, y, budget: Budget, rng, full: bool = False) -> tuple[str, float, float]:
    """Compare candidate output ``y`` with the float64 oracle of (pristine) ``region`` at about one run's cost;
    ``full``: the whole float64 reference even for a large product."""
    with oracles.on_device(), (_one_blas_thread() if targets.get(region.target).host_cores
                               else contextlib.nullcontext()):
        kind = op_kind(region.op)
        big = _cost(region.dims) > CHEAP_CHECK_WORK and not full
        if big and kind.product is not None and len(y.shape) == 2:
            return _products_sampled(region, kind.product(region), y, budget, rng)
        if big and kind.rows_oracle is not None:
            return _rows_sampled(region, kind.rows_oracle, y, budget, rng)
        if math.prod(region.output_shape()) > CHUNK_ELEMENTS and _sub_rows(region, 0, 1) is not None:
            return _chunked(region, y, budget)
        return compare_full(region, y, budget)


def compare_full(region, y, budget: Budget) -> tuple[str, float, float]:
    """``y`` against the whole float64 reference of ``region``, less the op's rounding floor (``OpKind.rounding``)."""
    kind = op_kind(region.op)
    floor = None if kind.rounding is None else kind.rounding(region)
    return compare(y, kind.oracle(region), budget, kind.nan_fills_row, floor, kind.parts)


def gate_seed() -> int | None:
    """``ARBITER_GATE_SEED`` as the gate's seed (a whole number >= 0), None when unset. ValueError naming the
    variable and its value otherwise (before: int()'s "invalid literal for int() with base 10: 'abc'")."""
    given = os.environ.get("ARBITER_GATE_SEED", "").strip()
    if not given:
        return None
    try:
        seed = int(given)
    except ValueError:
        seed = -1
    if seed < 0:
        raise ValueError(f"ARBITER_GATE_SEED={given!r} is not a whole number >= 0 (the gate's random seed, "
                         f"named by a failed verdict to replay it); set it to one such as 12345, or unset it")
    return seed


def _gate_rng() -> tuple[np.random.Generator, int]:
    seed = gate_seed()
    if seed is None:
        seed = int.from_bytes(os.urandom(8), "little") >> 1
    return np.random.default_rng(seed), seed


def _scalars_text(region) -> str:
    args = {k: v for k, v in region.runtime_args().items() if v is not None and v != []}
    return ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={[round(s, 3) for s in v]}"
                     for k, v in args.items())


GUARD_ELEMENTS = 256  # poisoned elements on each side of the gate's output: a write past it fails
# Runs of one probe compared with each other (``repeats``): a race that corrupts one call in 8 shows in at least
# one of 36 runs with probability 1 - (7/8)^36 = 0.992.
REPEATS = 36
# The repeats cost at most this multiple of the real shape's work (or REPEAT_WORK_FLOOR units): at the real shape
# when they fit, else at a shape shrunk to fit.
REPEAT_WORK_FACTOR = 0.1
REPEAT_WORK_FLOOR = 1 << 22


def _guarded_out(target, shape, dtype: str, shift: bool):
    """(the gate's output, its whole buffer, the output's slice of it): NaN-poisoned, inside a poisoned band of
    ``GUARD_ELEMENTS`` each side; ``shift``: the output one element off a 16-byte boundary too."""
    size = math.prod(shape)
    lead = GUARD_ELEMENTS + (1 if shift else 0)
    buf = target.full((lead + size + GUARD_ELEMENTS,), np.nan, dtype)
    return buf[lead:lead + size].reshape(shape), buf, (lead, lead + size)


def _guard_reason(buf, span) -> str:
    """"" when the guard band around the output is still all NaN, else where it was written."""
    xp = array_module(buf)
    lo, hi = span
    for part, where in ((buf[:lo], "before"), (buf[hi:], "after")):
        ok = xp.isnan(part)
        if not bool(ok.all()):
            first = int(xp.argmin(ok))
            offset = lo - first if where == "before" else first + 1
            return (f"wrote outside its output: element {offset} {where} it (the poisoned guard band) changed; a "
                    "kernel may write its output's elements and nothing else")
    return ""


@dataclass
class _Run:
    reason: str
    y: Any = None
    pristine: Any = None


def _run_once(candidate, params, fresh, target, label: str, shift: bool, aliased: list[str],
              guard: bool, pristine=None, start=None) -> _Run:
    """One run of the candidate on probe ``fresh``, in the gate's own poisoned, guarded output (or, for a legal
    in-place key, in the aliased operand placed inside the guard band). Checks what needs no oracle. ``start``:
    called just before the candidate runs, after the gate's own preparation (concurrent callers meet there)."""
    if guard:
        out, buf, span = _guarded_out(target, fresh.output_shape(), fresh.out_dtype, shift)
    else:  # an opaque target's arrays: no views of a wider buffer
        out, buf, span = target.full(fresh.output_shape(), np.nan, fresh.out_dtype), None, None
    if aliased:  # out= is the input (in-place residual add or norm): the aliased operands are the output
        out[...] = (pristine or fresh).operands()[aliased[0]]
        layouts.set_operands(fresh, {name: out for name in aliased})
    if pristine is None:
        pristine = pristine_copy(fresh)
    env = fpenv.capture()
    if start is not None:
        start()
    try:
        result = candidate.run(fresh.with_out(out), params)
        target.synchronize()
    except Exception as exc:  # any failure of the candidate is its verdict, never ours
        return _Run(f"at {label}: raised {type(exc).__name__}: {exc}{_env_note(env)}")
    reason = _env_reason(env, label)
    if reason:
        return _Run(reason)
    if isinstance(result, Fallback):
        return _Run(f"at {label}: declined ({result.reason}); a decliner may not win")
    if result is not out:
        return _Run(f"at {label}: returned a new array instead of writing the given output")
    changed = changed_inputs(fresh, pristine, skip=aliased)
    if changed:
        return _Run(f"at {label}: wrote to its input {changed}; inputs must stay unchanged")
    if buf is not None:
        reason = _guard_reason(buf, span)
        if reason:
            return _Run(f"at {label}: {reason}")
    y = out if _native(out) else np.asarray(target.to_host(out))
    return _Run("", y, pristine)


def _env_reason(env, label: str) -> str:
    """A failure when the run left the calling thread's floating-point environment changed (put back first, so
    the oracle computed next is not judged under it)."""
    what = fpenv.changed(env)
    return (f"at {label}: left the calling thread's floating-point environment changed ({what}); a kernel that "
            "changes it must restore it (every later computation on the thread, the caller's and the oracle's, "
            "would run under it)") if what else ""


def _env_note(env) -> str:
    what = fpenv.changed(env)
    return f" (and left the thread's floating-point environment changed: {what})" if what else ""


def repeat_dims(region) -> dict:
    """Where the repeats run: the real shape when ``REPEATS`` runs of it fit the repeat budget, else the real
    shape shrunk (together, odd tails) until they do."""
    real = dict(region.dims)
    work = max(REPEAT_WORK_FACTOR * _cost(real), REPEAT_WORK_FLOOR) / REPEATS
    return real if _cost(real) <= work else shrunk(real, region, work)


def _same_bits(a, b) -> bool:
    xp = array_module(a)
    a, b = _bits(a), _bits(b)
    return bool(xp.array_equal(a, b, equal_nan=True)) if a.dtype.kind in "fc" else bool(xp.array_equal(a, b))


@np.errstate(all="ignore")  # the probes overflow exp on purpose: the verdict reports, NumPy's warnings do not
def verify(candidate: Candidate, params: dict, region) -> Verdict:
    """Run the F4 gate for one solution (candidate + params) at ``region``'s key."""
    start = time.perf_counter()
    budget, looser = budget_of(candidate, region.op, region.dtype)
    worst_rel, worst_excess = 0.0, 0.0
    probed: list[str] = []

    def verdict(reason=""):
        return Verdict(not reason, reason, worst_rel if probed else math.nan, worst_excess, tuple(probed),
                       budget, looser, time.perf_counter() - start)

    if looser and not consents_to_looser(region):
        default = budget_for(region.op, region.dtype)
        return verdict(f"declares accuracy looser than the {region.op} {region.dtype} budget "
                       f"(rel_fro {budget.rel_fro:.0e} > {default.rel_fro:.0e}, or atol/rtol) and the caller "
                       "has not opted in (region.allow_looser(), arbiter.configure(looser_accuracy=True), "
                       "or --allow-looser)")
    target = targets.get(region.target)
    rng, seed = _gate_rng()
    # Probes are drawn on the target itself when its arrays are ones the gate works on in place (NumPy,
    # CuPy), whatever the caller passed: a torch caller's key is gated on CuPy probes where CuPy is present.
    # Otherwise (ROCm's device arrays, torch without CuPy) they are drawn and kept on the host, in plain layouts.
    opaque = not _draws_native(region.target)
    _, aliased = layouts.parse(region.attrs)

    def draw(probe, index, dims=None):
        """(probe region, shifted, its pristine copy where it was drawn on the host for an opaque target)."""
        # pointer alignment: 16-byte aligned, then one element off, alternately; a real shape above the cost floor
        # stays aligned (moving its operands would cost a pass over each), the bucket's other probes alternate
        at_real = (dims or probe.dims) == dict(region.dims)
        shift = (index % 2 == 1 and not opaque and target.special_values_verified
                 and not (at_real and _cost(region.dims) > EXTRA_WORK_FLOOR))
        if opaque:  # drawn and kept on the host; the candidate gets a device copy
            host = _draw(pristine_copy_target(region, "cpu"), probe, rng, False, dims, index, caller_layout=False)
            return _on_target(host, region.target), shift, host
        return _draw(region, probe, rng, shift, dims, index), shift, None

    def labelled(probe, fresh, dims=None):
        text = probe.label if dims is None else Probe(dims, probe.family, probe.vary_scalars).label
        scalars = _scalars_text(fresh) if probe.vary_scalars else ""
        return text + (f" ({scalars})" if scalars else "")

    def judge(run, probe, pristine_dims):
        nonlocal worst_rel, worst_excess
        fam_budget = budget if looser else probe.family.budget_for(region.op, region.dtype)
        if looser:  # a declared budget applies to every family, but never tighter than the family's own
            fb = probe.family.budget_for(region.op, region.dtype)
            fam_budget = Budget(max(budget.rel_fro, fb.rel_fro), max(budget.atol, fb.atol), max(budget.rtol, fb.rtol))
        # The bucket's smaller probes of a product the randomized check only samples get the full float64
        # reference, where it costs at most a quarter of the real shape's work and fits 64 MiB.
        full = (pristine_dims != dict(region.dims) and not _freivalds_covers(region)
                and 4 * _cost(pristine_dims) <= _cost(region.dims)
                and 8 * (sum(int(a.size) for a in run.pristine.operands().values()) + int(run.y.size)) <= 64 << 20)
        reason, rel, excess = check_output(run.pristine, run.y, fam_budget, rng, full=full)
        worst_rel = max(worst_rel, rel) if not math.isnan(rel) else rel
        worst_excess = max(worst_excess, excess)
        return reason

    for index, probe in enumerate(probe_plan(region)):
        fresh, shift, host = draw(probe, index)
        dims = None
        applies = candidate.applies_to(fresh)
        if applies is not True and not probe.inside:
            # a shape outside the bucket (shrunk to fit the cost cap): the candidate need not serve it
            if probe.fallback is None:
                probed.append(f"{labelled(probe, fresh)}: declined, outside the bucket")
                continue
            dims = probe.fallback
            fresh, shift, host = draw(probe, index, dims)
            applies = candidate.applies_to(fresh)
        label = labelled(probe, fresh, dims)
        probed.append(label)
        if applies is not True:
            # It accepted the real shape but not this probe of its bucket: it cannot serve the bucket.
            return verdict(f"at {label}: does not apply to the bucket's edge ({applies or 'declined'})")
        run = _run_once(candidate, params, fresh, target, label, shift, [] if opaque else aliased, not opaque, host)
        if run.reason:
            return verdict(run.reason)
        del fresh
        reason = judge(run, probe, dims or probe.dims)
        del run  # freed before the next probe draws its own (else two probes' arrays are alive)
        if reason:
            return verdict(f"at {label}: {reason} [gate seed {seed}]")
    reason = _repeats(candidate, params, region, target, draw, labelled, judge, probed, aliased, opaque)
    if not reason and not aliased and not opaque and target.host_cores:  # a device's: not verified there yet
        reason = _context(candidate, params, region, target, draw, labelled, judge, probed)
    if reason:
        return verdict(f"{reason} [gate seed {seed}]")
    return verdict()


def _repeats(candidate, params, region, target, draw, labelled, judge, probed, aliased, opaque) -> str:
    """``REPEATS`` runs of one probe on the same inputs (``repeat_dims``): the first checked against the oracle,
    the others against the first, bitwise under a deterministic contract (the default), within the budget
    otherwise. Returns a failure reason or ""."""
    dims = repeat_dims(region)
    probe = Probe(dims, probes.BENIGN, False)
    fresh, shift, host = draw(probe, 0)
    if candidate.applies_to(fresh) is not True:  # a shrunk shape it need not serve: the skew shape of the bucket
        dims = skew_shape(region)
        probe = Probe(dims, probes.BENIGN, False)
        fresh, shift, host = draw(probe, 0)
        if candidate.applies_to(fresh) is not True:
            return ""
    contract = candidate.contract
    deterministic = contract is None or contract.deterministic
    label = f"{labelled(probe, fresh)} x{REPEATS} repeats"
    probed.append(label)
    aliased = [] if opaque else aliased
    first = _run_once(candidate, params, fresh, target, label, shift, aliased, not opaque, host)
    if first.reason:
        return first.reason
    reason = judge(first, probe, dims)
    if reason:
        return f"at {label}: {reason}"
    base = first.y.copy()
    ref_budget = budget_for(region.op, region.dtype)
    for i in range(1, REPEATS):  # the same inputs (a run that changes them fails); an aliased one restored
        run = _run_once(candidate, params, fresh, target, label, shift, aliased, not opaque, first.pristine)
        if run.reason:
            return run.reason
        if deterministic:
            if not _same_bits(run.y, base):
                xp = array_module(base)
                differ = int((~((run.y == base) | (xp.isnan(run.y) & xp.isnan(base)))).sum())
                return (f"at {label}: run {i + 1} differs from run 1 in {differ} element(s) on the same inputs; "
                        "a deterministic contract (the default) means bitwise-equal runs (a race, or "
                        "uninitialised memory?). Declare Contract(deterministic=False) if the order varies")
        else:
            reason, _, _ = compare(run.y, base.astype(np.complex128 if base.dtype.kind == "c" else np.float64),
                                   ref_budget, parts=op_kind(region.op).parts)
            if reason:
                return f"at {label}: run {i + 1} against run 1: {reason}"
    return ""


# --- the program's state and context (issue 38 item 3) ----------------------------------------------------
# A kernel is called by a program, not by the gate alone: the same arrays come back with new values (a weight
# updated in place), results are kept while the next call runs, calls come from worker threads and at once, and
# the thread pools are as the program left them. Each check below runs at the repeat shape (``repeat_dims``:
# the real shape, or shrunk to a tenth of its work for REPEATS runs), one or two runs each, about CONTEXT_RUNS
# runs in all, each judged against the float64 oracle. The floating-point environment is checked around every
# run of the gate (``_run_once``), on every target. The CPU target alone runs these checks for now: on a GPU
# target (streams per thread, candidates without out= through CuPy's pool) they wait to be run on a device.
# The concurrent-callers probe's callers, meeting just before the candidate runs: with two, a race whose window is
# one GIL switch (a sleep(0)) was caught in 12 of 15 and 16 of 20 gates on a box loaded by four busy processes;
# with four callers, in 35 of 35 (2026-12-07, 2 cores; /tmp/race.py of that session).
CONCURRENT_CALLERS = 4
CONTEXT_RUNS = 6 + CONCURRENT_CALLERS  # in place 2, without out= 2, a worker thread 1, at 1 thread 1
THREAD_TIMEOUT_S = 120.0  # a call on a worker thread that has not returned by then fails (deadlock)


def _overwrite_tail(region, other) -> None:
    """New values in the second half (along the first axis) of every operand of ``region``, in place, from the
    same operand of ``other`` (drawn alike): the same arrays, a prefix of their values unchanged."""
    theirs = other.operands()
    for name, arr in region.operands().items():
        if getattr(arr, "ndim", 0) == 0 or 0 in getattr(arr, "strides", (1,)):  # a scalar or a broadcast view
            continue
        if tuple(theirs[name].shape) == tuple(arr.shape):
            half = arr.shape[0] // 2
            arr[half:] = theirs[name][half:]


@contextlib.contextmanager
def _read_only(region, candidate):
    """``region``'s NumPy operands read-only for one call (a kernel that writes an input, even to restore it,
    raises), except for a numba candidate's (a read-only array is another type to numba: a compile per kernel)."""
    arrays = [a for a in region.operands().values() if isinstance(a, np.ndarray) and a.flags.writeable]
    if any(hasattr(f, "py_func") for f in candidate.functions()):
        arrays = []
    for a in arrays:
        a.flags.writeable = False
    try:
        with warnings.catch_warnings():  # torch.from_numpy warns on read-only arrays; the call is the gate's
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            yield
    finally:
        for a in arrays:
            a.flags.writeable = True


def _plain_call(candidate, params, fresh, target, label: str) -> tuple[str, Any]:
    """One run without ``out=``, as a program calls: (failure reason or "", the array it returned)."""
    env = fpenv.capture()
    try:
        result = candidate.run(fresh, params)
        target.synchronize()
    except Exception as exc:
        readonly = " (its inputs were read-only for this call: a kernel may not write them, even to restore " \
            "them)" if "read-only" in str(exc) else ""
        return f"at {label}: raised {type(exc).__name__}: {exc}{readonly}{_env_note(env)}", None
    reason = _env_reason(env, label)
    if reason:
        return reason, None
    if isinstance(result, Fallback):
        return f"at {label}: declined ({result.reason}); a decliner may not win", None
    if tuple(getattr(result, "shape", ())) != tuple(fresh.output_shape()):
        return (f"at {label}: returned shape {tuple(getattr(result, 'shape', ()))}, the output is "
                f"{tuple(fresh.output_shape())}"), None
    for name, arr in fresh.operands().items():
        if may_share(result, arr):
            return f"at {label}: returned memory of its input {name!r} as the output", None
    return "", result


def may_share(a, b) -> bool:
    """Whether two NumPy or CuPy arrays may share memory (their bounds overlap: no exact solve)."""
    if not (_native(a) and _native(b)) or array_module(a) is not array_module(b):
        return False
    may = getattr(array_module(a), "may_share_memory", None)
    return bool(may(a, b)) if may is not None else False


def _in_threads(calls) -> list:
    """Each of ``calls`` on its own worker thread; their results in order (a call that raised or did not return
    within THREAD_TIMEOUT_S gives its reason as a string). Calls that must overlap meet at their own barrier, just
    before the candidate runs (``_run_once``'s ``start``)."""
    results: list = [None] * len(calls)

    def work(i, call):
        try:
            results[i] = call()
        except Exception as exc:  # the gate's own trouble on the thread (the calls catch the candidate's)
            results[i] = f"raised {type(exc).__name__}: {exc} on a worker thread"

    threads = [threading.Thread(target=work, args=(i, c), daemon=True, name=f"arbiter-gate-{i}")
               for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for i, t in enumerate(threads):
        t.join(THREAD_TIMEOUT_S)
        if t.is_alive():
            results[i] = f"did not return within {THREAD_TIMEOUT_S:.0f} s on a worker thread (a deadlock?)"
    return results


@contextlib.contextmanager
def _one_thread_everywhere():
    """BLAS on one thread and, where the program has torch loaded, torch's intra-op pool on one thread: how a
    program that limits its threads calls (both put back after)."""
    with cpu_threads.blas_threads(1), cpu_threads.torch_threads(1):
        yield


def _context(candidate, params, region, target, draw, labelled, judge, probed) -> str:
    """The program's state and context at the repeat shape (the section comment above); a failure reason or "".

    1. the same input arrays called again with new values in their second half (updated in place, as a weight
       after an optimizer step): a result cached by identity, or by a prefix of the values, is stale;
    2. two calls without ``out=``, the first result kept and checked after the second (a pooled output returned
       twice), the second on read-only inputs (an input written and restored);
    3. a call on a worker thread, then four concurrent calls on different data (a shared scratch buffer);
    4. a call with BLAS and torch limited to one thread (a path taken only there)."""
    dims = repeat_dims(region)
    probe = Probe(dims, probes.BENIGN, False)
    first, shift, _ = draw(probe, 0)
    if candidate.applies_to(first) is not True:
        dims = skew_shape(region)
        probe = Probe(dims, probes.BENIGN, False)
        first, shift, _ = draw(probe, 0)
        if candidate.applies_to(first) is not True:
            return ""
    if not all(int(a.size) for a in first.operands().values()):  # an empty operand: no values to keep or change
        return ""
    base = labelled(probe, first)

    def judged(run, label, why) -> str:
        if isinstance(run, str):
            return f"at {label}: {run}"
        if run.reason:
            return run.reason
        reason = judge(run, probe, dims)
        return f"at {label}: {reason} ({why})" if reason else ""

    def once(fresh, label):
        return _run_once(candidate, params, fresh, target, label, False, [], True)

    # 1. in place
    label = f"{base} updated in place"
    probed.append(label)
    reason = judged(_run_once(candidate, params, first, target, label, shift, [], True), label, "first call")
    if reason:
        return reason
    _overwrite_tail(first, draw(probe, 1)[0])
    reason = judged(_run_once(candidate, params, first, target, label, shift, [], True), label,
                    "the same input arrays with new values in their second half: a result kept by the arrays' "
                    "identity or a prefix of their values is stale")
    if reason:
        return reason
    # 2. without out=, the first result kept
    label = f"{base} x2 without out="
    probed.append(label)
    kept, later = draw(probe, 2)[0], draw(probe, 3)[0]
    kept_pristine, later_pristine = pristine_copy(kept), pristine_copy(later)
    reason, y_kept = _plain_call(candidate, params, kept, target, label)
    if reason:
        return reason
    with _read_only(later, candidate):
        reason, y_later = _plain_call(candidate, params, later, target, label)
    if reason:
        return reason
    if may_share(y_kept, y_later):
        return (f"at {label}: returned the same memory for two calls (a pooled output): the result a caller "
                "kept from the first call changed under it")
    for fresh, pristine, y, why in ((kept, kept_pristine, y_kept, "the first call's result, read after the "
                                     "second call: an output the kernel reuses changes under the caller"),
                                    (later, later_pristine, y_later, "the second call, on read-only inputs")):
        changed = changed_inputs(fresh, pristine)
        if changed:
            return f"at {label}: wrote to its input {changed}; inputs must stay unchanged"
        host = y if _native(y) else np.asarray(target.to_host(y))
        reason = judged(_Run("", host, pristine), label, why)
        if reason:
            return reason
    # 3. threads
    label = f"{base} on a worker thread"
    probed.append(label)
    worker = draw(probe, 4)[0]
    [run] = _in_threads([lambda: once(worker, label)])
    reason = judged(run, label, "called from a thread other than the main one")
    if reason:
        return reason
    label = f"{base} x{CONCURRENT_CALLERS} concurrent threads"
    probed.append(label)
    callers = [draw(probe, seed)[0] for seed in (5, 6, 8, 9)[:CONCURRENT_CALLERS]]
    # The callers meet at a barrier just before the candidate runs, not before the gate's preparation of each call
    # (its output, the inputs' copies): a loaded box let one caller finish before the other began, and a race with
    # a window of a few milliseconds went unseen (a clean-clone test run beside another, 2026-12-07).
    meet = threading.Barrier(len(callers))

    def together(fresh):
        return _run_once(candidate, params, fresh, target, label, False, [], True,
                         start=lambda: meet.wait(timeout=THREAD_TIMEOUT_S))

    for run in _in_threads([functools.partial(together, fresh) for fresh in callers]):
        reason = judged(run, label, "two calls at once on different data: state shared between callers")
        if reason:
            return reason
    # 4. one thread
    label = f"{base} at 1 thread"
    probed.append(label)
    lone = draw(probe, 7)[0]
    with _one_thread_everywhere():
        run = once(lone, label)
    return judged(run, label, "BLAS and torch limited to one thread, as a program limiting its threads calls")


# --- the verdict cache ------------------------------------------------------------------
# How a plug-in's verdict is computed when the caller names no verifier: set by ``arbiter.decide`` (above this
# layer) to ``arbiter.isolate.plugin_verify``, a child process with a time limit; None: in this process.
_plugin_verifier = None


def set_plugin_verifier(verifier) -> None:
    global _plugin_verifier
    _plugin_verifier = verifier


def default_verifier(candidate: Candidate):
    """What computes ``candidate``'s verdict when the caller names no verifier: ``verify`` here, or a plug-in's
    isolated gate (``set_plugin_verifier``)."""
    return _plugin_verifier if candidate.plugin and _plugin_verifier is not None else verify


def verdict_for(candidate: Candidate, params: dict, region, store, env, verifier=None) -> tuple[Verdict, bool]:
    """The cached verdict, or a new one (saved). Returns (verdict, was_computed_now).

    ``verifier`` replaces ``verify`` (e.g. ``arbiter.isolate.Isolated().verify``). The candidate's
    ``identity()`` covers its behaviour and the gate's version, so a change to either takes a new verdict.
    """
    vkey = VerdictKey.of(Solution.of(candidate, params), region.key.id, env.fingerprint)
    found = store.load_verdict(vkey)
    if found is not None:
        return found, False
    found = (verifier or default_verifier(candidate))(candidate, params, region)
    store.save_verdict(vkey, found, candidate)
    return found, True
