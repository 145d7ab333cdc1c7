"""The store's values and contract: ``VerdictKey`` and ``Verdict``, the records (solutions, measurements,
counts), ``Store`` (what the arbiter needs from persistence) and ``MemoryStore``. Imported through
``arbiter.store``; the modules of this package import it directly, never the package.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

from arbiter.oracles.budgets import Budget
from arbiter.solution import ChosenBy, Solution, TimingMode


@dataclass(frozen=True)
class VerdictKey:
    identity: str  # the candidate's code identity
    params_id: str  # the solution's canonical parameter text
    key: str  # ProblemKey.id
    env: str  # EnvironmentKey.fingerprint

    @classmethod
    def of(cls, solution: Solution, key: str, env: str) -> VerdictKey:
        """The key of ``solution``'s verdict at problem key ``key`` under environment ``env`` (the one place
        one is built from a solution: a verdict is per code identity, so the solution must carry it)."""
        if not solution.identity:
            raise ValueError(f"solution: {solution.label} carries no code identity; build it with Solution.of")
        return cls(solution.identity, solution.params_id, key, env)


@dataclass(frozen=True)
class Verdict:
    """The gate's finding for one solution at one key (``arbiter.verify`` computes it, the store keeps it:
    it lives here, beside its key, so that the store needs nothing from the layers above it)."""

    passed: bool
    reason: str  # "" when passed; otherwise what failed, at which probe
    rel_error: float  # worst relative Frobenius error over the probes (nan when none was computed)
    max_excess: float  # worst elementwise |y-ref| / allowed (<= 1 passes)
    probes: tuple[str, ...]  # the probes run, e.g. ("63x65x17", "63x65x17 mixed_rows", "33x33x17 tiny", ...)
    budget: Budget
    looser_budget: bool  # the candidate declared a budget looser than the published one
    seconds: float

    def __str__(self):
        if self.passed:
            return f"pass (rel {self.rel_error:.2e})"
        return f"FAIL {self.reason}"


@dataclass
class SolutionRecord:
    """A stored winner for one problem key under one environment (columns ``candidate`` and ``policy`` hold
    ``candidate_name`` and ``chosen_by``)."""

    key: str
    candidate_name: str
    identity: str
    params: dict
    chosen_by: ChosenBy  # tier | measured | forced
    env: str
    margin: float | None = None  # measured: runner-up time / winner time - 1
    note: str = ""
    created: datetime = field(default_factory=lambda: datetime.now(timezone.utc))

    def __post_init__(self):
        self.chosen_by = ChosenBy(self.chosen_by)

    @classmethod
    def of(cls, key: str, solution: Solution, chosen_by: ChosenBy, env: str, *, margin: float | None = None,
           note: str = "") -> SolutionRecord:
        """``solution`` as the winner of ``key`` under ``env``; it must carry its code identity (``Solution.of``)."""
        if not solution.identity:
            raise ValueError(f"solution: {solution.label} carries no code identity; build it with Solution.of")
        return cls(key, solution.candidate_name, solution.identity, solution.params, chosen_by, env, margin, note)

    @property
    def solution(self) -> Solution:
        return Solution(self.candidate_name, self.params, self.identity)


@dataclass
class MeasurementRecord:
    """One timed solution for one key: the figures of an ``arbiter.timing.Measurement`` plus who was timed."""

    candidate_name: str
    params: dict
    mode: TimingMode
    median_s: float
    p20_s: float
    p80_s: float
    spread: float  # (p80 - p20) / median
    reps: int
    warmup_s: float
    screened: bool = False  # stopped early, far slower than the best so far
    dims: dict | None = None  # the exact dimensions timed (the key holds only their bucket)

    def __post_init__(self):
        self.mode = TimingMode(self.mode)

    @property
    def solution(self) -> Solution:
        return Solution(self.candidate_name, self.params)


@dataclass
class CountDelta:
    """Dispatch counts of one solution at one key. ``hits``: served from the dispatch table; ``loads``: a
    stored solution installed by a process (its first call of the key, nothing decided); ``misses``: the key
    decided now (no stored solution); ``fallbacks``: a stand-in served because the stored winner could not be
    here, or the winner declined an instance."""

    key: str
    candidate_name: str
    params_id: str  # the solution's canonical parameter text: counts are grouped on it, never read as a dict
    env: str
    hits: int = 0
    misses: int = 0
    fallbacks: int = 0
    loads: int = 0

    def total(self) -> int:
        return self.hits + self.loads + self.misses + self.fallbacks

    @property
    def solution(self) -> Solution:
        return Solution.from_text(self.candidate_name, self.params_id)


_tier_lookup: Callable[[str, str, str], str] | None = None


def set_tier_lookup(lookup: Callable[[str, str, str], str]) -> None:
    """How the store learns a candidate's tier (recorded with its row): ``lookup(name, target, op)`` gives the
    tier name, "" when unknown. The candidate registry sits above the store, so it hands this down when
    imported (``arbiter.candidates``) rather than the store importing it."""
    global _tier_lookup
    _tier_lookup = lookup


def tier_of(name: str, target: str, op: str) -> str:
    """The tier name of the candidate ``name`` at (``target``, ``op``); "" when unknown."""
    return "" if _tier_lookup is None else _tier_lookup(name, target, op)


class Store:
    """What the arbiter needs from persistence. All methods are safe to call from any thread."""

    # Whether what is written here outlives the process (a writable registry): dispatch runs the background
    # counter flusher (``arbiter.store.flusher``) only for such a store.
    persistent = False

    def transaction(self):
        """A context in which this thread's writes commit together when it ends, or not at all when it raises
        (or the process dies): a tuned key's verdicts, measurements and solution are one commit. Reads inside
        it do not see its writes. Nested, it joins the outer one."""
        return contextlib.nullcontext()  # a store in memory dies with its process: nothing to make atomic

    def load_verdict(self, vkey: VerdictKey) -> Verdict | None:
        raise NotImplementedError

    def save_verdict(self, vkey: VerdictKey, verdict: Verdict, candidate) -> None:
        raise NotImplementedError

    def load_solution(self, key: str, env: str) -> SolutionRecord | None:
        raise NotImplementedError

    def save_solution(self, record: SolutionRecord, environment=None) -> None:
        raise NotImplementedError

    def add_solution(self, record: SolutionRecord, environment=None) -> bool:
        """Store ``record`` only where its (key, environment) has no solution yet; returns whether it did."""
        raise NotImplementedError

    def solutions(self, env: str | None = None) -> list[SolutionRecord]:
        raise NotImplementedError

    def save_measurements(self, key: str, env: str, measurements: list[MeasurementRecord]) -> None:
        """Replace the measurements of ``key`` under ``env`` with these."""
        raise NotImplementedError

    def load_measurements(self, key: str, env: str) -> list[MeasurementRecord]:
        raise NotImplementedError

    def add_counts(self, deltas: list[CountDelta]) -> None:
        raise NotImplementedError

    def counts(self) -> list[CountDelta]:
        raise NotImplementedError

    def record_key(self, key: str, dims: dict, env: str) -> None:
        raise NotImplementedError

    def recorded_keys(self) -> list[tuple[str, dict]]:
        raise NotImplementedError


class MemoryStore(Store):
    """Everything in this process; gone at exit."""

    def __repr__(self):
        return "<MemoryStore: this process only, not persisted>"

    def __init__(self):
        self._lock = threading.Lock()
        self._verdicts: dict[VerdictKey, Verdict] = {}
        self._solutions: dict[tuple[str, str], SolutionRecord] = {}
        self._measurements: dict[tuple[str, str], list] = {}
        self._counts: dict[tuple[str, str, str, str], CountDelta] = {}
        self._recorded: dict[str, dict] = {}

    def load_verdict(self, vkey):
        return self._verdicts.get(vkey)

    def save_verdict(self, vkey, verdict, candidate):
        with self._lock:
            self._verdicts[vkey] = verdict

    def load_solution(self, key, env):
        return self._solutions.get((key, env))

    def save_solution(self, record, environment=None):
        with self._lock:
            self._solutions[(record.key, record.env)] = record

    def add_solution(self, record, environment=None):
        with self._lock:
            return self._solutions.setdefault((record.key, record.env), record) is record

    def solutions(self, env=None):
        return [r for (k, e), r in self._solutions.items() if env is None or e == env]

    def save_measurements(self, key, env, measurements):
        with self._lock:
            self._measurements[(key, env)] = list(measurements)

    def load_measurements(self, key, env):
        return list(self._measurements.get((key, env), ()))

    def add_counts(self, deltas):
        with self._lock:
            for d in deltas:
                slot = self._counts.setdefault((d.key, d.candidate_name, d.params_id, d.env),
                                               CountDelta(d.key, d.candidate_name, d.params_id, d.env))
                slot.hits += d.hits
                slot.misses += d.misses
                slot.fallbacks += d.fallbacks
                slot.loads += d.loads

    def counts(self):
        return list(self._counts.values())

    def record_key(self, key, dims, env):
        with self._lock:
            self._recorded.setdefault(key, dict(dims))

    def recorded_keys(self):
        return list(self._recorded.items())
