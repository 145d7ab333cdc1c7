"""Measured selection for one problem key (DESIGN.md contracts 2 and 3).

``tune_region(region, store)``: gate every solution (every candidate, every
parameter set), time each one that passed (once per distinct launch: ``distinct_launches``), and decide:

* the fastest solution becomes the key's solution with policy ``measured`` when
  its margin over the next (or, when it is not the tier default, over the tier
  default) beats the noise: ``margin > SEPARATION x max(spread of the two)``; on the
  CPU (shared cores, drifting load) the two are timed again in alternating rounds
  (``timing.paired_rounds``) and the paired ratios decide: a sign test under
  ``PAIRED_ALPHA`` and a median margin over ``PAIRED_MIN_MARGIN``;
* otherwise the tier default stays, policy ``tier``, noted "... but not separated"
  (or "no other solution to time", with how many were excluded and how many failed the gate).

Measurements (device, latency and stream modes side by side on GPUs; ``mode`` decides, ``device``
by default), the verdicts and the solution are persisted, in one transaction.
"""
from __future__ import annotations

import contextlib
import functools
import time

import numpy as np

from arbiter import env as envmod
from arbiter import select, targets
from arbiter.errors import NoCandidateError
from arbiter.request import Request
from arbiter.select import Status
from arbiter.solution import ChosenBy, Solution, TimingMode
from arbiter.store import MeasurementRecord, SolutionRecord, Verdict, VerdictKey
from arbiter.timing import Measurement, Paired, interleaved_rounds, measure, rounds_measurement, solution_calls

SEPARATION = 2.0  # a margin must exceed twice the relative spread to count
# A winner more than RETIME_RATIO x faster than its rival is more often a stalled rival (threads of
# another library still spinning, a neighbour's burst on a shared core) than a win: both are timed
# again, unscreened, before it counts. No sleep comes before a timed call (issue 39 item 2): a program calls its
# kernels back to back, and a BLAS pool woken after a sleep on a busy box took 14 ms for a 150 us call.
RETIME_RATIO = 10.0
# The CPU's decision between the fastest and its rival, on paired alternating rounds: separated when the sign test
# says the same side won too many rounds for chance (one-sided p under PAIRED_ALPHA) and the median paired margin
# is over PAIRED_MIN_MARGIN (smaller margins are not worth leaving the tier default for).
PAIRED_ALPHA = 0.01
PAIRED_MIN_MARGIN = 0.05
# How many of the fastest solutions (by their first timing, the tier default always among them) take part in the
# interleaved rounds: a first timing on shared cores may rank a stalled solution low, so more than two compete.
PAIRED_CONTESTANTS = 4
# The tail (issue 39 item 2). A program pays every call, its stalls included: a solution whose rounds are bimodal
# (a pool woken late, a thread descheduled) is judged by its mean over the rounds as well as its median. A win
# on the median must also be a win on the mean; and a default whose tail makes its mean over TAIL_RATIO x its
# median loses to a steadier solution whose mean is lower by the margin in all but TAIL_ALPHA of resamplings.
TAIL_RATIO = 1.25
TAIL_ALPHA = 0.01
TAIL_RESAMPLES = 2000


# What the tuner asks of selection: every solution of every parameter set gated (the request's tuning fields are
# the tuner's own arguments).
_EVERY_SOLUTION = Request(explain=True, all_params=True)


def _record(row, m, dims) -> MeasurementRecord:
    return MeasurementRecord(row.candidate.name, row.params, m.mode, m.median_s, m.p20_s, m.p80_s, m.spread,
                             m.reps, m.warmup_s, m.screened, dict(dims))


def separated(fast, slow) -> tuple[bool, float]:
    """(whether ``fast`` beats ``slow`` beyond the noise, the margin slow/fast - 1)."""
    margin = slow.median_s / fast.median_s - 1.0
    return margin > SEPARATION * max(fast.spread, slow.spread), margin


class InProcess:
    """Verify and time in this process (the default runner)."""

    verify = None  # select.choose then uses arbiter.verify.verify

    @staticmethod
    def measure(candidate, params, region, **kwargs):
        return measure(candidate, params, region, **kwargs)

    @staticmethod
    def interleave(rows, region, *, estimate_s: float, time_cap_s: float, enough=None) -> list[list[float]]:
        """Interleaved rounds of several solutions (CPU): see ``timing.interleaved_rounds``."""
        return interleaved_rounds([solution_calls(r.candidate, r.params, region, seed=i) for i, r in enumerate(rows)],
                                  estimate_s=estimate_s, time_cap_s=time_cap_s, enough=enough)


def _crashed_while_timing(row, region, store, env, reason: str) -> None:
    """A solution that passed the gate but crashed when timed: fail it, persistently, so it is never served."""
    row.status, row.reason = Status.FAILED, f"crashed while timed: {reason}"
    v = row.verdict
    row.verdict = Verdict(False, row.reason, v.rel_error, v.max_excess, v.probes, v.budget, v.looser_budget,
                          v.seconds)
    store.save_verdict(VerdictKey.of(Solution.of(row.candidate, row.params), region.key.id, env.fingerprint),
                       row.verdict, row.candidate)


def tune_region(region, store, *, mode: str = TimingMode.DEVICE, budget_s: float | None = None, progress=None,
                runner=None, timing_lock=None, gate_s: float | None = None, env=None, target=None):
    """Gate and time every solution for ``region``'s key; persist and return the ``Decision``.

    ``budget_s`` caps the timing of the whole key (split evenly over the solutions that passed).
    ``gate_s`` caps its gating: no new solution is gated after that long once two have passed (they are gated
    breadth first, every candidate's default before other parameter sets; the rest stay unchecked, and the
    stored note says how many). A GPU key's gate compiles each Triton tile it tries: seconds each.
    ``progress(row, measurement)`` is called after each solution is timed; a ``progress.phase(name, total)``, when
    it has one, when the gate is done ("timing", the launches to time) and when the timing is ("deciding", None).
    ``runner``: where verification and timing run (``InProcess`` by default; ``arbiter.isolate.Isolated``
    for a child process per solution, so a crashing or hanging candidate only fails itself).
    ``timing_lock``: held while timing (not while verifying), so workers sharing one device never time
    at the same time (``arbiter.parallel`` passes one for CPU workers).
    ``env``, ``target``: the environment key and the ``Target`` its caller resolved (``arbiter.decide.decide``
    resolves them once per key); looked up here when not given (a benchmark or a test calling this directly).
    Inside ``arbiter`` the way in is ``decide.decide(region, request.tune(...), store)``.
    """
    runner = runner or InProcess()
    target = target or targets.get(region.target)
    env = env or envmod.environment(region.target)
    # One commit for the key: its verdicts, measurements and solution, or nothing. Committed apart, a process
    # killed between them left measurements without a solution, a key later runs skip as "tuned already"
    # and `doctor` calls healthy (issue 20 item 5).
    nothing_passed = None
    with store.transaction():
        try:
            decision = select.choose(region, store, _EVERY_SOLUTION, env, verifier=runner.verify,
                                     gate_until=None if gate_s is None else time.monotonic() + gate_s)
        except NoCandidateError as exc:  # every verdict failed: they are still worth keeping
            nothing_passed = exc
        else:
            cap = 1.0 if budget_s is None else max(0.05, budget_s / max(1, sum(r.status == Status.PASSED
                                                                               for r in decision.rows)))
            modes = [mode] if target.host_clock else list(TimingMode)  # GPUs: device, latency, stream
            # Time the tier default first, so early screening has a baseline from the start.
            order = distinct_launches([decision.winner] + [r for r in decision.rows
                                                           if r.status == Status.PASSED and r is not decision.winner],
                                      region)
            phase = getattr(progress, "phase", None)  # a progress bar that shows what the key is doing
            if phase is not None:
                phase("timing", len(order))
            with timing_lock or contextlib.nullcontext():
                records = _time_rows(order, region, store, decision.env, runner, mode, cap, modes, progress, target)
                if phase is not None:
                    phase("deciding (paired rounds)" if target.host_cores else "deciding", None)
                retime = functools.partial(_retime, region=region, runner=runner, mode=mode, cap=cap,
                                           records=records, host_clock=target.host_clock)
                pair = (functools.partial(_decide_paired, region=region, runner=runner, cap=cap, records=records)
                        if target.host_cores and hasattr(runner, "interleave") else None)
                try:
                    decision = _decide_by_time(decision, order, records, region, store, retime, pair,
                                               _untried(decision.rows, gate_s))
                except NoCandidateError as exc:  # every solution crashed while timed: keep their failed verdicts
                    nothing_passed = exc
    if nothing_passed is not None:
        raise nothing_passed
    return decision


def distinct_launches(rows, region) -> list:
    """``rows`` less those whose parameters run the same code on ``region`` as an earlier row of the same candidate
    (``Candidate.launch_signature``): timing one kernel twice costs tuning time and can only crown noise. A row
    left out keeps its passed verdict; its reason names the row timed for it, and it ranks nowhere."""
    timed: list = []
    first: dict = {}  # (candidate, signature) -> the first row with it
    for row in rows:
        try:
            twin = first.setdefault((row.candidate.name, row.candidate.launch_signature(region, row.params)), row)
        except Exception:  # raised, or not hashable: the candidate's fault, never the tuner's; timed on its own
            twin = row
        if twin is row:
            timed.append(row)
        else:
            row.rank, row.reason = None, f"runs as {twin.label}: timed once"
    return timed


def _measure(runner, row, region, **kwargs):
    """A Measurement, or what went wrong: a runner's Crash, or the exception the solution raised in this process.

    A solution that passed the gate may still raise once timed (another input, more calls); it fails alone,
    with the reason, and the key is still decided by the others (issue 20 item 13).
    """
    try:
        return runner.measure(row.candidate, row.params, region, **kwargs)
    except Exception as exc:  # the candidate's fault, never the tuner's: record it, time the rest
        return f"raised {type(exc).__name__}: {exc}"


def _time_rows(order, region, store, env, runner, mode, cap, modes, progress, target) -> list[MeasurementRecord]:
    """Time each row (screening against the best so far); rows that crash are failed persistently."""
    records, best = [], None
    for row in order:
        m = _measure(runner, row, region, mode=mode, time_cap_s=cap, best_so_far=best)
        if not isinstance(m, Measurement):
            _crashed_while_timing(row, region, store, env, getattr(m, "reason", str(m)))
            continue
        mine = [_record(row, m, region.dims)]
        if target.host_clock:  # one run serves both modes on the host clock (see arbiter.timing)
            mine.append(_record(row, Measurement(**{**m.__dict__, "mode": TimingMode.LATENCY}), region.dims))
        else:
            crashed = None
            for other in modes:
                if other != mode and not m.screened:
                    extra = _measure(runner, row, region, mode=other, time_cap_s=cap)
                    if isinstance(extra, Measurement):
                        mine.append(_record(row, extra, region.dims))
                    else:
                        crashed = getattr(extra, "reason", str(extra))
            if crashed is not None:  # no figure for a solution that crashes in either mode
                _crashed_while_timing(row, region, store, env, crashed)
                continue
        row.timing = m
        records += mine
        if not m.screened and (best is None or m.median_s < best):
            best = m.median_s
        if progress is not None:
            progress(row, m)
    return records


def _paired_enough(p: Paired) -> bool:
    """Stop the rounds early on a clear win (a tie is never concluded early: on a loaded box a few rounds' median
    ratio is often 1 while the margin is real)."""
    return p.p_value < PAIRED_ALPHA / 10 and p.ratio - 1 > PAIRED_MIN_MARGIN


def _leaders(samples: list[list[float]], default_index: int) -> tuple[int, int]:
    """(the side with the lowest median, its rival: the tier default's side, or the runner-up when it is the
    default)."""
    order = sorted(range(len(samples)), key=lambda i: float(np.median(samples[i])))
    fast = order[0]
    return fast, (order[1] if fast == default_index else default_index)


def _tier_position(passed, row) -> int:
    """``row``'s place in tier order (``passed`` keeps the decision's order: tier, priority, parameter sets)."""
    return next(i for i, r in enumerate(passed) if r is row)


def _decide_paired(fastest, rival, passed, default, *, region, runner, cap, records):
    """The CPU's decision: the fastest few solutions (``PAIRED_CONTESTANTS``, the tier default among them) timed in
    interleaved rounds; the fastest of the rounds against its rival (the tier default, or the runner-up when it is
    the default) on their paired ratios. Returns (fastest, rival, ok, margin, what the rounds said, the paired
    ratios' spread). The contestants' Measurements (and records) become their samples of the rounds, so explain
    shows the figures the decision read."""
    ranked = sorted(passed, key=lambda r: (r.timing.screened, r.timing.median_s))
    rows = [fastest, rival] + [r for r in ranked if r is not fastest and r is not rival][:PAIRED_CONTESTANTS - 2]
    d = next(i for i, r in enumerate(rows) if r is default)
    estimate = min(r.timing.median_s for r in rows)

    def enough(samples):
        a, b = _leaders(samples, d)
        if any(float(np.mean(samples[i])) > TAIL_RATIO * float(np.median(samples[i])) for i in (a, b)):
            return False  # a bimodal side: its tail needs every round the cap allows
        return _paired_enough(Paired(tuple(samples[a]), tuple(samples[b])))

    try:
        samples = runner.interleave(rows, region, estimate_s=estimate, time_cap_s=max(0.2, min(1.5, 3 * cap)),
                                    enough=enough)
    except Exception as exc:  # a crash now: the first timings stand, and nothing is separated
        margin = rival.timing.median_s / fastest.timing.median_s - 1.0
        return fastest, rival, False, margin, f"interleaved rounds raised {type(exc).__name__}: {exc}", None
    for row, mine in zip(rows, samples):
        row.timing = rounds_measurement(mine, row.timing.warmup_s)
        records[:] = [r for r in records if r.solution != row.solution]
        records.extend(_record(row, Measurement(**{**row.timing.__dict__, "mode": each}), region.dims)
                       for each in (TimingMode.DEVICE, TimingMode.LATENCY))
    a, b = _leaders(samples, d)
    p = Paired(tuple(samples[a]), tuple(samples[b]))
    ok = p.p_value < PAIRED_ALPHA and p.ratio - 1.0 > PAIRED_MIN_MARGIN
    tied = tail = ""
    means = [float(np.mean(s)) for s in samples]
    if ok and a != d and means[a] >= means[d]:  # a win on the median lost in the tail is no win
        ok = False
        tail = (f"{rows[a].label} faster on the median but not on the mean ({means[a] * 1e6:.1f} against "
                f"{means[d] * 1e6:.1f} us: its tail)")
    if ok and a != d:
        # Two solutions both beat the default but not each other: the earlier in tier order wins, every run (the
        # rounds' own leader between them is noise, and a registry that flips between them on re-tuning is worse).
        for c in sorted(range(len(rows)), key=lambda i: float(np.median(samples[i]))):
            if c in (a, d) or _tier_position(passed, rows[c]) > _tier_position(passed, rows[a]):
                continue
            vs_c, vs_d = Paired(tuple(samples[a]), tuple(samples[c])), Paired(tuple(samples[c]), tuple(samples[d]))
            if not (vs_c.p_value < PAIRED_ALPHA and vs_c.ratio - 1.0 > PAIRED_MIN_MARGIN) and (
                    vs_d.p_value < PAIRED_ALPHA and vs_d.ratio - 1.0 > PAIRED_MIN_MARGIN) and means[c] < means[d]:
                tied = f"{rows[c].label} tied with {rows[a].label} and earlier in tier order"
                a, p = c, vs_d
                break
    margin = p.ratio - 1.0
    if not ok or a == d:
        steady = _tail_win(samples, d)
        if steady is not None:
            a, b, ok = steady, d, True
            margin = means[d] / means[a] - 1.0
            tail = (f"{rows[d].label} is bimodal (mean {means[d] * 1e6:.1f} us, median "
                    f"{float(np.median(samples[d])) * 1e6:.1f} us): {rows[a].label} is {1 + margin:.2f}x faster on "
                    "the mean, what a program pays")
    fastest, rival = rows[a], rows[b]
    _rank(passed, default)
    rounds = (f"{len(rows)} solutions in {len(p.a_s)} interleaved rounds: {fastest.label} faster than "
              f"{rival.label} in {p.wins} of them, ratio spread {p.spread * 100:.0f}%")
    return fastest, rival, ok, margin, "; ".join(filter(None, [rounds, tied, tail])), p.spread


def _tail_win(samples: list[list[float]], d: int) -> int | None:
    """The side that beats the tier default ``d`` on the mean over the rounds when ``d``'s tail makes its mean over
    ``TAIL_RATIO`` x its median (bimodal: some calls stalled), or None. The win must hold on resampled rounds: the
    default's mean over the other's above ``1 + PAIRED_MIN_MARGIN`` in all but ``TAIL_ALPHA`` of
    ``TAIL_RESAMPLES`` bootstrap resamplings of the rounds (paired: a resampled round keeps both sides' samples)."""
    means = [float(np.mean(s)) for s in samples]
    if means[d] <= TAIL_RATIO * float(np.median(samples[d])):
        return None
    c = min((i for i in range(len(samples)) if i != d), key=means.__getitem__, default=None)
    if c is None or means[d] / means[c] - 1.0 <= PAIRED_MIN_MARGIN:
        return None
    n = min(len(samples[c]), len(samples[d]))
    mine, theirs = np.asarray(samples[c][:n]), np.asarray(samples[d][:n])
    picks = np.random.default_rng(n).integers(0, n, (TAIL_RESAMPLES, n))  # seeded: a run's verdicts repeat
    ratios = theirs[picks].mean(axis=1) / mine[picks].mean(axis=1)
    return c if float(np.mean(ratios <= 1.0 + PAIRED_MIN_MARGIN)) < TAIL_ALPHA else None


def _versus(fastest, rival, margin: float, ok: bool, spread: float | None = None) -> str:
    """Who is faster than whom, by how much, and whether that beats the noise (``spread``: the paired ratios'
    when paired rounds decided, else the larger of the two measurements')."""
    spread = (max(fastest.timing.spread, rival.timing.spread) if spread is None else spread) * 100
    faster = f"{fastest.label} is {1 + margin:.2f}x faster than {rival.label}"  # a ratio reads at a glance
    return f"{faster} (spread {spread:.1f}%)" if ok else f"{faster}, but not separated: spread {spread:.1f}%"


def _alone(rows) -> str:
    """Why one solution was timed alone: how many others were excluded, and how many failed the gate."""
    excluded = sum(r.status == Status.EXCLUDED for r in rows)
    failed = sum(r.status == Status.FAILED for r in rows)
    twins = sum(r.status == Status.PASSED and r.timing is None and bool(r.reason) for r in rows)
    why = [f"{excluded} excluded (unavailable or not applicable)"] if excluded else []
    why += [f"{failed} failed the gate"] if failed else []
    why += [f"{twins} run as the one timed"] if twins else []
    return "no other solution to time: " + (", ".join(why) if why else "it is the only one registered")


def _retime(rows, *, region, runner, mode, cap, records, host_clock: bool) -> None:
    """Time ``rows`` again in this order, without screening (each warmed up first, never after a sleep); replace
    their records."""
    for row in rows:
        m = _measure(runner, row, region, mode=mode, time_cap_s=cap)
        if not isinstance(m, Measurement):
            continue  # it ran before; a crash now keeps the first timing (the gate verdict stands)
        row.timing = m
        modes = (mode, TimingMode.LATENCY) if host_clock else (mode,)
        records[:] = [r for r in records if not (r.solution == row.solution and r.mode in modes)]
        records.extend(_record(row, Measurement(**{**m.__dict__, "mode": each}), region.dims) for each in modes)


def _rank(passed, default):
    """(fastest, its rival): the runner-up when the fastest is the tier default, else the tier default."""
    # Screened solutions keep their short estimate: it is over 1.5x (or 1.15x) the best, so it ranks last.
    timed = sorted(passed, key=lambda r: (r.timing.screened, r.timing.median_s))
    for rank, row in enumerate(timed, 1):
        row.rank = rank
    fastest = timed[0]
    return fastest, (timed[1] if len(timed) > 1 else None) if fastest is default else default


def _untried(rows, gate_s) -> str:
    """What a gate budget left out, for the stored note ("" when it left nothing)."""
    untried = sum(r.reason == select.UNTRIED for r in rows)
    if not untried:
        return ""
    gated = sum(r.status in (Status.PASSED, Status.FAILED) for r in rows)
    return f"{untried} solution(s) not gated within the {gate_s:g} s gate budget ({gated} gated)"


def _decide_by_time(decision, order, records, region, store, retime=None, pair=None, untried=""):
    """Apply the separation rule to the timed rows (re-timing a margin over RETIME_RATIO first; on the CPU
    ``pair`` decides on paired rounds, ``_decide_paired``); persist measurements and the solution."""
    passed = [r for r in decision.rows if r.status == Status.PASSED and r.timing is not None]
    if not passed:
        raise NoCandidateError(region.key, decision.rows)
    default = next(r for r in order if any(r is p for p in passed))  # the tier default (or the next standing)
    fastest, rival = _rank(passed, default)
    retimed = ""
    if rival is not None and retime is not None and rival.timing.median_s > RETIME_RATIO * fastest.timing.median_s:
        before = rival.timing.median_s / fastest.timing.median_s - 1.0
        retime([fastest, rival])
        fastest, rival = _rank(passed, default)
        retimed = f"re-timed a margin of {before * 100:+.0f}%"
    if rival is None:
        ok, margin, note = False, None, _alone(decision.rows)
    elif pair is not None:
        fastest, rival, ok, margin, rounds, spread = pair(fastest, rival, passed, default)
        note = "; ".join([_versus(fastest, rival, margin, ok, spread), rounds])
    else:
        ok, margin = separated(fastest.timing, rival.timing)
        if ok and retime is not None:
            # Confirm a separated margin by timing the two again in the other order (the rival first): load
            # that drifts during a run favours whichever was timed in the quieter moment, and only a margin
            # that survives both orders is stable from one run to the next.
            retime([rival, fastest])
            again, margin_again = separated(fastest.timing, rival.timing)
            if again:
                margin = min(margin, margin_again)
                _rank(passed, default)
            else:  # the note then says who is faster now
                fastest, rival = _rank(passed, default)
                ok, margin = False, separated(fastest.timing, rival.timing)[1]
                retimed = "; ".join(filter(None, [retimed, "a win not confirmed when timed again"]))
        note = _versus(fastest, rival, margin, ok)
    note = "; ".join(filter(None, [note, retimed, untried]))
    # Only a separated winner is "measured"; a lone solution or a tie leaves the tier default in charge.
    chosen, chosen_by = (fastest, ChosenBy.MEASURED) if ok else (default, ChosenBy.TIER)
    decision.winner, decision.chosen_by, decision.note, decision.margin = chosen, chosen_by, note, margin
    store.save_measurements(region.key.id, decision.env.fingerprint, records)
    store.save_solution(SolutionRecord.of(region.key.id, Solution.of(chosen.candidate, chosen.params), chosen_by,
                                          decision.env.fingerprint, margin=margin, note=note),
                        decision.env)
    return decision


def explain_rows(decision, store) -> list[dict]:
    """Plain rows for ``arbiter explain``: every solution, its exclusion or verdict, and stored timings."""
    stored = {(m.solution, m.mode): m for m in store.load_measurements(decision.key.id, decision.env.fingerprint)}
    rows = []
    for row in decision.rows:
        solution = row.solution
        dev, lat, stream = (stored.get((solution, mode)) for mode in TimingMode)
        rows.append({
            "solution": solution.label, "tier": row.candidate.tier.name, "status": str(row.status),
            "reason": row.reason,
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
