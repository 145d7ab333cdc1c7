"""The one way into selection from a miss: ``decide(region, policy, store)``.

A key the dispatch table lacks is decided here, whatever the policy (``MissPolicy``):

* a stored solution that can be served here (registered, available, applies to this instance, passes the gate;
  stored verdicts reused) is loaded: nothing is decided;
* ``strict`` stops there (``StrictMissError``);
* a stored winner this process cannot serve gets a *stand-in*, chosen by tier (the bucket ladder's nearest
  winners first) for this process only: never stored, so a passer-by never replaces a shared winner;
* ``tune`` measures every passing solution and persists the winner (``arbiter.tune.tune_region``). Where
  ``tune_seconds()`` is set (``arbiter.configure(tune_seconds=...)``, else ``ARBITER_TUNE_SECONDS``) it caps a key's
  gating and, again, its timing: gating stops starting new solutions after that long once two have passed (breadth
  first: every candidate's default before other parameter sets), and the timing is split over those that passed.
  Uncapped, every solution is gated (a GPU key compiles every Triton tile) and timed in three modes, up to a second
  each: an eager llama block's seven keys took 169-299 s to tune on the first call (H200, 2026-12-04);
* ``tier`` and ``record`` choose by tier and store the choice where the key has none yet; ``record`` also records
  the key for offline tuning;
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
from arbiter.select import Decision, Row, Status
from arbiter.solution import ChosenBy, Solution, TextEnum, TimingMode
from arbiter.store import SolutionRecord
from arbiter.tune import tune_region
from arbiter.verify import set_plugin_verifier

set_plugin_verifier(plugin_verify)  # a plug-in's gate runs in a child process wherever selection gates it

_tune_seconds: float | None = None  # configure(tune_seconds=...); None: ARBITER_TUNE_SECONDS decides


class MissPolicy(TextEnum):
    """What a miss (a key the dispatch table lacks) does; not how its winner was chosen (``ChosenBy``)."""

    TIER = "tier"  # serve a stored solution, else verify and choose by tier, and store that (default)
    TUNE = "tune"  # measure every passing solution now and persist the winner
    RECORD = "record"  # as tier, and record the key for offline tuning
    STRICT = "strict"  # serve stored solutions only; raise StrictMissError otherwise


POLICIES = tuple(p.value for p in MissPolicy)  # their texts (the policy= argument, ARBITER_POLICY)
DISABLED = "disabled"  # ARBITER_DISABLE: not a policy a caller names; the switch overrides every policy


def decide(region, policy: str, store, *, for_capture: bool = False) -> Decision:
    """Decide ``region``'s key on a miss under ``policy`` (a ``MissPolicy`` text, or ``DISABLED``) with
    ``store``; ``for_capture``: the miss is part of a sequence ``arbiter.capture`` records (``timing_mode``).

    Raises StrictMissError (policy strict, nothing servable stored), NoCandidateError (nothing passes the gate),
    ValueError for an unknown policy; a registry that refuses a write raises what it raises (the caller may
    switch stores and decide again).
    """
    if policy == DISABLED:
        decision = select.decide(region, store, gate_all=False)
        decision.chosen_by, decision.verified_now = ChosenBy.DISABLED, 0  # (its verdicts are the scratch store's)
        return decision
    if policy not in POLICIES:
        raise ValueError(f"policy: {policy!r} is not one of {', '.join(POLICIES)}")
    env = envmod.environment(region.target)
    stored, why_not, verified = _stored(region, store, env, strict=policy == MissPolicy.STRICT)
    if stored is not None:
        return stored
    if policy == MissPolicy.STRICT:
        raise StrictMissError(region.key, why_not)
    if why_not is not None:
        # The key has a shared winner that this process cannot serve (an operand it does not apply to, a
        # plug-in not loaded here, ...): the stand-in chosen now serves this process only. Stored, it would
        # replace a measured or forced winner for every process (issue 20 item 4).
        decision = select.decide(region, store, prefer=nearest_winners(region, store, env))
        decision.counter, decision.why_not = "fallbacks", why_not
    elif policy == MissPolicy.TUNE:
        seconds = tune_seconds()
        decision = tune_region(region, store, mode=timing_mode(region.target, for_capture), budget_s=seconds,
                               gate_s=seconds)
    else:
        decision = decide_and_store(region, store, prefer=nearest_winners(region, store, env), replace=False)
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


def timing_mode(target: str, for_capture: bool) -> TimingMode:
    """The timing mode a miss under policy tune decides by: the mode the caller runs in (DESIGN.md contract 3).
    An eager caller's time includes its host work (``stream``: back-to-back calls, host work overlapping the
    previous kernel; small problems are host-bound); a sequence ``arbiter.capture`` records replays with no host
    work between kernels, so ``device`` time decides there. On the CPU the modes coincide: ``device``."""
    if for_capture or targets.get(target).host_clock:
        return TimingMode.DEVICE
    return TimingMode.STREAM


def decide_and_store(region, store, *, force=None, prefer=None, gate_all=False, replace=True) -> Decision:
    """Decide ``region``'s key by tier (or ``force``) and store the winner. ``replace=False``: store it only where
    the key has no winner yet (a tier choice made on a miss must not overwrite one another process measured
    meanwhile)."""
    decision = select.decide(region, store, force=force, prefer=prefer, gate_all=gate_all)
    w = decision.winner
    record = SolutionRecord.of(region.key.id, Solution.of(w.candidate, w.params), decision.chosen_by,
                               decision.env.fingerprint, note=decision.note)
    if replace:
        store.save_solution(record, decision.env)
    else:
        store.add_solution(record, decision.env)
    return decision


def _stored(region, store, env, *, strict: bool = False) -> tuple[Decision | None, str | None, int]:
    """(the stored solution for this key as a Decision (counter ``loads``) if it can be served here, why not
    otherwise, how many verdicts its gate computed now)."""
    record = store.load_solution(region.key.id, env.fingerprint)
    if record is None:
        return None, None, 0
    name = record.candidate_name
    cand = REGISTRY.get(name, region.target, region.op)
    if cand is None:
        return None, f"stored winner {name!r} is no longer registered", 0
    if cand.available() is not True:
        return None, f"stored winner {name!r} is unavailable", 0
    if cand.applies_to(region) is not True:
        return None, f"stored winner {name!r} does not apply to this instance", 0
    row = Row(cand, record.params)
    verified = int(select.gate(row, region, store, env))  # verified once per identity and environment
    if row.status != Status.PASSED:
        return None, f"stored winner {name!r} fails the gate now: {row.reason}", verified
    if (not strict and record.chosen_by == ChosenBy.TIER
            and getattr(cand, "torch_native", False) != region.torch_caller):
        # A tier choice stored by the other kind of caller: a torch caller's tier order puts solutions without
        # conversions first, a CuPy caller's does not, so this caller decides for itself (its verdicts come
        # from the registry); the shared record stays as it is. Under policy strict nothing is decided on a
        # miss: the stored winner serves.
        return None, None, verified
    row.rank = 1
    return Decision(region.key, [row], row, record.chosen_by, record.note, verified, env, record.margin,
                    counter="loads", stored=record), None, verified
