"""Dispatch: ``run_arbitrated`` and the hit counters.

The hot path (a warm key) is: the region's precomputed key, one dict lookup,
one call of the winner, one counter increment. No store, no logging, no
validation framework. Everything else (a miss) goes through ``_miss``, which
applies the miss policy:

* ``tier`` (default): serve a stored solution if one is valid here, else verify
  and choose by tier priority, and remember the choice;
* ``tune``: measure every passing solution now and persist the winner;
* ``record``: serve as ``tier``, and record the key for later offline tuning;
* ``strict``: serve only stored solutions; raise ``StrictMissError`` otherwise.

The policy comes from the ``policy=`` argument, else ``configure(policy=...)``,
else the ``ARBITER_POLICY`` environment variable, else ``tier``.
"""
from __future__ import annotations

import os
import threading

from arbiter import env as envmod
from arbiter import select
from arbiter.candidates import REGISTRY, Fallback, params_id
from arbiter.errors import RegionError, StrictMissError
from arbiter.ladder import nearest_winners
from arbiter.store import CountDelta, SolutionRecord

POLICIES = ("tier", "tune", "record", "strict")


class Route:
    """A key's installed solution and its counters (hits, misses, fallbacks)."""

    __slots__ = ("key", "candidate", "params", "run", "policy", "hits", "misses", "fallbacks",
                 "flushed", "env")

    def __init__(self, key, candidate, params, policy, env):
        self.key, self.candidate, self.params, self.policy, self.env = key, candidate, params, policy, env
        self.run = candidate.run
        self.hits = self.misses = self.fallbacks = 0
        self.flushed = (0, 0, 0)

    @property
    def label(self):
        p = params_id(self.params)
        return self.candidate.name if p == "{}" else f"{self.candidate.name}{p}"


class _State:
    def __init__(self):
        self.table: dict[str, Route] = {}  # key id -> installed route (the hot path reads only this)
        self.routes: dict[tuple[str, str, str], Route] = {}  # (key id, name, params) -> route, ever used
        self.lock = threading.RLock()
        self.policy: str | None = None
        self.store = None
        self.verified = 0  # verdicts computed in this process (0 on a warm registry)


_state = _State()
_table = _state.table


def _on_registry_change():
    _table.clear()  # candidates changed: every key decides again on its next call


REGISTRY.listeners.append(_on_registry_change)


def store():
    """The active store (a MemoryStore until ``configure(store=...)`` or ``arbiter.registry`` opens one)."""
    if _state.store is None:
        with _state.lock:
            if _state.store is None:
                from arbiter.store import default_store

                _state.store = default_store()
    return _state.store


def configure(*, store=None, policy: str | None = None) -> None:
    """Set the process's store and/or default miss policy; clears the dispatch table."""
    if policy is not None and policy not in POLICIES:
        raise ValueError(f"policy: {policy!r} is not one of {', '.join(POLICIES)}")
    with _state.lock:
        if store is not None:
            flush()
            _state.store = store
            _table.clear()
            _state.routes.clear()
        if policy is not None:
            _state.policy = policy


def default_policy() -> str:
    policy = _state.policy or os.environ.get("ARBITER_POLICY") or "tier"
    if policy not in POLICIES:
        raise ValueError(f"ARBITER_POLICY: {policy!r} is not one of {', '.join(POLICIES)}")
    return policy


# --- the hot path -----------------------------------------------------------
def run_arbitrated(op: str, region, *, policy: str | None = None):
    """Compute ``region`` with the winning solution for its problem key.

    Raises RegionError when ``op`` does not match the region, NoCandidateError when no
    candidate may serve the key, StrictMissError on an unseen key under policy ``strict``.
    """
    if op != region.op:
        raise RegionError("op", f"{op!r} does not match the region's op {region.op!r}")
    route = _table.get(region.key.id)
    if route is None:
        route = _miss(region, policy)
    else:
        route.hits += 1
    result = route.run(region, route.params) if region.torch_in is None else \
        _run_for_torch(route.candidate, route.params, region)
    if type(result) is Fallback:  # the winner declined this instance: count it, serve its stand-in
        route.fallbacks += 1
        result = result.result
    return result if region.back is None else region.for_caller(result)


def serve(candidate, params, region):
    """Exactly what ``run_arbitrated`` executes for ``region`` once its solution is known (output
    allocation, stream choice, the wrapper, the conversion back to the caller's array type): the
    timing engine times this, so what is measured is what a caller runs."""
    result = candidate.run(region, params) if region.torch_in is None else _run_for_torch(candidate, params, region)
    if type(result) is Fallback:
        result = result.result
    return result if region.back is None else region.for_caller(result)


def _run_for_torch(candidate, params, region):
    """A torch caller's call: torch candidates run as they are (on torch's current stream, on the
    caller's tensors); any other kernel gets CuPy views of the tensors and runs on torch's current
    stream too, so it stays in order with the caller's torch work."""
    if getattr(candidate, "torch_native", False):
        return candidate.run(region, params)
    from arbiter.targets.nvidia import torch_stream

    views = region.cupy_views()
    stream = torch_stream()
    if stream is None:
        result = candidate.run(views, params)
    else:
        with stream:
            result = candidate.run(views, params)
    region.torch_out = views.torch_out  # the torch tensor behind a new output, handed to the caller
    return result


# --- bound handles (hot loops) -----------------------------------------------
class Bound:
    """A region's problem fixed once: calling it with operands of the same shape, dtype, strides and
    device skips region validation (one signature check per operand) and dispatches as
    ``run_arbitrated`` does. Operands that differ are refused with a RegionError naming the argument."""

    __slots__ = ("op", "template", "names", "sigs", "policy", "slots")

    def __init__(self, op, template, names, operands, policy):
        self.op, self.template, self.names, self.policy = op, template, names, policy
        self.slots = tuple(s for cls in type(template).__mro__ for s in getattr(cls, "__slots__", ())
                           if hasattr(template, s))
        self.sigs = tuple(_signature(a) for a in operands)

    def __call__(self, *operands):
        names, sigs = self.names, self.sigs
        if len(operands) != len(names):
            raise RegionError("operands", f"expected {len(names)} ({', '.join(names)}), got {len(operands)}")
        template = self.template
        region = object.__new__(type(template))
        for slot in self.slots:
            setattr(region, slot, getattr(template, slot))
        if region.torch_in is not None:
            region.torch_in = dict(region.torch_in)  # this call's tensors, not the template's
        for name, array, sig in zip(names, operands, sigs):
            got = _signature(array)
            if got != sig:
                raise RegionError(name, _differs(got, sig))
            if got[0].__module__.startswith("torch"):  # its native view (and, for a torch caller, the tensor itself) for this call
                setattr(region, name, region._adopt(name, array, region.target)[1])
            else:
                setattr(region, name, array)
        region.torch_out = None
        route = _table.get(region.key.id)
        if route is None:
            route = _miss(region, self.policy)
        else:
            route.hits += 1
        result = route.run(region, route.params) if region.torch_in is None else \
            _run_for_torch(route.candidate, route.params, region)
        if type(result) is Fallback:
            route.fallbacks += 1
            result = result.result
        return result if region.back is None else region.for_caller(result)


def _signature(array) -> tuple:
    """(array type, shape, dtype, strides, device) of an operand: what a bound handle must see again.

    Cheap on purpose (a bound call checks every operand): CuPy's device is its pointer's device id,
    torch's strides are in elements."""
    kind = type(array)
    if kind.__module__.startswith("torch"):
        return (kind, array.shape, array.dtype, array.stride(), array.device)
    if kind.__module__.startswith("cupy"):
        return (kind, array.shape, array.dtype, array.strides, array.data.device_id)
    return (kind, getattr(array, "shape", None), getattr(array, "dtype", None), getattr(array, "strides", None),
            None)


def _differs(got, want) -> str:
    fields = ("array type", "shape", "dtype", "strides", "device")
    for field, g, w in zip(fields, got, want):
        if g != w:
            if field == "array type":
                g, w = f"{g.__module__}.{g.__name__}", f"{w.__module__}.{w.__name__}"
            return f"{field} {g} differs from the bound operand's {w}; bind again for a new problem"
    return "differs from the bound operand; bind again for a new problem"


def bind(op: str, *operands, policy: str | None = None, **attrs) -> Bound:
    """A handle for hot loops: ``f = bind("rmsnorm", x, w, eps=1e-6)``, then ``f(x2, w2)``.

    The region is validated once, here; each call then only checks that every operand has the bound
    shape, dtype, strides and device (a RegionError naming the argument otherwise) and dispatches like
    ``run_arbitrated`` (same route, counters and policy). Array keyword operands (``bias=``,
    ``residual=``) are bound too and passed positionally after the others, in the constructor's order.
    Pointwise chains (operands inside ``ops``) and ``out=`` are not bindable.
    """
    import inspect

    from arbiter.ops import op_kind

    kind = op_kind(op)
    if op == "pointwise":
        raise RegionError("op", "pointwise chains carry operands inside ops; call run_arbitrated with a "
                                "Pointwise region instead of bind")
    if "out" in attrs:
        raise RegionError("out", "a bound handle allocates each output; call run_arbitrated for out=")
    region = kind.region_type(*operands, **attrs)
    params = [p.name for p in inspect.signature(kind.region_type.__init__).parameters.values()][1:]
    keywords = tuple(n for n in params[len(operands):]
                     if n in attrs and attrs[n] is not None and hasattr(attrs[n], "shape"))
    return Bound(op, region, tuple(params[:len(operands)]) + keywords,
                 tuple(operands) + tuple(attrs[n] for n in keywords), policy)


# --- misses -----------------------------------------------------------------
def _install(decision_key, candidate, params, policy, env, counter: str | None) -> Route:
    ident = (decision_key.id, candidate.name, params_id(params))
    with _state.lock:
        route = _state.routes.get(ident)
        if route is None or route.candidate is not candidate:
            route = _state.routes[ident] = Route(decision_key, candidate, params, policy, env)
        route.policy = policy
        if counter is not None:
            setattr(route, counter, getattr(route, counter) + 1)
        _table[decision_key.id] = route
    return route


def _stored(region, st, env):
    """The stored solution for this key if it can be served here, and why not otherwise."""
    record = st.load_solution(region.key.id, env.fingerprint)
    if record is None:
        return None, None
    cand = REGISTRY.get(record.candidate, region.target, region.op)
    if cand is None:
        return None, f"stored winner {record.candidate!r} is no longer registered"
    if cand.available() is not True:
        return None, f"stored winner {record.candidate!r} is unavailable"
    if cand.applies_to(region) is not True:
        return None, f"stored winner {record.candidate!r} does not apply to this instance"
    row = select.Row(cand, record.params)
    _state.verified += select.gate(row, region, st, env)  # verified once per identity and environment
    if row.status != "passed":
        return None, f"stored winner {record.candidate!r} fails the gate now: {row.reason}"
    return (cand, record), None


def _miss(region, policy):
    policy = policy or default_policy()
    if policy not in POLICIES:
        raise ValueError(f"policy: {policy!r} is not one of {', '.join(POLICIES)}")
    st = store()
    env = envmod.environment(region.target)
    found, why_not = _stored(region, st, env)
    if found is not None:
        cand, record = found
        return _install(region.key, cand, record.params, record.policy, env, "misses")
    if policy == "strict":
        raise StrictMissError(region.key)
    if policy == "tune":
        from arbiter.tune import tune_region

        decision = tune_region(region, st)
    else:
        decision = decide_and_store(region, st, prefer=nearest_winners(region, st, env))  # the bucket ladder
        if policy == "record":
            st.record_key(region.key.id, region.dims, env.fingerprint)
    _state.verified += decision.verified_now
    winner = decision.winner
    # A stored solution that could not be served makes this a fallback, not a plain miss.
    return _install(region.key, winner.candidate, winner.params, decision.policy, env,
                    "fallbacks" if why_not else "misses")


def decide_and_store(region, st, *, force=None, prefer=None, gate_all=False):
    decision = select.decide(region, st, force=force, prefer=prefer, gate_all=gate_all)
    w = decision.winner
    st.save_solution(SolutionRecord(region.key.id, w.candidate.name, w.candidate.identity(), w.params,
                                    decision.policy, decision.env.fingerprint, note=decision.note),
                     decision.env)
    return decision


def arbitrate(op: str, region, force: str | None = None):
    """Decide ``region``'s key now (every candidate gated) and install the winner for dispatch.

    ``force`` names the candidate to use; it still passes the gate. Returns the ``Decision``.
    """
    if op != region.op:
        raise RegionError("op", f"{op!r} does not match the region's op {region.op!r}")
    st = store()
    decision = decide_and_store(region, st, force=force, gate_all=True)
    _state.verified += decision.verified_now
    w = decision.winner
    _install(region.key, w.candidate, w.params, decision.policy, decision.env, None)  # not a dispatch yet
    return decision


# --- counters ---------------------------------------------------------------
def stats() -> list[dict]:
    """Hit counters per (problem key, solution) in this process, as plain data."""
    with _state.lock:
        return [
            {"key": r.key.id, "target": r.key.target, "op": r.key.op, "solution": r.label,
             "tier": r.candidate.tier.name, "policy": r.policy, "hits": r.hits, "misses": r.misses,
             "fallbacks": r.fallbacks, "installed": _table.get(r.key.id) is r}
            for r in _state.routes.values()
        ]


def verified_count() -> int:
    """Verdicts computed (not fetched from the store) by this process."""
    return _state.verified


def flush() -> None:
    """Write the counts gathered since the last flush to the store."""
    st = _state.store
    if st is None:
        return
    deltas = []
    with _state.lock:
        for r in _state.routes.values():
            now = (r.hits, r.misses, r.fallbacks)
            d = tuple(a - b for a, b in zip(now, r.flushed))
            if any(d):
                deltas.append(CountDelta(r.key.id, r.candidate.name, params_id(r.params), r.env.fingerprint, *d))
                r.flushed = now
    if deltas:
        st.add_counts(deltas)


def reset() -> None:
    """Forget every route and counter of this process (tests and benchmarks)."""
    with _state.lock:
        _table.clear()
        _state.routes.clear()
        _state.verified = 0
