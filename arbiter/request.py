"""What is asked of selection for one key: one ``Request`` value, whoever asks.

Every way into selection hands one to ``arbiter.decide.decide(region, request, store)``:

=====================  =====================================================================================
who asks               the request
=====================  =====================================================================================
a miss (dispatch)      ``Request(policy)`` (``capture=True`` while ``arbiter.capture`` warms up and records)
``arbitrate``          ``Request(TIER, stored=False, force=..., explain=True, persist=REPLACE)``
a capture stand-in     ``Request(TIER, stored=False, capturable_only=True, persist=NONE)``
``arbiter tune``       ``Request(TUNE, stored=False, mode=..., budget_s=..., runner=..., persist=REPLACE)``
``arbiter explain``    ``Request(TIER, stored=False, explain=True, all_params=True, persist=NONE)``
=====================  =====================================================================================

What a request decides is in its fields; nothing about it is passed beside it. Before (issue 41 item 3), the
asking was seven flags of ``select.decide`` in six combinations at seven call sites, and capture and ``arbitrate``
entered selection apart from the miss's ``decide``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from arbiter.solution import TextEnum, TimingMode


class MissPolicy(TextEnum):
    """What a miss (a key the dispatch table lacks) does; not how its winner was chosen (``ChosenBy``)."""

    TIER = "tier"  # serve a stored solution, else verify and choose by tier, and store that (default)
    TUNE = "tune"  # measure every passing solution now and persist the winner
    RECORD = "record"  # as tier, and record the key for offline tuning
    STRICT = "strict"  # serve stored solutions only; raise StrictMissError otherwise


POLICIES = tuple(p.value for p in MissPolicy)  # their texts (the policy= argument, ARBITER_POLICY)
DISABLED = "disabled"  # ARBITER_DISABLE: not a policy a caller names; the switch overrides every policy


class Persist(TextEnum):
    """What becomes of the decided winner in the registry."""

    ADD = "add"  # stored where the key has no winner yet (a tier choice on a miss: never over a measured one)
    REPLACE = "replace"  # stored over the key's winner (``arbitrate``, ``arbiter tune``)
    NONE = "none"  # not stored (a capture stand-in, ``arbiter explain``; a stand-in for an unservable winner)


@dataclass(frozen=True)
class Request:
    """What is asked for one key.

    ``policy``: how the winner is chosen when one is decided (a ``MissPolicy`` text, or ``DISABLED``).
    ``stored``: a servable stored solution answers first (a miss); False: decide now (``arbitrate``, tuning).
    ``force``: the candidate to use (it must still pass the gate).
    ``explain``: gate every solution, not only up to the first that passes.
    ``all_params``: a row per parameter set (tuning gates them all), else each candidate's default.
    ``capture``: the key is decided for a sequence ``arbiter.capture`` records: tuned by device time.
    ``capturable_only``: only solutions a CUDA graph can record (a capture stand-in).
    ``mode``: the timing mode tuning decides by; None: the caller's (``decide.timing_mode``).
    ``budget_s``, ``gate_s``: tuning's caps for the key's timing and its gating (``arbiter.tune.tune_region``).
    ``persist``: what becomes of the winner (``Persist``).
    ``runner``, ``progress``, ``timing_lock``: where tuning verifies and times, who is told, what it holds while
    timing (``tune_region``'s arguments of those names).
    """

    policy: str = MissPolicy.TIER
    stored: bool = True
    force: str | None = None
    explain: bool = False
    all_params: bool = False
    capture: bool = False
    capturable_only: bool = False
    mode: TimingMode | None = None
    budget_s: float | None = None
    gate_s: float | None = None
    persist: Persist = Persist.ADD
    runner: Any = field(default=None, compare=False)
    progress: Any = field(default=None, compare=False)
    timing_lock: Any = field(default=None, compare=False)


def arbitrate(force: str | None = None) -> Request:
    """``dispatch.arbitrate``'s request: decide now by tier (or ``force``), every solution gated, stored over the
    key's winner."""
    return Request(MissPolicy.TIER, stored=False, force=force, explain=True, persist=Persist.REPLACE)


def capture_standin(disabled: bool = False) -> Request:
    """A capture stand-in's request: the first capturable solution in tier order that passes, never stored
    (``disabled``: under ``ARBITER_DISABLE``, whose verdicts stay in memory)."""
    return Request(DISABLED if disabled else MissPolicy.TIER, stored=False, capturable_only=True,
                   persist=Persist.NONE)


def explain() -> Request:
    """``arbiter explain``'s request: every solution of every parameter set gated; nothing stored."""
    return Request(MissPolicy.TIER, stored=False, explain=True, all_params=True, persist=Persist.NONE)


def tune(**fields) -> Request:
    """A request to tune the key now (``arbiter tune``, ``arbiter run``, tuning workers): every solution gated and
    timed, the winner stored over the key's; ``fields``: ``mode``, ``budget_s``, ``gate_s``, ``runner``, ..."""
    return Request(MissPolicy.TUNE, stored=False, persist=Persist.REPLACE, **fields)
