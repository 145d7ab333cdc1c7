"""The timing audit: a served winner's real calls timed in the program, and its key re-decided there when it runs
clearly slower than its measurement said (issue 39 item 3).

A tuned choice is measured in a clean room: one op alone, its pool warm or cold by accident. The program runs in a
crowded house (torch's pool beside it, other processes, other ops between calls), where the winner may be slower
than its rival. ``arbiter.configure(timing_audit=rate)`` (else ``ARBITER_TIMING_AUDIT=rate``, else 0) times about
one real call in ``1/rate`` of a winner that was chosen by measurement (the key has stored timings of at least two
solutions under this environment), on the caller's own path (wall time around the call, output allocation
included), and:

* **the test**: after ``SAMPLES`` sampled calls, their median is over ``SLOWER`` x the winner's stored median and
  over it by ``MIN_EXCESS_S`` (a few microseconds of a short call are host noise, not a slower kernel);
* **the re-decision**: the next real calls alternate between the leading solutions (the winner and the
  ``LEADERS - 1`` others with the lowest stored medians whose gate verdicts passed: every call is still served by
  a gated solution), ``ROUNDS`` calls each, each timed; the fastest by the median of its program calls wins if it
  beats the winner by ``MARGIN`` on the median and on the mean (the tail rule of ``arbiter.tune``). It is stored as
  the key's solution (policy ``measured``, its note starting ``PREFIX``, with both figures), the contestants'
  program times replace their stored ``latency`` timings (the next audit compares with those: no flip-flop), and
  the route leaves the table: the next call loads the new winner. A winner that holds is kept, and its route
  stops sampling.

Cost. At rate 0 nothing is spent: ``arm`` leaves the route's ``run`` as it is. At a rate r > 0 an unsampled call
costs one decrement and one compare in a closure (``benchmarks/timing_audit.py`` measures it); a sampled call two
clock reads. The store is read when a route is installed and written once per re-decision. Only targets timed by
the host clock (the CPU) are audited: a device's call would need a synchronize, which changes what it times (waits
for a device session). ``arbiter stats`` shows a re-decided key's policy as ``measured (program)``; ``explain`` and
``report`` show its note.
"""
from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass

import numpy as np

from arbiter import targets
from arbiter.audit import _gap, check_rate, rate_in_force
from arbiter.candidates import REGISTRY
from arbiter.solution import ChosenBy, Solution, TimingMode
from arbiter.store import MeasurementRecord, SolutionRecord, VerdictKey

SAMPLES = 16  # sampled calls before the test
SLOWER = 1.5  # the program's median over the stored median that starts a re-decision
MIN_EXCESS_S = 5e-6  # ... and by at least this much
LEADERS = 3  # solutions alternated on real calls, the winner among them
ROUNDS = 8  # real calls each of them serves, timed
MARGIN = 0.05  # a challenger's win on the program's calls, on the median and the mean
PREFIX = "timed in the program"
log = logging.getLogger("arbiter.timing_audit")

_configured: float | None = None


def configure(rate) -> None:
    """Set the process's timing-audit rate (``dispatch.configure(timing_audit=...)``); None: back to the variable."""
    global _configured
    _configured = None if rate is None else check_rate(rate, "timing_audit")


def rate() -> float:
    """The rate in force: ``configure``'s, else ``ARBITER_TIMING_AUDIT``, else 0. Read on a miss only."""
    return rate_in_force(_configured, "ARBITER_TIMING_AUDIT")


@dataclass
class Counts:
    """What the timing audit did in this process: calls sampled, winners found slower, keys re-decided, kept."""

    sampled: int = 0
    slower: int = 0
    redecided: int = 0
    kept: int = 0


counts = Counts()
HISTORY = 100
history: list[str] = []  # the last HISTORY decisions of this process, as text (kept or re-decided, with figures)


def _remember(text: str) -> None:
    history.append(text)
    del history[:-HISTORY]


def _same(record, solution: Solution) -> bool:
    return record.candidate_name == solution.candidate_name and record.params == solution.params


def _stored_medians(store, route) -> list:
    """The key's stored timings under the route's environment, one per solution (``latency`` where there is one,
    else ``device``), fastest first."""
    best: dict = {}
    for m in store.load_measurements(route.key.id, route.env.fingerprint):
        if m.mode not in (TimingMode.LATENCY, TimingMode.DEVICE) or m.screened:
            continue
        ident = (m.candidate_name, repr(sorted(m.params.items())))
        if ident not in best or m.mode == TimingMode.LATENCY:
            best[ident] = m
    return sorted(best.values(), key=lambda m: m.median_s)


def arm(route, table: dict, store_of) -> None:
    """Wrap ``route.run`` in the timing sampler when the rate is above 0 and the route's winner was chosen by
    measurement on a host-clock target; otherwise leave it as it is."""
    if route.chosen_by != ChosenBy.MEASURED:
        return
    r = rate()
    if r <= 0.0 or not targets.get(route.key.target).host_clock:
        return
    try:
        stored = _stored_medians(store_of(), route)
    except Exception:  # registry trouble is the miss path's to report; the audit just does not arm
        return
    mine = next((m for m in stored if _same(m, route.solution)), None)
    if mine is None or len(stored) < 2:
        return
    route.run = _sampler(route, route.run, r, mine.median_s, stored, table, store_of)


def _sampler(route, run, rate: float, measured_s: float, stored: list, table: dict, store_of):
    rng = random.Random()
    left = _gap(rng, rate)
    program: list[int] = []
    alternate = None  # the re-decision's call, once the test has failed

    def timed(region, params):
        nonlocal left, alternate
        if alternate is not None:
            return alternate(region, params)
        left -= 1
        if left > 0:
            return run(region, params)
        left = _gap(rng, rate)
        t0 = time.perf_counter_ns()
        result = run(region, params)
        program.append(time.perf_counter_ns() - t0)
        counts.sampled += 1
        if len(program) >= SAMPLES:
            median_s = float(np.median(program)) * 1e-9
            program.clear()
            if median_s > SLOWER * measured_s and median_s - measured_s > MIN_EXCESS_S:
                counts.slower += 1
                alternate = _alternation(route, run, region, median_s, measured_s, stored, table, store_of)
                if alternate is None:
                    route.run = run  # nothing to alternate with: sampling stops for this route
        return result

    return timed


def _contestants(route, run, region, stored, store) -> list:
    """[(solution, candidate, params, call)]: the winner first, then up to ``LEADERS - 1`` others by stored median
    whose gate verdicts passed here."""
    found = [(route.solution, route.candidate, route.params, run)]
    for m in stored:
        if len(found) >= LEADERS or _same(m, route.solution):
            continue
        cand = REGISTRY.get(m.candidate_name, route.key.target, route.key.op)
        if cand is None or cand.available() is not True:
            continue
        solution = Solution.of(cand, m.params)
        verdict = store.load_verdict(VerdictKey.of(solution, route.key.id, route.env.fingerprint))
        if verdict is None or not verdict.passed:
            continue
        found.append((Solution(cand.name, m.params), cand, m.params, cand.run))
    return found


def _alternation(route, run, region, program_s: float, measured_s: float, stored: list, table: dict, store_of):
    """The call that serves the next real calls in turn from the leading solutions (None when the winner has no
    gated rival); when each has served ``ROUNDS`` it decides (``_decide``)."""
    store = store_of()
    try:
        contestants = _contestants(route, run, region, stored, store)
    except Exception:
        return None
    if len(contestants) < 2:
        return None
    times: list[list[int]] = [[] for _ in contestants]
    turn = [0]

    def alternate(region, params):
        i = turn[0] % len(contestants)
        turn[0] += 1
        _, cand, own, call = contestants[i]
        if i and cand.applies_to(region) is not True:  # another instance of the key's bucket: the winner serves
            return run(region, params)
        t0 = time.perf_counter_ns()
        result = call(region, own if i else params)
        times[i].append(time.perf_counter_ns() - t0)
        if all(len(t) >= ROUNDS for t in times):
            route.run = run  # decided: no more alternation or sampling on this route
            _decide(route, contestants, times, program_s, measured_s, table, store)
        return result

    return alternate


def _decide(route, contestants, times, program_s: float, measured_s: float, table: dict, store) -> None:
    medians = [float(np.median(t)) * 1e-9 for t in times]
    means = [float(np.mean(t)) * 1e-9 for t in times]
    best = min(range(len(contestants)), key=medians.__getitem__)
    figures = ", ".join(f"{c[0].label} {m * 1e6:.1f} us (mean {a * 1e6:.1f})" for c, m, a in zip(contestants, medians,
                                                                                               means))
    if best == 0 or not (medians[0] > (1 + MARGIN) * medians[best] and means[0] > (1 + MARGIN) * means[best]):
        counts.kept += 1
        text = (f"{route.label} at key {route.key.id} took {program_s * 1e6:.1f} us in the program (measured "
                f"{measured_s * 1e6:.1f} us); on real calls {figures}: kept")
        _remember(text)
        log.info("arbiter: %s", text)
        return
    winner, cand, params, _ = contestants[best]
    margin = medians[0] / medians[best] - 1.0
    note = (f"{PREFIX}: {route.label} took {program_s * 1e6:.1f} us a call in the program where it was measured at "
            f"{measured_s * 1e6:.1f} us; on {len(times[0])} real calls each, {winner.label} {medians[best] * 1e6:.1f} "
            f"us (mean {means[best] * 1e6:.1f}) against {medians[0] * 1e6:.1f} us (mean {means[0] * 1e6:.1f}): "
            f"{1 + margin:.2f}x faster")
    try:
        records = [m for m in store.load_measurements(route.key.id, route.env.fingerprint)
                   if not (m.mode == TimingMode.LATENCY and any(_same(m, c[0]) for c in contestants))]
        for (solution, _, own, _), t in zip(contestants, times):
            a = np.asarray(t) * 1e-9
            med = float(np.median(a))
            p20, p80 = (float(v) for v in np.percentile(a, [20, 80]))
            records.append(MeasurementRecord(solution.candidate_name, own, TimingMode.LATENCY, med, p20, p80,
                                             (p80 - p20) / med if med else 0.0, len(t), 0.0, False, None))
        with store.transaction():
            store.save_measurements(route.key.id, route.env.fingerprint, records)
            store.save_solution(SolutionRecord.of(route.key.id, Solution.of(cand, params), ChosenBy.MEASURED,
                                                  route.env.fingerprint, margin=margin, note=note), route.env)
    except Exception as exc:  # registry trouble: the program keeps its winner, and says why it could not store
        log.warning("arbiter: the timing audit could not store its re-decision of %s: %s", route.key.id, exc)
        return
    counts.redecided += 1
    _remember(f"key {route.key.id} re-decided: {note}; on real calls {figures}")
    log.warning("arbiter: key %s re-decided on the program's calls: %s", route.key.id, note)
    key_id = route.key.id
    if table.get(key_id) is route:  # the next call misses and loads the new winner
        table.pop(key_id, None)
