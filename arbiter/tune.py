"""Measured selection for one problem key (DESIGN.md contracts 2 and 3).

``tune_region(region, store)``: gate every solution (every candidate, every
parameter set), time each one that passed, and decide:

* the fastest solution becomes the key's solution with policy ``measured`` when
  its margin over the next (or, when it is not the tier default, over the tier
  default) beats the noise: ``margin > SEPARATION x max(spread of the two)``;
* otherwise the tier default stays, policy ``tier``, noted "not separated"
  (or "only one solution passed the gate").

Measurements (device, latency and stream modes side by side on GPUs; ``mode`` decides, ``device``
by default), the verdicts and the solution are persisted.
"""
from __future__ import annotations

import contextlib
import time

from arbiter import select
from arbiter.candidates import params_id
from arbiter.store import MeasurementRecord, SolutionRecord, VerdictKey
from arbiter.timing import MODES, Measurement, measure
from arbiter.verify import Verdict

SEPARATION = 2.0  # a margin must exceed twice the relative spread to count


def _record(row, m, dims) -> MeasurementRecord:
    return MeasurementRecord(row.candidate.name, row.params, m.mode, m.median_s, m.p20_s, m.p80_s, m.spread,
                             m.reps, m.warmup_s, m.screened, dict(dims))


def separated(fast, slow) -> tuple[bool, float]:
    """(whether ``fast`` beats ``slow`` beyond the noise, the margin slow/fast - 1)."""
    margin = slow.median_s / fast.median_s - 1.0
    return margin > SEPARATION * max(fast.spread, slow.spread), margin


class InProcess:
    """Verify and time in this process (the default runner)."""

    verify = None  # select.decide then uses arbiter.verify.verify

    @staticmethod
    def measure(candidate, params, region, **kwargs):
        return measure(candidate, params, region, **kwargs)


def _crashed_while_timing(row, region, store, env, reason: str) -> None:
    """A solution that passed the gate but crashed when timed: fail it, persistently, so it is never served."""
    row.status, row.reason = "failed", f"crashed while timed: {reason}"
    v = row.verdict
    row.verdict = Verdict(False, row.reason, v.rel_error, v.max_excess, v.probes, v.budget, v.looser_budget,
                          v.seconds)
    store.save_verdict(VerdictKey(row.candidate.identity(), params_id(row.params), region.key.id, env.fingerprint),
                       row.verdict, row.candidate)


def tune_region(region, store, *, mode: str = "device", budget_s: float | None = None, progress=None,
                runner=None, timing_lock=None):
    """Gate and time every solution for ``region``'s key; persist and return the ``Decision``.

    ``budget_s`` caps the timing of the whole key (split evenly over the solutions that passed).
    ``progress(row, measurement)`` is called after each solution is timed.
    ``runner``: where verification and timing run (``InProcess`` by default; ``arbiter.isolate.Isolated``
    for a child process per solution, so a crashing or hanging candidate only fails itself).
    ``timing_lock``: held while timing (not while verifying), so workers sharing one device never time
    at the same time (``arbiter.parallel`` passes one for CPU workers).
    """
    runner = runner or InProcess()
    decision = select.decide(region, store, gate_all=True, all_params=True, verifier=runner.verify)
    cap = 1.0 if budget_s is None else max(0.05, budget_s / max(1, sum(r.status == "passed" for r in decision.rows)))
    modes = [mode] if region.target == "cpu" else list(MODES)  # GPUs: device, latency and stream side by side
    # Time the tier default first, so early screening has a baseline from the start.
    order = [decision.winner] + [r for r in decision.rows if r.status == "passed" and r is not decision.winner]
    with timing_lock or contextlib.nullcontext():
        records = _time_rows(order, region, store, decision.env, runner, mode, cap, modes, progress)
    return _decide_by_time(decision, order, records, region, store)


def _time_rows(order, region, store, env, runner, mode, cap, modes, progress) -> list[MeasurementRecord]:
    """Time each row (screening against the best so far); rows that crash are failed persistently."""
    records, best = [], None
    for row in order:
        m = runner.measure(row.candidate, row.params, region, mode=mode, time_cap_s=cap, best_so_far=best)
        if not isinstance(m, Measurement):
            _crashed_while_timing(row, region, store, env, getattr(m, "reason", str(m)))
            continue
        row.timing = m
        records.append(_record(row, m, region.dims))
        if region.target == "cpu":  # one run serves both modes on the CPU (see arbiter.timing)
            records.append(_record(row, Measurement(**{**m.__dict__, "mode": "latency"}), region.dims))
        else:
            for other in modes:
                if other != mode and not m.screened:
                    extra = runner.measure(row.candidate, row.params, region, mode=other, time_cap_s=cap)
                    if isinstance(extra, Measurement):
                        records.append(_record(row, extra, region.dims))
        if not m.screened and (best is None or m.median_s < best):
            best = m.median_s
        if progress is not None:
            progress(row, m)
    return records


def _decide_by_time(decision, order, records, region, store):
    """Apply the separation rule to the timed rows; persist measurements and the solution."""
    passed = [r for r in decision.rows if r.status == "passed"]
    if not passed:
        from arbiter.errors import NoCandidateError

        raise NoCandidateError(region.key, decision.rows)
    default = next((r for r in order if r.status == "passed"))  # the tier default (or the next one standing)

    # Screened solutions keep their short estimate: it is over 1.5x (or 1.15x) the best, so it ranks last.
    timed = sorted(passed, key=lambda r: (r.timing.screened, r.timing.median_s))
    for rank, row in enumerate(timed, 1):
        row.rank = rank
    fastest = timed[0]
    rival = (timed[1] if len(timed) > 1 else None) if fastest is default else default
    if rival is None:
        ok, margin, note = False, None, "only one solution passed the gate"
    else:
        ok, margin = separated(fastest.timing, rival.timing)
        note = "" if ok else (f"not separated: {fastest.label} {margin * 100:+.1f}% vs {rival.label}, "
                              f"spread {max(fastest.timing.spread, rival.timing.spread) * 100:.1f}%")
    # Only a separated winner is "measured"; a lone solution or a tie leaves the tier default in charge.
    chosen, policy = (fastest, "measured") if ok else (default, "tier")
    decision.winner, decision.policy, decision.note, decision.margin = chosen, policy, note, margin
    store.save_measurements(region.key.id, decision.env.fingerprint, records)
    store.save_solution(SolutionRecord(region.key.id, chosen.candidate.name, chosen.candidate.identity(),
                                       chosen.params, policy, decision.env.fingerprint, margin=margin, note=note),
                        decision.env)
    return decision


def explain_rows(decision, store) -> list[dict]:
    """Plain rows for ``arbiter explain``: every solution, its exclusion or verdict, and stored timings."""
    stored = {(m.candidate, params_id(m.params), m.mode): m
              for m in store.load_measurements(decision.key.id, decision.env.fingerprint)}
    rows = []
    for row in decision.rows:
        pid = params_id(row.params)
        dev, lat = stored.get((row.candidate.name, pid, "device")), stored.get((row.candidate.name, pid, "latency"))
        stream = stored.get((row.candidate.name, pid, "stream"))
        rows.append({
            "solution": row.label, "tier": row.candidate.tier.name, "status": row.status, "reason": row.reason,
            "rel_error": None if row.verdict is None else row.verdict.rel_error,
            "device_us": None if dev is None else dev.median_s * 1e6,
            "latency_us": None if lat is None else lat.median_s * 1e6,
            "stream_us": None if stream is None else stream.median_s * 1e6,
            "spread": None if dev is None else dev.spread,
            "screened": bool(dev and dev.screened),
            "winner": row is decision.winner,
            "contract": None if row.candidate.contract is None else row.candidate.contract.summary(),
            "looser_budget": bool(row.verdict and row.verdict.looser_budget),
        })
    return rows


def budget_clock(budget_s: float | None):
    """A function telling whether the overall ``--budget-seconds`` is spent."""
    end = None if budget_s is None else time.perf_counter() + budget_s
    return lambda: end is not None and time.perf_counter() > end
