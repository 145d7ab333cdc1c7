"""Dispatch: ``run_arbitrated`` and the hit counters.

The hot path (a warm key) is: the region's precomputed key, one dict lookup,
one call of the winner, one counter increment. No store, no logging, no
validation framework. Everything else (a miss) goes through ``_miss``, which
installs what ``arbiter.decide.decide`` decides under the miss policy:

* ``tier`` (default): serve a stored solution if one is valid here, else verify
  and choose by tier priority, and remember the choice (only where the key has
  no stored winner yet);
* ``tune``: measure every passing solution now and persist the winner;
* ``record``: serve as ``tier``, and record the key for later offline tuning;
* ``strict``: serve only stored solutions; raise ``StrictMissError`` otherwise.

A key whose stored winner this process cannot serve (an operand it does not
apply to, a plug-in not loaded here, a failed gate) is served by a stand-in
chosen by tier for this process only: the shared winner is never replaced by a
passer-by. The policy comes from the ``policy=`` argument, else ``configure(policy=...)``,
else the ``ARBITER_POLICY`` environment variable, else ``tier``.

Two switches, read on each miss (never on the hot path):

* ``ARBITER_DISABLE=1``: the arbiter is off. Every key serves its tier default (the first candidate in
  tier order that passes the gate, verdicts kept in memory), whatever the policy; the registry is
  neither read nor written, counters included (like ``PYTORCH_TUNABLEOP_ENABLED=0``).
* ``ARBITER_VERBOSE=1``: each decision is printed once to stderr, when its key is decided: the winner,
  how it was chosen, its margin, and the solutions that failed the gate (like
  ``TRITON_PRINT_AUTOTUNING``). The lines are INFO records of the ``logging`` logger ``"arbiter"``: a
  program that configures ``logging`` gets them without the switch; the switch adds a stderr handler.
"""
from __future__ import annotations

import functools
import inspect
import logging
import os
import sys
import threading

from arbiter import audit as _audit
from arbiter import regions, select, targets
from arbiter import request as _request
from arbiter import timing_audit as _timing_audit
from arbiter.candidates import REGISTRY, Fallback, run_for_torch
from arbiter.decide import DISABLED, POLICIES, decide, miss, set_tune_seconds, timing_mode
from arbiter.decide import MissPolicy as MissPolicy  # (defined with the requests; imported from here before)
from arbiter.errors import CaptureMissError, RegionError, UnwritableRegistry
from arbiter.ops import op_kind
from arbiter.region_memo import builder_for, operand_signature
from arbiter.solution import ChosenBy, Solution, TimingMode
from arbiter.store import CountDelta, MemoryStore, default_store, flusher


def _through_torch(candidate, region, params):
    """A non-native candidate's run on a torch caller's region (``Route.run_torch``)."""
    return run_for_torch(candidate, params, region)


class Route:
    """A key's installed solution, how it was chosen, and its counters: hits (served from the table), misses
    (the key decided here), loads (a stored solution installed), fallbacks (a stand-in served; see
    ``CountDelta``). ``candidate`` and ``params`` are the solution's, kept for the hot path."""

    __slots__ = ("key", "solution", "candidate", "params", "run", "run_torch", "native", "chosen_by", "hits",
                 "misses", "fallbacks", "loads", "flushed", "env", "capturable", "captured", "stands_in_for")

    def __init__(self, key, candidate, solution: Solution, chosen_by: ChosenBy, env):
        self.key, self.candidate, self.solution, self.chosen_by, self.env = key, candidate, solution, chosen_by, env
        self.params = solution.params
        self.run = candidate.run
        # Under CUDA-graph capture a route that cannot be captured hands over to ``captured``: the best
        # capturable solution of its key, prepared outside the capture (``_prepare_capture``); None until then.
        self.capturable = bool(getattr(candidate, "capturable", True))
        self.captured: Route | None = self if self.capturable else None
        self.stands_in_for: Route | None = None  # set on a capture stand-in: the winner it replaces
        # A torch caller's call (region.torch_in set): a torch-native candidate runs as it is, any other
        # through run_for_torch (CuPy views, torch's stream). Chosen here, once, not on every call.
        self.native = bool(getattr(candidate, "torch_native", False))
        self.run_torch = candidate.run if self.native else functools.partial(_through_torch, candidate)
        self.hits = self.misses = self.fallbacks = self.loads = 0
        self.flushed = (0, 0, 0, 0)

    def counts(self) -> tuple[int, int, int, int]:
        return self.hits, self.misses, self.fallbacks, self.loads

    @property
    def label(self) -> str:
        return self.solution.label


class _State:
    def __init__(self):
        self.table: dict[str, Route] = {}  # key id -> installed route (the hot path reads only this)
        # The same for torch callers: their winner is decided on their own tensors and tier order (a solution
        # without DLPack conversions first), apart from a CuPy caller's of the same key (issue 26 item 3).
        self.torch_table: dict[str, Route] = {}
        self.for_capture = 0  # > 0 while arbiter.capture warms up and records (``deciding_for_capture``)
        self.routes: dict[tuple[str, Solution], Route] = {}  # (key id, solution) -> route, ever used
        self.lock = threading.RLock()
        self.policy: str | None = None  # the default miss policy (configure(policy=...))
        self.store = None
        self.verified = 0  # verdicts computed in this process (0 on a warm registry)
        self.scratch = None  # verdicts while ARBITER_DISABLE is set: a MemoryStore, never the registry


_state = _State()
_table = _state.table
_torch_table = _state.torch_table


def _on_registry_change():
    _table.clear()  # candidates changed: every key decides again on its next call
    _torch_table.clear()


REGISTRY.listeners.append(_on_registry_change)


def store():
    """The active store (a MemoryStore until ``configure(store=...)`` or ``arbiter.registry`` opens one)."""
    if _state.store is None:
        with _state.lock:
            if _state.store is None:
                _use_store(default_store())
    return _state.store


def _use_store(st) -> None:
    """Make ``st`` the process's store; counts dispatched into one that persists are flushed in the background
    (``arbiter.store.flusher``: the store sits below dispatch, so dispatch starts it with its own ``flush``)."""
    _state.store = st
    if getattr(st, "persistent", False):
        flusher.start(flush, pending=pending_counts, close=_close_for_signal)


def configure(*, store=None, policy: str | None = None, looser_accuracy: bool | None = None,
              audit: float | None = None, tune_seconds: float | None = None,
              timing_audit: float | None = None, first_calls: str | None = None) -> None:
    """Set the process's store and/or default miss policy; clears the dispatch table.

    ``tune_seconds``: the budget of one key that policy tune decides on a miss, for its gate (no new solution
    gated after it once two have passed; breadth first, every candidate's default before other parameter sets)
    and again for its timing (split over the passing solutions); else ``ARBITER_TUNE_SECONDS``; unset: every
    solution gated, then timed up to a second per solution and timing mode.

    ``audit=rate`` (0 to 1): re-check that fraction of real calls against the oracle in the background and
    demote a solution that fails (``arbiter.audit``; else ``ARBITER_AUDIT``); 0 spends nothing.

    ``first_calls``: how the first call of each exact shape new to the process is checked against the oracle:
    ``"background"`` (the default: served at once, checked on the audit thread, a failure demotes the solution
    for its key), ``"before"`` (checked before the result is returned; a failure serves the next solution),
    ``"off"``; else ``ARBITER_FIRST_CALLS``.

    ``timing_audit=rate`` (0 to 1): time that fraction of a measured winner's real calls, and re-decide its key on
    the program's own calls when it runs clearly slower than measured (``arbiter.timing_audit``; else
    ``ARBITER_TIMING_AUDIT``); 0 spends nothing.

    ``looser_accuracy=True``: consent, for every region built from now on, to candidates that declare
    accuracy looser than the op's budget; the consent is part of those regions' problem keys
    (``accuracy=looser``). Per region: ``region.allow_looser()``.
    """
    if policy is not None and policy not in POLICIES:
        raise ValueError(f"policy: {policy!r} is not one of {', '.join(POLICIES)}")
    if looser_accuracy is not None:
        if not isinstance(looser_accuracy, bool):
            raise ValueError(f"looser_accuracy: must be True or False, got {looser_accuracy!r}")
        regions.consent_to_looser(looser_accuracy)
    if tune_seconds is not None:
        set_tune_seconds(tune_seconds)
    if timing_audit is not None:
        _timing_audit.configure(timing_audit)
    if first_calls is not None:
        _audit.configure_first_calls(first_calls)
    if audit is not None or timing_audit is not None or first_calls is not None:
        if audit is not None:
            _audit.configure(audit)
        _table.clear()  # every route is armed again, at the new rate, on its next miss
        _torch_table.clear()
    with _state.lock:
        if store is not None:
            flush()
            _use_store(store)
            _table.clear()
            _torch_table.clear()
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
    try:
        region_op = region.op
    except AttributeError:  # not a region (None, an array): said here rather than as an AttributeError
        raise RegionError("region", _not_a_region(op, region)) from None
    if op != region_op:
        raise RegionError("op", f"{op!r} does not match the region's op {region_op!r}")
    torch_in = region.torch_in
    # a torch caller (its results go back as tensors: ``region.back``) has its own table, CPU tensors included
    route = (_table if torch_in is None and region.back is None else _torch_table).get(region.key.id)
    if route is None:
        route = _miss(region, policy)
    else:
        if not route.capturable:  # a winner that cannot be recorded into a CUDA graph
            route = _uncapturable(route, region)
        route.hits += 1
    if torch_in is None:
        result = route.run(region, route.params)
    else:
        result = route.run_torch(region, route.params)
        if (route.native and region.out is None and region.torch_out is None and region.nd_shape is None
                and type(result) is not Fallback):
            # a torch-native candidate's own tensor (no output allocated through the region, no out=): already
            # the caller's type, for_caller's answer too
            return result
    if type(result) is Fallback:  # the winner declined this instance: count it, serve its stand-in
        route.fallbacks += 1
        result = result.result
    if region.back is not None:
        result = region.for_caller(result)
    return result if region.nd_shape is None else result.reshape(region.nd_shape)


def _not_a_region(op: str, region) -> str:
    from arbiter.ops import OPS

    kind = OPS.get(op)
    build = (f"arbiter.regions.{kind.region_type.__name__}(...) for op {op!r}" if kind is not None else
             f"the region type of op {op!r} (known ops: {', '.join(sorted(OPS))})")
    return f"a {type(region).__name__} is not a region; build one from the operands with {build}"


# --- bound handles (hot loops) -----------------------------------------------
class Bound:
    """A region's problem fixed once: calling it with operands of the same shape, dtype, strides and
    device skips region validation (one signature check per operand, then the region memo's recorded
    build, ``arbiter.region_memo``) and dispatches as ``run_arbitrated`` does. Operands that differ are
    refused with a RegionError naming the argument."""

    __slots__ = ("op", "cls", "names", "sigs", "policy", "build", "slots", "values", "npos", "attrs")

    def __init__(self, op, cls, names, operands, npos, attrs, policy):
        self.op, self.cls, self.names, self.npos, self.attrs, self.policy = op, cls, names, npos, attrs, policy
        positional = tuple(operands[:npos])
        cls(*positional, **attrs)  # validated here (and its recipe recorded)
        self.build = builder_for(cls, positional, attrs)
        self.sigs = tuple(_signature(a) for a in operands)
        # Where each operand sits in the memo's argument values: positional ones first, then keyword values in
        # ``attrs``' order. The recorded build reads only those positions; the rest stays None.
        order = list(attrs)
        self.slots = tuple(range(npos)) + tuple(npos + order.index(n) for n in names[npos:])
        self.values = [None] * (npos + len(order))

    def __call__(self, *operands):
        names, sigs = self.names, self.sigs
        if len(operands) != len(names):
            raise RegionError("operands", f"expected {len(names)} ({', '.join(names)}), got {len(operands)}")
        for name, array, sig in zip(names, operands, sigs):
            got = _signature(array)
            if got != sig:
                raise RegionError(name, _differs(got, sig))
        if self.build is not None:
            values = self.values.copy()
            for slot, array in zip(self.slots, operands):
                values[slot] = array
            region = self.build(values)
        else:  # a signature the memo does not rebuild (a torch tensor among CuPy arrays): the full path
            npos = self.npos
            region = self.cls(*operands[:npos], **{**self.attrs, **dict(zip(self.names[npos:], operands[npos:]))})
        return run_arbitrated(self.op, region, policy=self.policy)


def _signature(array) -> tuple:
    """(array type, shape, dtype, strides, device) of an operand: what a bound handle must see again
    (``region_memo.operand_signature``; for another type, whichever of the four it has)."""
    found = operand_signature(array)
    if found is not None:
        return found
    return (type(array), getattr(array, "shape", None), getattr(array, "dtype", None),
            getattr(array, "strides", None), None)


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
    kind = op_kind(op)
    if op == "pointwise":
        raise RegionError("op", "pointwise chains carry operands inside ops; call run_arbitrated with a "
                                "Pointwise region instead of bind")
    if "out" in attrs:
        raise RegionError("out", "a bound handle allocates each output; call run_arbitrated for out=")
    params = [p.name for p in inspect.signature(kind.region_type.__init__).parameters.values()][1:]
    keywords = tuple(n for n in params[len(operands):]
                     if n in attrs and attrs[n] is not None and hasattr(attrs[n], "shape"))
    return Bound(op, kind.region_type, tuple(params[:len(operands)]) + keywords,
                 tuple(operands) + tuple(attrs[n] for n in keywords), len(operands), attrs, policy)


# --- misses -----------------------------------------------------------------
def _route_for(decision_key, candidate, params, chosen_by: ChosenBy, env) -> Route:
    solution = Solution(candidate.name, params)
    ident = (decision_key.id, solution)
    with _state.lock:
        route = _state.routes.get(ident)
        if route is None or route.candidate is not candidate:
            route = _state.routes[ident] = Route(decision_key, candidate, solution, chosen_by, env)
        route.chosen_by = chosen_by
    return route


def _install(decision_key, candidate, params, chosen_by: ChosenBy, env, counter: str | None, region=None,
             decision=None) -> Route:
    """Install a solution for ``decision_key`` (in the torch callers' table when ``region`` is a torch
    caller's). A winner that cannot be captured gets its capturable stand-in prepared now, where a capture
    may follow (``_prepare_capture``; ``decision``: the rows it may pick from)."""
    route = _route_for(decision_key, candidate, params, chosen_by, env)
    with _state.lock:
        if counter is not None:
            setattr(route, counter, getattr(route, counter) + 1)
        torch_caller = region is not None and region.torch_caller
        table = _torch_table if torch_caller else _table
        _audit.arm(route, table, store, _served_again)  # the audit's wrapper (first calls checked at rate 0)
        _timing_audit.arm(route, table, store)  # the timing audit's wrapper around that, or nothing at rate 0
        if not _closed:  # ending by a signal: the next call must miss (and wait), not count after the flush
            table[decision_key.id] = route
    if region is not None and not route.capturable and route.captured is None and _may_capture(region):
        _prepare_capture(route, region, decision)
    return route


def _served_again(region):
    """The raw result of ``region``'s key after its route was demoted (a first call checked before serving
    failed): the miss decides again, without the demoted solution."""
    route = _miss(region, None)
    result = route.run(region, route.params)  # (a torch caller's CUDA call, route.run_torch, is not checked)
    return result.result if type(result) is Fallback else result


# --- CUDA-graph capture -------------------------------------------------------
def _may_capture(region) -> bool:
    """Whether a capture of this key can follow: a CUDA graph needs torch (``arbiter.capture`` and
    ``torch.cuda.graph`` alike), so a process that has not imported it never prepares stand-ins."""
    return targets.get(region.target).captures_graphs and ("torch" in sys.modules or _state.for_capture > 0)


def _prepare_capture(route: Route, region, decision=None) -> None:
    """Set ``route.captured``: the solution that serves ``route``'s key under capture in its place. From a
    tuned ``decision``, the fastest capturable solution it timed (device time under ``arbiter.capture``);
    otherwise the first capturable one in tier order that passes the gate. Runs outside any capture (the
    gate synchronises the device); a key without a capturable solution keeps None (``_capture_route``
    then says so by name)."""
    pick = None
    rows = decision.rows if decision is not None else ()
    timed = [r for r in rows if r.status == select.Status.PASSED and r.timing is not None
             and getattr(r.candidate, "capturable", True)]
    if timed:
        pick = min(timed, key=lambda r: (r.timing.screened, r.timing.median_s))
        chosen_by, env = ChosenBy.MEASURED, decision.env
    else:
        from arbiter.errors import NoCandidateError

        # ARBITER_DISABLE's routes keep their verdicts in memory: the registry is not opened for them either.
        disabled = route.chosen_by == ChosenBy.DISABLED  # its counts are never flushed either
        st = _state.scratch if disabled and _state.scratch is not None else store()
        try:
            found = decide(region, _request.capture_standin(disabled), st)
        except NoCandidateError:
            return
        _state.verified += found.verified_now
        pick, chosen_by, env = found.winner, found.chosen_by, found.env
    # Listed by stats() from its first call under capture (``_capture_route``), not before: a stand-in that
    # never serves is no route of this process. An existing route (another caller's winner) is reused as is.
    solution = Solution(pick.candidate.name, pick.params)
    standin = _state.routes.get((region.key.id, solution))
    if standin is None or standin.candidate is not pick.candidate:
        standin = Route(region.key, pick.candidate, solution, chosen_by, env)
        standin.stands_in_for = route
    route.captured = standin


def _uncapturable(route: Route, region) -> Route:
    """What serves a call whose winner cannot be captured: its capturable stand-in while the stream is being
    captured; the winner otherwise (its stand-in prepared first inside ``deciding_for_capture``)."""
    if targets.get(region.target).capturing():
        return _capture_route(route, region)
    if route.captured is None and _state.for_capture > 0:
        _prepare_capture(route, region)
    return route


def _capture_route(route: Route, region) -> Route:
    """Under capture: ``route``'s capturable stand-in, or a CaptureMissError naming the key and the winner."""
    standin = route.captured
    if standin is None:
        raise CaptureMissError(region.key, f"its winner {route.label} cannot be captured and no capturable "
                                           "solution was prepared for it: run the sequence once under "
                                           "arbiter.capture (or with torch imported) before capturing")
    if standin.hits == 0 and standin.stands_in_for is not None:  # its first call: listed from now on
        with _state.lock:
            _state.routes.setdefault((standin.key.id, standin.solution), standin)
    return standin


def _switch(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


log = logging.getLogger("arbiter")


class _VerboseHandler(logging.StreamHandler):
    """ARBITER_VERBOSE's stderr handler: silent while the program's own logging configuration has a handler that
    the record reaches as well (``logging.basicConfig()``), so a decision is printed once, not twice."""

    def emit(self, record):
        node: logging.Logger | None = log
        while node is not None and node.propagate and node.parent is not None:
            node = node.parent
            if node.handlers:
                return
        super().emit(record)


def _verbose() -> bool:
    """Whether decisions are announced: ARBITER_VERBOSE (which then adds a stderr handler to the "arbiter"
    logger, once), or a logging configuration that lets the logger's INFO records through."""
    if _switch("ARBITER_VERBOSE"):
        if not any(isinstance(h, _VerboseHandler) for h in log.handlers):
            handler = _VerboseHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(message)s"))
            log.addHandler(handler)
            if log.level == logging.NOTSET or log.level > logging.INFO:
                log.setLevel(logging.INFO)
        return True
    return log.isEnabledFor(logging.INFO)


def _announce(route, how: str, decision=None) -> None:
    """One INFO record per decision on the "arbiter" logger (and a line per solution that failed the gate)."""
    lines = [f"arbiter: {route.key.id} -> {route.label} ({how})"]
    for row in decision.rows if decision is not None else ():
        if row.status == select.Status.FAILED:
            lines.append(f"arbiter:   failed the gate: {row.label}: {row.reason}")
    log.info("\n".join(lines))


def _miss(region, policy):
    """Decide ``region``'s key (``arbiter.decide``: every policy's rules) and install the decision."""
    if _closed:  # the process is ending by a signal: its last flush is under way (store/flusher.py)
        flusher.wait_for_end()
    policy = policy or default_policy()
    if policy not in POLICIES:
        raise ValueError(f"policy: {policy!r} is not one of {', '.join(POLICIES)}")
    if targets.get(region.target).capturing():  # deciding synchronises the device: impossible in a graph
        raise CaptureMissError(region.key)
    if _switch("ARBITER_DISABLE"):  # the tier default, verdicts in memory: the registry is never opened
        with _state.lock:
            if _state.scratch is None:
                _state.scratch = MemoryStore()
        policy, st = DISABLED, _state.scratch
    else:
        st = store()
    request = miss(policy, capture=_state.for_capture > 0)
    try:
        decision = decide(region, request, st)
    except UnwritableRegistry as exc:  # its disk filled up (or it became read-only) since it was opened
        from arbiter.store.layered import serve_from_memory  # SQLAlchemy: only once a registry refused a write

        with _state.lock:
            fallback = None if _state.store is None else serve_from_memory(_state.store, exc)
            if fallback is None:
                raise
            _use_store(fallback)
        decision = decide(region, request, fallback)
    _state.verified += decision.verified_now
    w = decision.winner
    route = _install(region.key, w.candidate, w.params, decision.chosen_by, decision.env, decision.counter,
                     region, decision)
    if _verbose():
        _announce(route, _how(decision), decision)
    return route


def _how(decision) -> str:
    """How a miss's solution was chosen, in words (the verbose line)."""
    if decision.chosen_by == ChosenBy.DISABLED:
        return "ARBITER_DISABLE: tier default, registry not used"
    margin = "" if decision.margin is None else f", margin {decision.margin * 100:+.1f}%"
    note = f": {decision.note}" if decision.note else ""
    if decision.counter == "loads":
        return f"stored, {decision.chosen_by}{margin}{note}"
    return f"decided now, {decision.chosen_by}{margin}{note}" + (f"; {decision.why_not}" if decision.why_not else "")


def tune_mode(region) -> TimingMode:
    """The timing mode a miss under policy tune decides ``region``'s key by (``decide.timing_mode``: the mode the
    caller runs in, DESIGN.md contract 3)."""
    return timing_mode(targets.get(region.target), _state.for_capture > 0)


def arbitrate(op: str, region, force: str | None = None):
    """Decide ``region``'s key now (every candidate gated) and install the winner for dispatch.

    ``force`` names the candidate to use; it still passes the gate. Returns the ``Decision``.
    """
    if op != region.op:
        raise RegionError("op", f"{op!r} does not match the region's op {region.op!r}")
    decision = decide(region, _request.arbitrate(force), store())
    _state.verified += decision.verified_now
    w = decision.winner
    _install(region.key, w.candidate, w.params, decision.chosen_by, decision.env, None, region,
             decision)  # not a dispatch yet
    return decision


# --- counters ---------------------------------------------------------------
def stats() -> list[dict]:
    """Hit counters per (problem key, solution) in this process, as plain data."""
    with _state.lock:
        return [
            {"key": r.key.id, "target": r.key.target, "op": r.key.op, "solution": r.label,
             "tier": r.candidate.tier.name, "policy": str(r.chosen_by), "hits": r.hits, "loads": r.loads,
             "misses": r.misses, "fallbacks": r.fallbacks,
             "installed": _table.get(r.key.id) is r or _torch_table.get(r.key.id) is r,
             # a capture stand-in: the solution serving under CUDA-graph capture in place of this winner
             "capture_standin_for": r.stands_in_for.label if r.stands_in_for is not None else None}
            for r in _state.routes.values()
        ]


def route(key, *, torch_caller: bool = False) -> Route | None:
    """The route installed for ``key`` (a ``ProblemKey`` or its id) in this process: what its next
    ``run_arbitrated`` call serves (a torch caller's with ``torch_caller``); None while the key is undecided
    here."""
    return (_torch_table if torch_caller else _table).get(key if isinstance(key, str) else key.id)


class deciding_for_capture:
    """A block whose misses decide for CUDA-graph capture (``arbiter.capture``'s warm-up and recording):
    under policy tune device time decides, and a winner that cannot be captured gets its capturable stand-in
    prepared at once."""

    def __enter__(self):
        with _state.lock:
            _state.for_capture += 1
        return self

    def __exit__(self, *exc):
        with _state.lock:
            _state.for_capture -= 1


def verified_count() -> int:
    """Verdicts computed (not fetched from the store) by this process."""
    return _state.verified


_flush_lock = threading.Lock()  # one flush at a time: a second one would send the counts the first has in flight


def flush() -> None:
    """Write the counts gathered since the last flush to the store.

    A count is either in the registry or still pending in this process, never dropped: a route's counts are
    marked flushed only after the store committed them, so a flush that raises leaves them for the next one.
    """
    st = _state.store
    if st is None:
        return
    with flusher.deferring_signals(), _flush_lock:
        taken, deltas = [], []
        with _state.lock:
            for r in _state.routes.values():
                if r.chosen_by == ChosenBy.DISABLED:  # ARBITER_DISABLE: the registry is not written
                    continue
                now = r.counts()
                d = tuple(a - b for a, b in zip(now, r.flushed))
                if any(d):
                    taken.append((r, now))
                    deltas.append(CountDelta(r.key.id, r.solution.candidate_name, r.solution.params_id,
                                             r.env.fingerprint, *d))
        if not deltas:
            return
        st.add_counts(deltas)  # raises: nothing was marked, so every count stays pending
        with _state.lock:
            for r, now in taken:
                r.flushed = now  # counted since the snapshot stays pending for the next flush


def pending_counts() -> int:
    """How many counts of this process the registry has not committed yet."""
    routes = list(_state.routes.values())  # no lock: read by a process ending on a signal
    return sum(sum(r.counts()) - sum(r.flushed) for r in routes if r.chosen_by != ChosenBy.DISABLED)


_closed = False  # the process is ending by a signal: every call misses, and a miss waits for the end


def _close_for_signal() -> None:
    """Before the last flush of a process ending by a signal: later calls find no route, so they wait in
    ``_miss`` instead of counting after the flush's snapshot."""
    global _closed
    _closed = True
    _table.clear()
    _torch_table.clear()


def _after_fork_in_child() -> None:
    """A forked child inherits its parent's counters, which the parent flushes: it starts its own from zero.

    Locks another parent thread held at the fork would never be released in the child; they are made anew.
    """
    global _flush_lock, _closed
    _flush_lock = threading.Lock()
    _closed = False
    _state.lock = threading.RLock()
    for r in _state.routes.values():
        r.hits = r.misses = r.fallbacks = r.loads = 0
        r.flushed = (0, 0, 0, 0)


os.register_at_fork(after_in_child=_after_fork_in_child)


def reset() -> None:
    """Forget every route, counter and configured default policy and audit rate of this process, as a new process starts
    (tests and benchmarks); the store stays."""
    with _state.lock:
        _table.clear()
        _torch_table.clear()
        _state.routes.clear()
        _state.verified = 0
        _state.policy = None
        _audit.configure(None)
        _timing_audit.configure(None)
