"""Selection: filter, gate, choose.

``decide(region)`` walks every candidate registered for the region's (target, op):
``available()``, then ``applies_to(region)`` (each exclusion keeps its reason),
then the F4 gate; and chooses by tier priority, by a measured winner handed in
by the tuner, or by name when forced. The ``Decision`` it returns is what
``arbiter explain`` prints.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from arbiter import env as envmod
from arbiter.candidates import REGISTRY, Candidate, params_id
from arbiter.errors import NoCandidateError
from arbiter.keys import ProblemKey
from arbiter.oracles.budgets import budget_for
from arbiter.verify import Verdict, budget_of, consents_to_looser, verdict_for


@dataclass
class Row:
    """One solution's part in a decision."""

    candidate: Candidate
    params: dict
    status: str = "pending"  # excluded | failed | passed | unchecked
    reason: str = ""
    verdict: Verdict | None = None
    rank: int | None = None  # 1 = winner among those that passed
    timing: object = None  # a Measurement, when measured

    @property
    def label(self) -> str:
        p = params_id(self.params)
        return self.candidate.name if p == "{}" else f"{self.candidate.name}{p}"


@dataclass
class Decision:
    key: ProblemKey
    rows: list[Row]
    winner: Row  # a decision always has one: select raises NoCandidateError otherwise
    policy: str  # tier | measured | forced
    note: str = ""
    verified_now: int = 0  # verdicts computed (not cached) while deciding
    env: Any = None  # the EnvironmentKey decided under
    margin: float | None = None

    def __str__(self):
        lines = [f"{self.key}  ->  {self.winner.label if self.winner else 'none'} "
                 f"[{self.policy}{': ' + self.note if self.note else ''}]"]
        for row in self.rows:
            mark = "*" if row is self.winner else " "
            detail = row.reason or (str(row.verdict) if row.verdict else "")
            timing = f"  {row.timing}" if row.timing is not None else ""
            lines.append(f" {mark} {row.label:<38} {row.candidate.tier.name:<11} {row.status:<9} {detail}{timing}")
        return "\n".join(lines)


def _reason(result, default: str) -> str:
    return result if isinstance(result, str) and result else default


def screen_row(cand: Candidate, params: dict, region) -> Row:
    """A row with availability, applicability and delegate coverage checked (not gated)."""
    row = Row(cand, params)
    avail = cand.available()
    if avail is not True:
        row.status, row.reason = "excluded", "unavailable: " + _reason(avail, "available() is False")
        return row
    applies = cand.applies_to(region)
    if applies is not True:
        row.status, row.reason = "excluded", "does not apply: " + _reason(applies, "applies_to() is False")
    elif cand.contract is not None and cand.contract.coverage == "root_only" and region.has_epilogue:
        row.status, row.reason = "excluded", "root_only delegate; the region has a fused epilogue"
    elif cand.contract is not None and cand.contract.accuracy == "bounded" and not consents_to_looser(region):
        declared = budget_of(cand, region.op, region.dtype)[0]
        if declared.looser_than(budget_for(region.op, region.dtype)):
            row.status, row.reason = "excluded", (
                f"declares accuracy looser than the {region.op} {region.dtype} budget (rel_fro "
                f"{declared.rel_fro:.0e}); the caller has not opted in (region.allow_looser(), "
                "arbiter.configure(looser_accuracy=True), or --allow-looser)")
    return row


def screen(region, all_params: bool = False) -> list[Row]:
    """Rows for every candidate of (target, op), in tier order; checked but not gated."""
    return [screen_row(cand, params, region)
            for cand in REGISTRY.candidates(region.target, region.op)
            for params in (cand.param_space() if all_params else cand.param_space()[:1])]


def gate(row: Row, region, store, env, verifier=None) -> bool:
    """Run (or fetch) the row's verdict; returns whether it was computed now."""
    verdict, now = verdict_for(row.candidate, row.params, region, store, env, verifier)
    row.verdict = verdict
    row.status = "passed" if verdict.passed else "failed"
    if not verdict.passed:
        row.reason = verdict.reason
    return now


def decide(region, store, *, force: str | None = None, prefer: list[tuple[str, dict]] | None = None,
           gate_all: bool = True, all_params: bool = False, verifier=None) -> Decision:
    """Choose a solution for ``region``'s key.

    ``force``: the candidate name to use (it must still pass the gate).
    ``prefer``: (name, params) solutions to try first (the bucket ladder's hint), before tier order.
    ``gate_all``: verify every applicable row (for ``explain``); otherwise stop at the first pass.
    ``all_params``: a row per parameter set (tuning); otherwise each candidate's default only.
    ``verifier``: replaces ``verify.verify`` for verdicts not yet stored (crash isolation).
    Raises NoCandidateError (listing every row and its reason) when nothing passes.
    """
    env = envmod.environment(region.target)
    rows = screen(region, all_params)
    order = [r for r in rows if r.status == "pending"]
    if force is not None:
        if not any(r.candidate.name == force for r in rows):
            raise ValueError(f"force: no candidate named {force!r} for {region.target}/{region.op}; "
                             f"known: {', '.join(sorted({r.candidate.name for r in rows})) or 'none'}")
        order = [r for r in order if r.candidate.name == force]
    elif prefer:
        hinted = []
        for name, params in prefer:
            cand = REGISTRY.get(name, region.target, region.op)
            if cand is not None:
                row = screen_row(cand, params, region)
                if row.status == "pending":
                    hinted.append(row)
        same = {(r.candidate.name, params_id(r.params)) for r in hinted}
        rows = hinted + [r for r in rows if (r.candidate.name, params_id(r.params)) not in same]
        order = hinted + [r for r in order if (r.candidate.name, params_id(r.params)) not in same]
    verified, winner = 0, None
    for row in order:
        if winner is not None and not gate_all:
            row.status = "unchecked"
            continue
        verified += gate(row, region, store, env, verifier)
        if row.status == "passed" and winner is None:
            winner = row
    for row in rows:
        if row.status == "pending":
            row.status, row.reason = "unchecked", "not forced"
    passed = [r for r in order if r.status == "passed"]
    for rank, row in enumerate(passed, 1):
        row.rank = rank
    if winner is None:
        raise NoCandidateError(region.key, rows)
    policy = "forced" if force is not None else "tier"
    note = "from the nearest tuned bucket" if prefer and (winner.candidate.name, params_id(winner.params)) in {
        (n, params_id(p)) for n, p in prefer} else ""
    return Decision(region.key, rows, winner, policy, note, verified, env)
