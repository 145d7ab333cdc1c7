"""The one way into selection: ``decide(region, request, store)``.

Every key decided anywhere is decided here, from one ``Request`` (``arbiter.request``: a miss, ``arbitrate``, a
capture stand-in, ``arbiter tune`` and ``arbiter run``, ``arbiter explain``), with the target and the environment
resolved once and carried. A request with ``stored`` (a miss) first looks at the key's stored solution:

* a stored solution that can be served here (registered, available, applies to this instance, passes the gate;
  stored verdicts reused) is loaded: nothing is decided;
* ``strict`` stops there (``StrictMissError``);
* a stored winner this process cannot serve gets a *stand-in*, chosen by tier (the bucket ladder's nearest
  winners first) for this process only: never stored, so a passer-by never replaces a shared winner; the stored
  winner's verdict, fetched once, is not fetched again.

Otherwise the key is decided now, by the request's policy:

* ``tune`` measures every passing solution and persists the winner (``arbiter.tune.tune_region``). Where
  ``tune_seconds()`` is set (``arbiter.configure(tune_seconds=...)``, else ``ARBITER_TUNE_SECONDS``) a miss's
  request caps the key's gating and, again, its timing (``miss``): gating stops starting new solutions after that
  long once two have passed (breadth first: every candidate's default before other parameter sets), and the
  timing is split over those that passed. Uncapped, every solution is gated (a GPU key compiles every Triton
  tile) and timed in three modes, up to a second each: an eager llama block's seven keys took 169-299 s to tune
  on the first call (H200, 2026-12-04);
* ``tier`` and ``record`` choose by tier (or the request's ``force``) and store the choice as ``persist`` says
  (on a miss: where the key has none yet); ``record`` also records the key for offline tuning;
* ``DISABLED`` (``ARBITER_DISABLE``): the tier default, gated against a store the caller keeps in memory; no
  stored solution is read and nothing is stored.

The ``Decision`` says how to install it: ``counter`` (loads, misses or fallbacks) and ``why_not`` (why a stored
winner was not served). Dispatch keeps the table, the counters and the store switching (a full disk); this
module keeps the rules.
"""
from __future__ import annotations

import os

from arbiter import env as envmod
from arbiter import select, targets
from arbiter.candidates import REGISTRY
from arbiter.errors import StrictMissError
from arbiter.isolate import plugin_verify
from arbiter.ladder import nearest_winners
from arbiter.request import DISABLED, POLICIES, MissPolicy, Persist, Request
from arbiter.select import Decision, Row, Status
from arbiter.solution import ChosenBy, Solution, TimingMode
from arbiter.store import SolutionRecord
from arbiter.tune import tune_region
from arbiter.verify import set_plugin_verifier

__all__ = ["DISABLED", "POLICIES", "MissPolicy", "Request", "decide", "miss", "set_tune_seconds", "timing_mode",
           "tune_seconds"]

set_plugin_verifier(plugin_verify)  # a plug-in's gate runs in a child process wherever selection gates it

_tune_seconds: float | None = None  # configure(tune_seconds=...); None: ARBITER_TUNE_SECONDS decides


def miss(policy: str, capture: bool = False) -> Request:
    """A miss's request under ``policy`` (``capture``: during ``arbiter.capture``'s warm-up and recording); policy
    tune is capped by ``tune_seconds()``."""
    seconds = tune_seconds() if policy == MissPolicy.TUNE else None
    return Request(policy, capture=capture, budget_s=seconds, gate_s=seconds)


def decide(region, request: Request, store) -> Decision:
    """Decide ``region``'s key as ``request`` asks, with ``store``.

    Raises StrictMissError (policy strict, nothing servable stored), NoCandidateError (nothing passes the gate),
    ValueError for an unknown policy or a ``force`` naming no candidate; a registry that refuses a write raises
    what it raises (the caller may switch stores and decide again).
    """
    policy = request.policy
    if policy != DISABLED and policy not in POLICIES:
        raise ValueError(f"policy: {policy!r} is not one of {', '.join(POLICIES)}")
    target = targets.get(region.target)  # resolved once for the key, and carried
    env = envmod.environment(region.target)
    if policy == DISABLED:
        decision = select.choose(region, store, request, env)
        decision.chosen_by, decision.verified_now = ChosenBy.DISABLED, 0  # (its verdicts are the scratch store's)
        return decision
    stored, why_not, known, verified = (_stored(region, store, env, strict=policy == MissPolicy.STRICT)
                                        if request.stored else (None, None, None, 0))
    if stored is not None:
        return stored
    if policy == MissPolicy.STRICT:
        raise StrictMissError(region.key, why_not)
    if why_not is not None:
        # The key has a shared winner that this process cannot serve (an operand it does not apply to, a
        # plug-in not loaded here, ...): the stand-in chosen now serves this process only. Stored, it would
        # replace a measured or forced winner for every process (issue 20 item 4).
        decision = select.choose(region, store, request, env, prefer=nearest_winners(region, store, env),
                                 known=known)
        decision.counter, decision.why_not = "fallbacks", why_not
    elif policy == MissPolicy.TUNE:
        decision = tune_region(region, store, mode=request.mode or timing_mode(target, request.capture),
                               budget_s=request.budget_s, gate_s=request.gate_s, runner=request.runner,
                               progress=request.progress, timing_lock=request.timing_lock, env=env, target=target)
    else:
        prefer = nearest_winners(region, store, env) if request.stored and request.force is None else None
        decision = select.choose(region, store, request, env, prefer=prefer, known=known)
        if request.persist != Persist.NONE:  # ADD: only where the key has no winner yet (a tier choice on a miss
            w = decision.winner              # must not overwrite one another process measured meanwhile)
            record = SolutionRecord.of(region.key.id, Solution.of(w.candidate, w.params), decision.chosen_by,
                                       env.fingerprint, note=decision.note)
            (store.save_solution if request.persist == Persist.REPLACE else store.add_solution)(record, env)
        if policy == MissPolicy.RECORD:
            store.record_key(region.key.id, region.dims, env.fingerprint)
    decision.verified_now += verified  # the stored winner's verdict, when its gate ran now
    return decision


def check_tune_seconds(value, name: str = "tune_seconds") -> float:
    """``value`` as a positive number of seconds; ValueError naming ``name`` otherwise."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: {value!r} is not a positive number of seconds") from None
    if isinstance(value, bool) or not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"{name}: {value!r} is not a positive number of seconds")
    return seconds


def set_tune_seconds(value) -> None:
    """The budget of one key tuned on a miss, for its gate and again for its timing
    (``dispatch.configure(tune_seconds=...)``); None: back to ``ARBITER_TUNE_SECONDS``, and without it no cap
    (every solution gated, then up to a second per solution and mode)."""
    global _tune_seconds
    _tune_seconds = None if value is None else check_tune_seconds(value)


def tune_seconds() -> float | None:
    """The budget of one key decided by policy tune: for its gate (``tune_region``'s ``gate_s``) and again for its
    timing, split over its passing solutions (``budget_s``); None: uncapped."""
    if _tune_seconds is not None:
        return _tune_seconds
    given = os.environ.get("ARBITER_TUNE_SECONDS", "").strip()
    return check_tune_seconds(given, "ARBITER_TUNE_SECONDS") if given else None


def timing_mode(target, for_capture: bool) -> TimingMode:
    """The timing mode a miss under policy tune decides by: the mode the caller runs in (DESIGN.md contract 3).
    An eager caller's time includes its host work (``stream``: back-to-back calls, host work overlapping the
    previous kernel; small problems are host-bound); a sequence ``arbiter.capture`` records replays with no host
    work between kernels, so ``device`` time decides there. On the CPU the modes coincide: ``device``."""
    if for_capture or target.host_clock:  # target: the ``Target`` (resolved once by its caller)
        return TimingMode.DEVICE
    return TimingMode.STREAM


def _stored(region, store, env, *, strict: bool = False) -> tuple[Decision | None, str | None, Row | None, int]:
    """(the stored solution for this key as a Decision (counter ``loads``) if it can be served here, why not
    otherwise, its row once gated (selection reuses its verdict: gated once per miss), how many verdicts its gate
    computed now)."""
    record = store.load_solution(region.key.id, env.fingerprint)
    if record is None:
        return None, None, None, 0
    name = record.candidate_name
    cand = REGISTRY.get(name, region.target, region.op)
    if cand is None:
        return None, f"stored winner {name!r} is no longer registered", None, 0
    if cand.available() is not True:
        return None, f"stored winner {name!r} is unavailable", None, 0
    if cand.applies_to(region) is not True:
        return None, f"stored winner {name!r} does not apply to this instance", None, 0
    row = Row(cand, record.params)
    verified = int(select.gate(row, region, store, env))  # verified once per identity and environment
    if row.status != Status.PASSED:
        return None, f"stored winner {name!r} fails the gate now: {row.reason}", row, verified
    if (not strict and record.chosen_by == ChosenBy.TIER
            and getattr(cand, "torch_native", False) != region.torch_caller):
        # A tier choice stored by the other kind of caller: a torch caller's tier order puts solutions without
        # conversions first, a CuPy caller's does not, so this caller decides for itself; the shared record stays
        # as it is. Under policy strict nothing is decided on a miss: the stored winner serves.
        return None, None, row, verified
    row.rank = 1
    return Decision(region.key, [row], row, record.chosen_by, record.note, verified, env, record.margin,
                    counter="loads", stored=record), None, row, verified
