"""The audit of real calls: what no synthetic probe can catch, the caller's own data can.

``arbiter.configure(audit=rate)`` (else ``ARBITER_AUDIT=rate``, else 0) re-checks a sampled fraction ``rate``
of the calls ``run_arbitrated`` serves against the op's float64 oracle, computed on the device where the target
has float64 there (``oracles.on_device``), in full where the gate would, else by the gate's large-shape check
(``compare_call``).

Cost. At rate 0 nothing is spent: a route runs its candidate's own ``run``, the hot path is unchanged. At a
rate r > 0, a route installed on a miss (``arm``) runs through a wrapper that counts its calls down to the
next sampled one (gaps drawn geometrically with mean 1/r when one is taken, so an unsampled call costs one
decrement and one compare). A sampled call copies its inputs before the run and its output after it (on a
device, then waits for those copies: the checker thread does not use the caller's stream); the comparison runs
on a background thread (``arbiter-audit``), off the hot path. At most ``QUEUE`` sampled calls
wait there; beyond, a sample is dropped (counted), never waited for, so memory stays bounded at ``QUEUE``
copies of one call's operands and output.

A mismatch fails the solution's verdict for the key (stored like the gate's, ``VerdictKey`` of the solution,
key and environment), with the real call's shape and reason (``AUDIT_PREFIX``); it is logged as a warning
(logger ``arbiter.audit``), and the route is taken out of the dispatch table, so the next call misses and is
served by the next solution that passes (the stored winner now fails its gate). ``arbiter stats``,
``arbiter explain`` and ``arbiter report`` show the failed verdict.

The budget of a real call is that of the value family its data belongs to (``OpKind.call_budget``: a layernorm
call by its rows' condition number, an attention call by a bound on its scores; every other op's families share
the op's budget), or the candidate's declared one. Beside the oracle, a sampled call is checked for what the call
itself shows: the calling thread's floating-point environment as it was before (``arbiter.fpenv``; a change is
put back at once), and, without ``out=``, an output that does not reuse the memory of the output the caller kept
from the previous sampled call (a pooled buffer). The first call of every exact shape a route serves is sampled
too. The checker thread computes the oracle under the default floating-point environment. A call that declined
(``Fallback``) is not audited: its stand-in served it. Torch callers' CUDA calls (``region.torch_in``,
``Route.run_torch``) and calls under ``ARBITER_DISABLE`` are not audited. At rate 0, the first call of each
signature new to the process is checked (``first_calls``).
"""
from __future__ import annotations

import atexit
import logging
import math
import os
import queue
import random
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from arbiter import fpenv, oracles, targets, verify
from arbiter.candidates import Fallback
from arbiter.ops import op_kind
from arbiter.oracles import array_module
from arbiter.oracles.budgets import Budget
from arbiter.solution import ChosenBy, Solution
from arbiter.store import Verdict, VerdictKey

AUDIT_PREFIX = "audit of a real call"  # how a verdict the audit failed starts its reason
QUEUE = 8  # sampled calls waiting for the background check, at most
log = logging.getLogger("arbiter.audit")

_configured: float | None = None  # configure(audit=...); None: ARBITER_AUDIT decides


def check_rate(rate, name: str = "audit") -> float:
    """``rate`` as a float in [0, 1]; ValueError naming ``name`` otherwise."""
    try:
        value = float(rate)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: {rate!r} is not a number in [0, 1]") from None
    if isinstance(rate, bool) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name}: {rate!r} is not a number in [0, 1]")
    return value


def configure(rate) -> None:
    """Set the process's audit rate (``dispatch.configure(audit=...)`` calls this and clears the table, so every
    route is armed again on its next miss). None: back to ``ARBITER_AUDIT``."""
    global _configured
    _configured = None if rate is None else check_rate(rate)


def rate_in_force(configured: float | None, variable: str) -> float:
    """``configured`` when set, else the environment variable ``variable`` (checked by name), else 0."""
    if configured is not None:
        return configured
    given = os.environ.get(variable, "").strip()
    return check_rate(given, variable) if given else 0.0


def rate() -> float:
    """The audit rate in force: ``configure``'s, else ``ARBITER_AUDIT``, else 0. Read on a miss only."""
    return rate_in_force(_configured, "ARBITER_AUDIT")


@dataclass
class Counts:
    """What the audit did in this process: calls sampled, checked, dropped (queue full), failed."""

    sampled: int = 0
    checked: int = 0
    dropped: int = 0
    failed: int = 0


counts = Counts()


FIRST_CALLS = ("background", "before", "off")
_first_calls: str | None = None  # configure(first_calls=...); None: ARBITER_FIRST_CALLS decides


def configure_first_calls(mode) -> None:
    """How the first call of each new exact shape is checked (item 4 of the gate's round 3): ``background``
    (the default: served at once, checked on the audit thread), ``before`` (checked before its result is
    returned; a failure serves the next solution instead), ``off``. None: back to ``ARBITER_FIRST_CALLS``."""
    global _first_calls
    if mode is not None and mode not in FIRST_CALLS:
        raise ValueError(f"first_calls: {mode!r} is not one of {', '.join(FIRST_CALLS)}")
    _first_calls = mode


def first_calls() -> str:
    """The first-call mode in force (``configure_first_calls``, else ``ARBITER_FIRST_CALLS``, else background)."""
    if _first_calls is not None:
        return _first_calls
    given = os.environ.get("ARBITER_FIRST_CALLS", "").strip() or "background"
    if given not in FIRST_CALLS:
        raise ValueError(f"ARBITER_FIRST_CALLS: {given!r} is not one of {', '.join(FIRST_CALLS)}")
    return given


def arm(route, table: dict, store_of, again=None) -> None:
    """Set ``route.run`` for the audit in force: at rate 0 the candidate's own ``run`` behind a check of each
    first call (``first_calls``; the candidate's own ``run`` when that is off), else a sampling wrapper.
    ``table`` is dispatch's table (a failed route leaves it); ``store_of()`` the store to record in; ``again
    (region)``: the raw result of the key's solution after a demotion (first calls checked ``before``)."""
    run = route.candidate.run
    if route.chosen_by == ChosenBy.DISABLED:  # ARBITER_DISABLE: no registry to record in
        route.run = run
        return
    r, mode = rate(), first_calls()
    # (a torch caller's CUDA calls, ``route.run_torch``, are not wrapped: tried, its clones landed in the pool of
    # torch.compile's CUDA graph trees, and the budget hooks read NumPy/CuPy arrays only; see docs/architecture.md)
    if r > 0.0:
        route.run = _sampler(route, run, r, table, store_of)
    elif mode == "off":
        route.run = run
    else:
        route.run = _first_checked(route, run, table, store_of, again if mode == "before" else None)


def unaudited(run, candidate) -> bool:
    """Whether ``run`` (a route's) is ``candidate``'s own, or that behind the first-call check only: what a
    caller may bypass for a signature whose first call was taken (arbiter.torch's fast path)."""
    return getattr(run, "__self__", None) is candidate or getattr(getattr(run, "checks_first_of", None),
                                                                  "__self__", None) is candidate


def _first_checked(route, run, table: dict, store_of, again):
    """``run`` with the first call of each signature new to the process (``region.first_call``, set by the region
    memo) checked against the oracle: on the audit thread, or (``again`` given) before the result is returned,
    serving ``again(region)`` when the check fails. An unchecked call costs one attribute read over ``run``."""
    kept: list = [None]

    def first_checked(region, params):
        if not region.first_call:
            return run(region, params)
        region.first_call = False  # (the caller may run this region again: its shape is not new then)
        if targets.get(region.target).capturing():  # no copies or waits inside a CUDA-graph capture
            return run(region, params)
        if again is None:
            return _sampled(route, run, region, params, table, store_of, kept)[0]
        result, job = _sampled(route, run, region, params, table, store_of, kept, now=True)
        if job is None:
            return result
        env = fpenv.capture()  # the oracle under the default environment, as the checker thread computes it
        fpenv.make_default()
        try:
            failed = check(job)
        finally:
            fpenv.changed(env)  # the caller's environment put back
        return result if failed is None else again(region)

    first_checked.__dict__["checks_first_of"] = run  # what ``unaudited`` looks for
    return first_checked


def _gap(rng: random.Random, rate: float) -> int:
    """Calls until the next sampled one: geometric with mean 1/rate (1 at rate 1)."""
    if rate >= 1.0:
        return 1
    return 1 + int(math.log(1.0 - rng.random()) / math.log(1.0 - rate))


SHAPES = 4096  # exact shapes a route remembers as checked (a bucket's sizes; beyond, it starts again)


def _sampler(route, run, rate: float, table: dict, store_of):
    """A route's ``run`` under audit: every call runs ``run``; about one in ``1/rate`` is also checked, and so is
    the first call of every exact shape the route serves (a bucket spans many; the gate probed a few). A closure,
    not an object with ``__call__``: an unsampled call costs about 0.3 µs over ``run`` (the shape lookup)."""
    rng = random.Random()
    left = _gap(rng, rate)
    seen: set = set()
    kept: list = [None]  # a weak reference to the output the caller got from the last sampled call without out=

    def audited(region, params):
        nonlocal left
        left -= 1
        shape = tuple(region.dims.values())
        new = shape not in seen
        if left > 0 and not new:
            return run(region, params)
        if not new:
            left = _gap(rng, rate)
        result, queued = _sampled(route, run, region, params, table, store_of, kept)
        if new and queued:  # a shape whose sample was dropped (queue full) is sampled again on its next call
            if len(seen) >= SHAPES:
                seen.clear()
            seen.add(shape)
        return result

    return audited


def _sampled(route, run, region, params, table: dict, store_of, kept: list, now: bool = False) -> tuple[Any, Any]:
    """(the result, whether its check was queued) of one sampled call: its inputs copied before (``out=`` may
    overwrite one), its output after, both queued; the thread's floating-point environment read before and after;
    an output that reuses the memory of the one the caller kept from the previous sampled call (a pooled buffer
    handed out twice) is a failure of its own. ``now``: (the result, the job to check now, None for a call that
    declined) instead of queueing it."""
    counts.sampled += 1
    pristine = verify.pristine_copy(region)
    # The kernel runs under the default environment, so one that sets flush-to-zero at every call is seen even
    # where an unsampled call of it left the thread so; the caller's environment is put back right after.
    env = fpenv.capture()
    clean = fpenv.make_default() == "" if env.state != fpenv.DEFAULT else True
    try:
        result = run(region, params)
    finally:
        after = fpenv.state()
        fpenv.changed(env)
    if type(result) is Fallback:
        return result, None if now else True
    found = fpenv.DEFAULT.differences(after) if clean and after != fpenv.DEFAULT else ""
    reason = f"left the calling thread's floating-point environment changed ({found})" if found else ""
    if region.out is None:
        earlier = kept[0]() if kept[0] is not None else None
        if earlier is not None and not reason and verify.may_share(result, earlier):
            reason = ("returned the memory of the output it gave an earlier call without out= (a pooled buffer): "
                      "the caller's earlier result changes under it")
        kept[0] = _weak(result)
    y = _copy_out(region, result)
    # the copies were queued on the caller's stream; the checker uses its own (a no-op on the host)
    targets.get(region.target).synchronize()
    job = _Job(route, params, pristine, y, table, store_of(), reason)
    return (result, job) if now else (result, _submit(job))


def _weak(result):
    try:
        return weakref.ref(result)
    except TypeError:  # an array type without weak references: nothing kept
        return None


def _copy_out(region, result):
    """A copy of ``result`` the checker can compare on its own device (NumPy/CuPy), else on the host."""
    if isinstance(result, np.ndarray) or array_module(result) is not np:
        return result.copy()
    return np.asarray(targets.get(region.target).to_host(result))


@dataclass
class _Job:
    route: Any
    params: dict
    pristine: Any
    y: Any
    table: dict
    store: Any
    found: str = ""  # what the call itself showed (its floating-point environment, a pooled output): no oracle needed


_queue: queue.Queue[_Job] = queue.Queue(QUEUE)
_worker: threading.Thread | None = None
_worker_lock = threading.Lock()


def _submit(job: _Job) -> bool:
    """Queue ``job`` for the checker thread; False when the queue is full (the sample is dropped, counted)."""
    global _worker
    if _worker is None:
        with _worker_lock:
            if _worker is None:
                _worker = threading.Thread(target=_work, name="arbiter-audit", daemon=True)
                _worker.start()
    try:
        _queue.put_nowait(job)
    except queue.Full:
        counts.dropped += 1
        return False
    return True


def _work() -> None:
    # The oracle runs under the C default environment: this thread inherited its creator's, which a kernel may have
    # left with flush-to-zero on (it would agree with that kernel's flushed outputs).
    left = fpenv.make_default()
    if left:
        log.warning("arbiter audit: could not clear the checker thread's floating-point environment (%s)", left)
    while True:
        job = _queue.get()
        try:
            check(job)
        except Exception:  # the audit never takes the process down; say why it could not check
            log.exception("arbiter audit: could not check a real call of %s", job.route.key.id)
        finally:
            # dropped before the next wait: a job keeps its store (whose last connection, closed at exit,
            # checkpoints SQLite's WAL into the file), its copies and its output alive
            del job
            _queue.task_done()


def drain(timeout: float = 60.0) -> bool:
    """Wait until every sampled call queued so far is checked (tests, benchmarks); False on timeout."""
    end = time.monotonic() + timeout
    with _queue.all_tasks_done:
        while _queue.unfinished_tasks:
            left = end - time.monotonic()
            if left <= 0:
                return False
            _queue.all_tasks_done.wait(left)
    return True


def real_budget(candidate, region) -> tuple[Budget, bool]:
    """The budget a real call is held to: the candidate's declared one, else the budget of the value family its
    data belongs to (``OpKind.call_budget``: layernorm by its rows' condition, attention by its scores' bound),
    else the op's. Not the loosest of the families': layernorm's large_offset budget (3000x) let a mean that
    misses constant rows by 59x the op's budget through."""
    budget, looser = verify.budget_of(candidate, region.op, region.dtype)
    if looser:
        return budget, True
    hook = op_kind(region.op).call_budget
    return (budget if hook is None else hook(region, budget)), False


def compare_call(region, y, budget: Budget) -> tuple[str, float, float]:
    """(reason or "", relative error, worst excess) of output ``y`` of ``region``'s call: the full float64 oracle
    where the gate would use it (work up to ``verify.CHEAP_CHECK_WORK``, output up to ``verify.CHUNK_ELEMENTS``),
    without the gate's BLAS thread limit (process-wide: it would slow the caller's own BLAS calls meanwhile);
    otherwise the gate's large-shape check (``verify.check_output``)."""
    if (math.prod(max(v, 1) for v in region.dims.values()) <= verify.CHEAP_CHECK_WORK
            and math.prod(region.output_shape()) <= verify.CHUNK_ELEMENTS):
        with oracles.on_device():
            return verify.compare_full(region, y, budget)
    return verify.check_output(region, y, budget, np.random.default_rng())


def shape_text(region) -> str:
    """A real call's shape as the gate names probes: the dims joined by x, and the dtype."""
    return "x".join(str(v) for v in region.dims.values()) + f" {region.dtype}"


def check(job: _Job) -> Verdict | None:
    """Compare one sampled call with the oracle; on a mismatch store the failed verdict, log it and take the
    route out of the table. Returns the failed verdict, or None when the call was right."""
    start = time.perf_counter()
    route, region = job.route, job.pristine
    budget, looser = real_budget(route.candidate, region)
    with np.errstate(all="ignore"):  # the oracle overflows where the data does (as the gate's): no warning for it
        reason, rel, excess = (job.found, math.nan, math.inf) if job.found else compare_call(region, job.y, budget)
    counts.checked += 1
    if not reason:
        return None
    counts.failed += 1
    shape = shape_text(region)
    verdict = Verdict(False, f"{AUDIT_PREFIX} at {shape}: {reason}", rel, excess, (f"audit {shape}",), budget,
                      looser, time.perf_counter() - start)
    key_id = route.key.id
    vkey = VerdictKey.of(Solution.of(route.candidate, job.params), key_id, route.env.fingerprint)
    job.store.save_verdict(vkey, verdict, route.candidate)
    log.warning("arbiter: %s at key %s failed the audit and is demoted: %s", route.label, key_id, verdict.reason)
    if job.table.get(key_id) is route:  # the next call misses and takes the next passing solution
        job.table.pop(key_id, None)
    return verdict


def _at_exit() -> None:
    """Let the checks queued by the last calls finish (briefly): a check that is still running holds its store."""
    if _worker is not None:
        drain(2.0)


atexit.register(_at_exit)


def _after_fork_in_child() -> None:
    """A forked child has no audit thread and must not inherit its parent's queued copies."""
    global _queue, _worker, _worker_lock
    _queue, _worker, _worker_lock = queue.Queue(QUEUE), None, threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
