"""The F4 gate: correctness before speed.

``verify(candidate, params, region)`` runs the candidate on fresh seeded random
inputs (never zeros) at the region's real shape and at its bucket's edge shapes,
each time into an output poisoned with NaN, and compares with the float64
oracle under the published budget (``arbiter.oracles.budgets``). It fails a
candidate that raises, declines (returns ``Fallback``), writes somewhere other
than the given output, leaves an element unwritten, produces NaN/Inf where the
oracle is finite, or misses the budget anywhere.

``verdict_for`` adds the cache: one verdict per (code identity, solution index,
problem key, environment), kept in memory and in the store.
"""
from __future__ import annotations

import math
import time
import zlib
from dataclasses import dataclass

import numpy as np

from arbiter import targets
from arbiter.candidates import Candidate, Fallback, params_id
from arbiter.keys import edge_shapes
from arbiter.oracles.budgets import Budget, budget_for
from arbiter.ops import op_kind
from arbiter.store import VerdictKey

# Edge probes cost at most this multiple of the real probe (or this many
# "work units": m*n*k for matmul, rows*cols for row ops), whichever is larger,
# so verifying a huge key stays bounded while small buckets are probed fully.
EDGE_COST_FACTOR = 4
EDGE_COST_FLOOR = 1 << 24


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reason: str  # "" when passed; otherwise what failed, at which probe
    rel_error: float  # worst relative Frobenius error over the probes (nan when none was computed)
    max_excess: float  # worst elementwise |y-ref| / allowed (<= 1 passes)
    probes: tuple[str, ...]  # the shapes probed, e.g. ("63x65x17", "33x33x17", "64x128x32")
    budget: Budget
    looser_budget: bool  # the candidate declared a budget looser than the published one
    seconds: float

    def __str__(self):
        if self.passed:
            return f"pass (rel {self.rel_error:.2e})"
        return f"FAIL {self.reason}"


def budget_of(candidate: Candidate, op: str, dtype: str) -> tuple[Budget, bool]:
    default = budget_for(op, dtype)
    c = candidate.contract
    if c is not None and c.accuracy == "bounded":
        declared = Budget(c.rel_fro, c.atol, c.rtol)
        return declared, declared.looser_than(default)
    return default, False


def _cost(dims: dict) -> int:
    return math.prod(max(v, 1) for v in dims.values())


def probe_shapes(region) -> list[dict]:
    """The real shape, then the bucket's edge shapes that differ from it and fit the cost cap."""
    shapes = [dict(region.dims)]
    cap = max(EDGE_COST_FACTOR * _cost(region.dims), EDGE_COST_FLOOR)
    for edge in edge_shapes(region.key.bucket, region.bucket_policy):
        if edge not in shapes and _cost(edge) <= cap:
            shapes.append(edge)
    return shapes


def _seed(candidate: Candidate, params: dict, region) -> int:
    return zlib.crc32(f"{candidate.identity()}|{params_id(params)}|{region.key.id}".encode())


def compare(y: np.ndarray, ref: np.ndarray, budget: Budget) -> tuple[str, float, float]:
    """(failure reason or "", relative Frobenius error, worst elementwise excess)."""
    if y.shape != ref.shape:
        return f"output shape {y.shape} should be {ref.shape}", math.nan, math.inf
    finite_ref = np.isfinite(ref)
    bad = ~np.isfinite(y) & finite_ref
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        what = "NaN (unwritten or computed)" if np.isnan(y[idx]) else "Inf"
        return f"{int(bad.sum())} element(s) {what} where the oracle is finite, first at {idx}", math.nan, math.inf
    mismatch = finite_ref != np.isfinite(y)
    if mismatch.any() or (~finite_ref & (y != ref) & ~(np.isnan(y) & np.isnan(ref))).any():
        return "non-finite elements differ from the oracle's", math.nan, math.inf
    yf, rf = y[finite_ref], ref[finite_ref]
    if rf.size == 0:  # nothing finite to compare (an empty output, or all non-finite and matching)
        return "", 0.0, 0.0
    diff = np.abs(yf - rf)
    ref_norm = float(np.linalg.norm(rf))
    rel = float(np.linalg.norm(diff)) / ref_norm if ref_norm > 0 else float(np.linalg.norm(diff))
    rms = ref_norm / math.sqrt(rf.size) if rf.size else 0.0
    allowed = budget.atol * max(rms, np.finfo(np.float64).tiny) + budget.rtol * np.abs(rf)
    excess = diff / allowed
    worst = float(excess.max())
    if worst > 1.0:  # name the worst element first: it says where a kernel went wrong
        full = np.zeros(ref.shape, dtype=np.float64)
        full[finite_ref] = excess
        idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(full)), ref.shape))
        return (f"element {idx} is {y[idx]:.6g}, oracle {ref[idx]:.6g} "
                f"({worst:.3g}x the elementwise budget; relative error {rel:.2e})"), rel, worst
    if rel > budget.rel_fro:
        return f"relative error {rel:.3e} over budget {budget.rel_fro:.0e}", rel, worst
    return "", rel, worst


def verify(candidate: Candidate, params: dict, region) -> Verdict:
    """Run the F4 gate for one solution (candidate + params) at ``region``'s key."""
    start = time.perf_counter()
    budget, looser = budget_of(candidate, region.op, region.dtype)
    oracle = op_kind(region.op).oracle
    target = targets.get(region.target)
    rng = np.random.default_rng(_seed(candidate, params, region))
    worst_rel, worst_excess, probed = 0.0, 0.0, []

    def verdict(reason=""):
        return Verdict(not reason, reason, worst_rel if probed else math.nan, worst_excess, tuple(probed),
                       budget, looser, time.perf_counter() - start)

    for dims in probe_shapes(region):
        probe = region.resized(dims, rng)
        label = "x".join(str(v) for v in dims.values())
        probed.append(label)
        applies = candidate.applies_to(probe)
        if applies is not True:
            # It accepted the real shape but not this edge of the bucket: it cannot serve the bucket.
            return verdict(f"at {label}: does not apply to the bucket's edge ({applies or 'declined'})")
        out = target.full(probe.output_shape(), np.nan, probe.out_dtype)  # poison
        try:
            result = candidate.run(probe.with_out(out), params)
            target.synchronize()
        except Exception as exc:  # any failure of the candidate is its verdict, never ours
            return verdict(f"at {label}: raised {type(exc).__name__}: {exc}")
        if isinstance(result, Fallback):
            return verdict(f"at {label}: declined ({result.reason}); a decliner may not win")
        if result is not out:
            return verdict(f"at {label}: returned a new array instead of writing the given output")
        y = np.asarray(target.to_host(out))
        y = y.astype(np.complex128 if np.iscomplexobj(y) else np.float64)  # complex outputs stay complex
        reason, rel, excess = compare(y, oracle(probe), budget)
        worst_rel = max(worst_rel, rel) if not math.isnan(rel) else rel
        worst_excess = max(worst_excess, excess)
        if reason:
            return verdict(f"at {label}: {reason}")
    return verdict()


def verdict_for(candidate: Candidate, params: dict, region, store, env, verifier=None) -> tuple[Verdict, bool]:
    """The cached verdict, or a new one (saved). Returns (verdict, was_computed_now).

    ``verifier`` replaces ``verify`` (e.g. ``arbiter.isolate.Isolated().verify``).
    """
    vkey = VerdictKey(candidate.identity(), params_id(params), region.key.id, env.fingerprint)
    found = store.load_verdict(vkey)
    if found is not None:
        return found, False
    found = (verifier or verify)(candidate, params, region)
    store.save_verdict(vkey, found, candidate)
    return found, True
