"""Selection: filter, gate, choose.

``choose(region, store, request, env)`` walks every candidate registered for the region's (target, op):
``available()``, then ``applies_to(region)`` (each exclusion keeps its reason),
then the F4 gate; and chooses by tier priority, by a measured winner handed in
by the tuner, or by name when forced. The ``Decision`` it returns is what
``arbiter explain`` prints.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from arbiter.candidates import REGISTRY, Candidate
from arbiter.errors import NoCandidateError
from arbiter.keys import ProblemKey
from arbiter.oracles.budgets import budget_for
from arbiter.request import Request
from arbiter.solution import ChosenBy, Solution, TextEnum
from arbiter.store import Verdict
from arbiter.verify import budget_of, consents_to_looser, verdict_for


class Status(TextEnum):
    """Where a solution stands in a decision."""

    PENDING = "pending"  # screened in, not gated yet
    EXCLUDED = "excluded"  # unavailable, does not apply, or a delegate contract rules it out (``reason`` says)
    FAILED = "failed"  # failed the gate (or crashed while timed)
    PASSED = "passed"  # passed the gate
    UNCHECKED = "unchecked"  # not gated: a winner was found first, or another candidate was forced


@dataclass
class Row:
    """One solution's part in a decision: the candidate (the object) and one of its parameter sets."""

    candidate: Candidate
    params: dict
    status: Status = Status.PENDING
    reason: str = ""
    verdict: Verdict | None = None
    rank: int | None = None  # 1 = winner among those that passed
    timing: object = None  # a Measurement, when measured

    @property
    def solution(self) -> Solution:
        """The row's solution, by name and parameters (no code identity: ``Solution.of`` computes one)."""
        return Solution(self.candidate.name, self.params)

    @property
    def label(self) -> str:
        return self.solution.label


@dataclass
class Decision:
    key: ProblemKey
    rows: list[Row]
    winner: Row  # a decision always has one: select raises NoCandidateError otherwise
    chosen_by: ChosenBy  # how the winner was chosen (tier, measured or forced; not the miss policy)
    note: str = ""
    verified_now: int = 0  # verdicts computed (not cached) while deciding
    env: Any = None  # the EnvironmentKey decided under
    margin: float | None = None
    # On a miss (``arbiter.decide``): the dispatch counter it adds to (loads: a stored solution served; misses:
    # decided now; fallbacks: a stand-in for a stored winner not servable here, ``why_not`` says why), and the
    # stored record that was loaded, if any.
    counter: str = "misses"
    why_not: str | None = None
    stored: Any = None

    def __str__(self):
        lines = [f"{self.key}  ->  {self.winner.label} "
                 f"[{self.chosen_by}{': ' + self.note if self.note else ''}]"]
        for row in self.rows:
            mark = "*" if row is self.winner else " "
            detail = row.reason or (str(row.verdict) if row.verdict else "")
            timing = f"  {row.timing}" if row.timing is not None else ""
            lines.append(f" {mark} {row.label:<38} {row.candidate.tier.name:<11} {row.status:<9} {detail}{timing}")
        return "\n".join(lines)


def _reason(result, default: str) -> str:
    return result if isinstance(result, str) and result else default


def screen_row(cand: Candidate, params: dict, region, capturable_only: bool = False) -> Row:
    """A row with availability, applicability and delegate coverage checked (not gated); with
    ``capturable_only``, a candidate that cannot be recorded into a CUDA graph is excluded."""
    row = Row(cand, params)
    if capturable_only and not getattr(cand, "capturable", True):
        row.status, row.reason = Status.EXCLUDED, "not capturable: cannot be recorded into a CUDA graph"
        return row
    avail = cand.available()
    if avail is not True:
        row.status, row.reason = Status.EXCLUDED, "unavailable: " + _reason(avail, "available() is False")
        return row
    applies = cand.applies_to(region)
    if applies is not True:
        row.status, row.reason = Status.EXCLUDED, "does not apply: " + _reason(applies, "applies_to() is False")
    elif cand.contract is not None and cand.contract.coverage == "root_only" and region.has_epilogue:
        row.status, row.reason = Status.EXCLUDED, "root_only delegate; the region has a fused epilogue"
    elif cand.contract is not None and cand.contract.accuracy == "bounded" and not consents_to_looser(region):
        declared = budget_of(cand, region.op, region.dtype)[0]
        if declared.looser_than(budget_for(region.op, region.dtype)):
            row.status, row.reason = Status.EXCLUDED, (
                f"declares accuracy looser than the {region.op} {region.dtype} budget (rel_fro "
                f"{declared.rel_fro:.0e}); the caller has not opted in (region.allow_looser(), "
                "arbiter.configure(looser_accuracy=True), or --allow-looser)")
    return row


def _screen_into(row: Row, region, capturable_only: bool) -> bool:
    """Screen ``row`` in place (``screen_row``); whether it may be gated."""
    screened = screen_row(row.candidate, row.params, region, capturable_only)
    row.status, row.reason = screened.status, screened.reason
    return row.status == Status.PENDING


def tier_order(region) -> list[Candidate]:
    """The candidates of (target, op) in tier order. For a torch caller (``region.torch_caller``), within each
    tier the solutions that take its tensors as they are (``torch_native``: no DLPack views, torch's own stream and
    allocator, torch's own thread pool on the CPU) come first: a conversion costs such a caller host time on every
    call (issue 26 item 3), and on the CPU another library's pool beside torch's fights it for the cores (issue 39
    item 1)."""
    found = REGISTRY.candidates(region.target, region.op)
    if getattr(region, "torch_caller", False):
        found = sorted(found, key=lambda c: (-int(c.tier), not getattr(c, "torch_native", False)))  # stable
    return found


def _solutions(region, all_params: bool) -> list[tuple[Candidate, dict]]:
    """(candidate, parameters) of every solution of (target, op), in tier order: each candidate's parameter sets
    with ``all_params``, else its default's."""
    return [(cand, params) for cand in tier_order(region)
            for params in (cand.param_space() if all_params else cand.param_space()[:1])]


def screen(region, all_params: bool = False, capturable_only: bool = False) -> list[Row]:
    """Rows for every candidate of (target, op), in tier order (``tier_order``); checked but not gated."""
    return [screen_row(cand, params, region, capturable_only) for cand, params in _solutions(region, all_params)]


def gate(row: Row, region, store, env, verifier=None) -> bool:
    """Run (or fetch) the row's verdict; returns whether it was computed now."""
    verdict, now = verdict_for(row.candidate, row.params, region, store, env, verifier)
    row.verdict = verdict
    row.status = Status.PASSED if verdict.passed else Status.FAILED
    if not verdict.passed:
        row.reason = verdict.reason
    return now


# The reason of a row a tuning budget left ungated: never verified, never stored, so nothing about it is known.
UNTRIED = "not gated: the key's tuning budget was spent first (`arbiter tune --force` tries every solution)"


def breadth_first(rows: list[Row]) -> list[Row]:
    """``rows`` (tier order, each candidate's parameter sets together) as rounds: every candidate's first row in
    tier order, then every candidate's second, and so on; the first row stays first."""
    groups: dict[str, list[Row]] = {}
    for row in rows:
        groups.setdefault(row.candidate.name, []).append(row)
    rounds = max((len(g) for g in groups.values()), default=0)
    return [g[i] for i in range(rounds) for g in groups.values() if i < len(g)]


def choose(region, store, request: Request, env, *, prefer: list[Solution] | None = None, verifier=None,
           gate_until: float | None = None, known: Row | None = None) -> Decision:
    """Choose a solution for ``region``'s key as ``request`` asks (``arbiter.decide.decide`` and the tuner are the
    callers; nothing is stored here), under the environment ``env`` its caller resolved.

    What is asked comes from ``request``: ``force`` (the candidate to use; it must still pass the gate),
    ``explain`` (verify every applicable row; otherwise stop at the first pass), ``all_params`` (a row per
    parameter set), ``capturable_only`` (only candidates that can be recorded into a CUDA graph,
    ``Candidate.capturable``). What the caller found on the way:
    ``prefer``: solutions to try first (the bucket ladder's hint), before tier order.
    ``verifier``: replaces ``verify.verify`` for verdicts not yet stored (crash isolation).
    ``gate_until``: a ``time.monotonic()`` deadline (a tuning budget): once it has passed and two solutions have
    passed the gate (a winner and a rival to time it against), the rest stay unchecked (``UNTRIED``). The rows
    are then gated breadth first (``breadth_first``), so a short budget reaches every candidate's default before
    any candidate's other parameter sets.
    ``known``: a row gated already on this miss (the stored winner, ``decide._stored``): its verdict is reused,
    so a stored winner is gated once per miss.
    Raises NoCandidateError (listing every row and its reason) when nothing passes.
    """
    gate_all, force, capturable_only = request.explain, request.force, request.capturable_only
    # Each row is screened when reached (``_screen_into``): a tier miss stops at its first pass, and screening a
    # row beyond it would cost its library's import for nothing (torch's candidates: 1.3 s, when NumPy's won).
    rows = (screen(region, request.all_params, capturable_only) if gate_all
            else [Row(cand, params) for cand, params in _solutions(region, request.all_params)])
    order = [r for r in rows if r.status == Status.PENDING]
    if force is not None:
        if not any(r.candidate.name == force for r in rows):
            raise ValueError(f"force: no candidate named {force!r} for {region.target}/{region.op}; "
                             f"known: {', '.join(sorted({r.candidate.name for r in rows})) or 'none'}")
        order = [r for r in order if r.candidate.name == force]
    elif prefer:
        hinted = []
        for hint in prefer:
            cand = REGISTRY.get(hint.candidate_name, region.target, region.op)
            if cand is not None:
                row = screen_row(cand, hint.params, region, capturable_only)
                if row.status == Status.PENDING:
                    hinted.append(row)
        same = {r.solution for r in hinted}
        rows = hinted + [r for r in rows if r.solution not in same]
        order = hinted + [r for r in order if r.solution not in same]
    if gate_until is not None:
        order = breadth_first(order)
    verified, winner, passes = 0, None, 0
    for row in order:
        if winner is not None and not gate_all:
            row.status = Status.UNCHECKED
            continue
        # a budget stops the gate once two solutions passed (a winner and a rival to time it against)
        if passes >= 2 and gate_until is not None and time.monotonic() > gate_until:
            row.status, row.reason = Status.UNCHECKED, UNTRIED
            continue
        if not gate_all and not _screen_into(row, region, capturable_only):
            continue
        if known is not None and known.candidate is row.candidate and known.params == row.params:
            row.verdict, row.status, row.reason = known.verdict, known.status, known.reason  # gated on this miss
        else:
            verified += gate(row, region, store, env, verifier)
        if row.status == Status.PASSED:
            passes += 1
            if winner is None:
                winner = row
    for row in rows:
        if row.status == Status.PENDING:
            row.status, row.reason = Status.UNCHECKED, "not forced"
    passed = [r for r in order if r.status == Status.PASSED]
    for rank, row in enumerate(passed, 1):
        row.rank = rank
    if winner is None:
        raise NoCandidateError(region.key, rows)
    chosen_by = ChosenBy.FORCED if force is not None else ChosenBy.TIER
    note = "from the nearest tuned bucket" if prefer and winner.solution in prefer else ""
    return Decision(region.key, rows, winner, chosen_by, note, verified, env)
