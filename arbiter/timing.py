"""The timing engine: one interface, one timer per target.

``measure(candidate, params, region)`` times one solution and returns a
``Measurement`` (mode, median, p20/p80, relative spread, repetitions, warm-up
time, whether it was screened out early).

What is timed is what ``run_arbitrated`` executes for a caller without ``out=``
(``arbiter.candidates.serve``): the candidate's wrapper, its output allocation
(CuPy's pool, or torch's caching allocator for a torch caller), the stream
choice and the conversion back to the caller's array type. Nothing is
preallocated for it; the gate's NaN-poisoned outputs belong to the gate only.

How (DESIGN.md contract 3):

* warm-up: the first calls (compilation, handle creation, module load) run
  untimed until two consecutive calls agree within 2x, their time reported as
  ``warmup_s``;
* inputs: when one input set fits in the cache, several fresh sets are rotated
  so repetitions don't measure a warm cache (a torch caller's region is timed
  on its own tensors, the L2 flushed between repetitions);
* GPUs: the L2 is flushed before every repetition, outside the timed region;
* stop when the relative spread ``(p80 - p20) / median`` is under
  ``target_spread`` after ``min_reps``, or at ``time_cap_s`` or ``max_reps``;
* screening: a candidate whose median is over 1.5x the best so far after 3
  repetitions, or 1.15x after 10, stops there (``screened=True``);
* modes (``MODES``), recorded side by side by ``arbiter tune`` on GPUs:
  ``device``: events on the stream around one call (CPU: ``perf_counter_ns``,
  the CPU being the device); ``latency``: host clock around one call plus a
  synchronize, what a Python caller waits, launch overhead included; ``stream``:
  ``STREAM_CALLS`` calls back to back between two events, per call, the regime
  of a model running eagerly, where host work overlaps the previous kernel.
  On the CPU the three coincide. ``tune_region`` and ``arbiter tune`` select by
  ``device`` unless told otherwise (``mode=``, ``--mode``); a miss under policy
  ``tune`` selects in the mode its caller runs (``dispatch.tune_mode``: ``stream``
  for an eager GPU caller, ``device`` inside ``arbiter.capture``).
"""
from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass

import numpy as np

from arbiter import targets
from arbiter.candidates import serve
from arbiter.solution import TimingMode
from arbiter.targets import Timer

MODES = tuple(TimingMode)  # device, latency, stream
STREAM_CALLS = 20  # calls per sample in stream mode
DEFAULT_SCREEN = ((3, 1.5), (10, 1.15))


@dataclass(frozen=True)
class Measurement:
    mode: str
    median_s: float
    p20_s: float
    p80_s: float
    spread: float
    reps: int
    warmup_s: float
    screened: bool = False

    def __str__(self):
        tag = " screened" if self.screened else ""
        return f"{self.median_s * 1e6:.1f} us ±{self.spread * 100:.1f}% ({self.reps} reps, {self.mode}{tag})"


def timer_for(target: str) -> Timer:
    """``target``'s timer (events and cache flush on a GPU; the host clock on the CPU)."""
    return targets.get(target).timer()


def _nbytes(region) -> int:
    total = sum(int(a.nbytes) for a in region.operands().values())
    return total + math.prod(region.output_shape()) * int(np.dtype("float32").itemsize if region.dtype == "bfloat16"
                                                           else np.dtype(region.dtype).itemsize)


def input_sets(region, timer: Timer, rng: np.random.Generator, max_sets: int = 8) -> list:
    """The region plus fresh copies, enough that rotating them overflows the cache.

    No output is preallocated: each call allocates its own, as a dispatched call does. A region whose
    caller gave ``out=`` keeps it (that call writes there). A torch caller's region is used alone
    (fresh copies would be CuPy arrays: another caller's path).
    """
    size = _nbytes(region)
    n = 1
    if size and size * 2 < timer.cache_bytes and region.torch_in is None:
        n = min(max_sets, math.ceil(2 * timer.cache_bytes / size))
    fresh = [region.fresh(rng) for _ in range(n - 1)]
    if region.out is not None:  # a call with out= is timed as one: each fresh set gets its own out
        fresh = [r.with_out(r.alloc_out()) for r in fresh]
    return [region] + fresh


def _summary(samples: list[float], mode, warmup_s, screened) -> Measurement:
    a = np.asarray(samples)
    med = float(np.median(a))
    p20, p80 = (float(v) for v in np.percentile(a, [20, 80]))
    return Measurement(mode, med, p20, p80, (p80 - p20) / med if med > 0 else 0.0, len(samples), warmup_s, screened)


def solution_calls(candidate, params: dict, region, seed: int = 0) -> list:
    """Zero-argument calls of one solution as ``run_arbitrated`` runs it, one per input set (``input_sets``)."""
    sets = input_sets(region, timer_for(region.target), np.random.default_rng(seed))
    return [lambda r=r: serve(candidate, params, r) for r in sets]


def measure(candidate, params: dict, region, *, mode: str = "device", min_reps: int = 5, max_reps: int = 200,
            target_spread: float = 0.03, time_cap_s: float = 1.0, best_so_far: float | None = None,
            screen=DEFAULT_SCREEN, seed: int = 0) -> Measurement:
    """Time one solution on ``region`` (which must already have passed the gate), as ``run_arbitrated``
    runs it (``arbiter.candidates.serve``)."""
    if mode not in MODES:
        raise ValueError(f"mode: {mode!r} is not one of {', '.join(MODES)}")
    sets = input_sets(region, timer_for(region.target), np.random.default_rng(seed))
    calls = [lambda r=r: serve(candidate, params, r) for r in sets]
    return measure_calls(calls, region.target, mode=mode, min_reps=min_reps, max_reps=max_reps,
                         target_spread=target_spread, time_cap_s=time_cap_s, best_so_far=best_so_far,
                         screen=screen)


def measure_calls(calls: list, target_name: str, *, mode: str = "device", min_reps: int = 5,
                  max_reps: int = 200, target_spread: float = 0.03, time_cap_s: float = 1.0,
                  best_so_far: float | None = None, screen=DEFAULT_SCREEN,
                  stream_calls: int = STREAM_CALLS) -> Measurement:
    """Time zero-argument ``calls`` (one per input set, rotated) on ``target_name``'s timer in ``mode``.

    ``measure`` uses it for solutions; benchmarks use it for peers (torch eager, a bare kernel launch) so
    both sides are timed by the same rules.
    """
    if mode not in MODES:
        raise ValueError(f"mode: {mode!r} is not one of {', '.join(MODES)}")
    timer = timer_for(target_name)
    target = targets.get(target_name)

    # Warm-up: untimed until two consecutive calls agree within 2x (compilation and handles are out).
    warm_start = time.perf_counter()
    previous = None
    for i in range(10):
        t0 = time.perf_counter()
        calls[i % len(calls)]()
        target.synchronize()
        took = time.perf_counter() - t0
        if previous is not None and took < 2 * previous and previous < 2 * took:
            break
        previous = took
    warmup_s = time.perf_counter() - warm_start

    samples: list[float] = []
    deadline = time.perf_counter() + time_cap_s
    screened = False
    batch = stream_calls if mode == "stream" else 1
    turn = [0]

    def rotated():
        calls[turn[0] % len(calls)]()
        turn[0] += 1

    while len(samples) < max_reps:
        timer.flush_cache()
        samples.append(timer.time(rotated, mode, batch))
        n = len(samples)
        if best_so_far is not None:
            med = float(np.median(samples))
            if any(n == after and med > factor * best_so_far for after, factor in screen):
                screened = True
                break
        if n >= min_reps:
            if time.perf_counter() > deadline:
                break
            m = _summary(samples, mode, warmup_s, False)
            if m.spread <= target_spread:
                break
    return _summary(samples, mode, warmup_s, screened)


# --- paired rounds (the CPU's decision between two solutions) -------------------------------------------------
# On shared cores the load drifts within a second: two solutions timed one after the other see different
# machines, and their spreads (30-600% under load) hide real 20% margins. Timed in alternating rounds (A B, B A,
# A B ...), each pair of samples sees the same moment, and the ratio of the two is what the decision reads.
PAIR_SAMPLE_S = 2e-4  # each sample runs calls back to back for at least this long (by the estimate)
PAIR_ROUNDS = (12, 40)  # at least, at most


@dataclass(frozen=True)
class Paired:
    """Alternating rounds of two solutions: ``a_s``/``b_s`` the per-call seconds of each round's two samples."""

    a_s: tuple[float, ...]
    b_s: tuple[float, ...]

    @property
    def ratios(self) -> np.ndarray:
        """b / a per round: above 1 where a was the faster."""
        return np.asarray(self.b_s) / np.asarray(self.a_s)

    @property
    def ratio(self) -> float:
        """The median of the paired ratios (b / a)."""
        return float(np.median(self.ratios))

    @property
    def spread(self) -> float:
        """(p80 - p20) / median of the paired ratios."""
        p20, p80 = np.percentile(self.ratios, [20, 80])
        return float((p80 - p20) / self.ratio)

    @property
    def wins(self) -> int:
        """Rounds won by the side the median favours."""
        r = self.ratios
        return int(np.sum(r > 1) if self.ratio >= 1 else np.sum(r < 1))

    @property
    def p_value(self) -> float:
        """One-sided sign test: the chance of ``wins`` or more of ``n`` rounds if neither side were faster."""
        n = len(self.a_s)
        return sum(math.comb(n, i) for i in range(self.wins, n + 1)) / 2.0 ** n

    def measurement(self, side: str, warmup_s: float = 0.0) -> Measurement:
        """One side's rounds as a Measurement (``rounds_measurement``)."""
        return rounds_measurement(self.a_s if side == "a" else self.b_s, warmup_s)


def rounds_measurement(samples, warmup_s: float = 0.0) -> Measurement:
    """One side's samples of interleaved rounds as a Measurement (device mode: the CPU's one clock)."""
    return _summary(list(samples), "device", warmup_s, False)


def interleaved_rounds(sides: list[list], *, estimate_s: float, time_cap_s: float = 1.0,
                       rounds: tuple[int, int] = PAIR_ROUNDS, enough=None) -> list[list[float]]:
    """Time several solutions' calls (``solution_calls``) in interleaved rounds on the CPU (two alternate, ``A B``,
    ``B A``; three or more in a fresh seeded order each round); per side, the per-call seconds of each round's
    sample.

    Each sample runs ``ceil(PAIR_SAMPLE_S / estimate_s)`` calls back to back after one untimed call, so the
    switch from the other solution (its threads still spinning, its data in the cache) is not counted.
    Stops after ``rounds[1]`` rounds; before, after ``rounds[0]`` once ``enough(samples)`` says so, or once
    ``time_cap_s`` is spent and ``2 x rounds[0]`` rounds are done (a sign test needs rounds: 11 wins of 12 for
    p < 0.01, which one descheduled sample on a loaded box spoils), or twice ``time_cap_s`` is spent.
    """
    n = max(1, math.ceil(PAIR_SAMPLE_S / max(estimate_s, 1e-9)))
    k = len(sides)
    turn = [0] * k
    samples: list[list[float]] = [[] for _ in sides]

    def sample(side: int) -> float:
        calls = sides[side]
        calls[turn[side] % len(calls)]()
        t0 = time.perf_counter_ns()
        for i in range(1, n + 1):
            calls[(turn[side] + i) % len(calls)]()
        turn[side] += n + 1
        return (time.perf_counter_ns() - t0) * 1e-9 / n

    start = time.perf_counter()
    shuffle = random.Random(k).sample  # seeded: a run's orders repeat
    for r in range(rounds[1]):
        # Two sides alternate (A B, B A: each follows the other equally). Three or more take a fresh order each
        # round: a rotation always puts the same side before each one, and that side's pool may still be spinning
        # (numba's or OpenBLAS's threads after its calls), a bias that would fall on one side every round.
        order = [(r + i) % k for i in range(k)] if k <= 2 else shuffle(range(k), k)
        for side in order:
            samples[side].append(sample(side))
        if r + 1 < rounds[0]:
            continue
        spent = time.perf_counter() - start
        if ((enough is not None and enough(samples)) or spent > 2 * time_cap_s
                or (spent > time_cap_s and r + 1 >= 2 * rounds[0])):
            break
    return samples


def paired_rounds(calls_a: list, calls_b: list, *, estimate_s: float, time_cap_s: float = 1.0,
                  rounds: tuple[int, int] = PAIR_ROUNDS, enough=None) -> Paired:
    """Two solutions in alternating rounds (``A B``, ``B A``, ...): ``interleaved_rounds`` of two sides."""
    check = None if enough is None else (lambda s: enough(Paired(tuple(s[0]), tuple(s[1]))))
    a_s, b_s = interleaved_rounds([calls_a, calls_b], estimate_s=estimate_s, time_cap_s=time_cap_s, rounds=rounds,
                                  enough=check)
    return Paired(tuple(a_s), tuple(b_s))
