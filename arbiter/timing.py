"""The timing engine: one interface, one timer per target.

``measure(candidate, params, region)`` times one solution and returns a
``Measurement`` (mode, median, p20/p80, relative spread, repetitions, warm-up
time, whether it was screened out early).

How (DESIGN.md contract 3):

* warm-up: the first calls (compilation, handle creation, module load) run
  untimed until two consecutive calls agree within 2x, their time reported as
  ``warmup_s``;
* inputs: when one input set fits in the cache, several fresh sets are rotated
  so repetitions don't measure a warm cache; outputs are preallocated;
* GPUs: the L2 is flushed before every repetition, outside the timed region;
* stop when the relative spread ``(p80 - p20) / median`` is under
  ``target_spread`` after ``min_reps``, or at ``time_cap_s`` or ``max_reps``;
* screening: a candidate whose median is over 1.5x the best so far after 3
  repetitions, or 1.15x after 10, stops there (``screened=True``);
* modes: ``device`` (CPU: ``perf_counter_ns`` around the call, the CPU being the
  device; GPU: events on the stream around the call) and ``latency`` (host clock
  around the call plus a synchronize: what a Python caller waits, launch
  overhead included). On the CPU the two coincide.
"""
from __future__ import annotations

import ctypes
import math
import time
from dataclasses import dataclass

import numpy as np

from arbiter import targets

MODES = ("device", "latency")
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


class Timer:
    """Times one call. Subclasses: one per target."""

    cache_bytes = 32 << 20  # working sets under this are rotated

    def flush_cache(self) -> None:
        pass

    def time(self, fn, mode: str) -> float:
        """Seconds for one call of ``fn`` in ``mode``."""
        t0 = time.perf_counter_ns()
        fn()
        return (time.perf_counter_ns() - t0) * 1e-9


class CpuTimer(Timer):
    # Large enough for the last-level cache of common server CPUs' per-core share.
    cache_bytes = 64 << 20


class CudaTimer(Timer):
    """CuPy events on the current stream; the L2 is flushed by overwriting a buffer twice its size."""

    def __init__(self):
        import cupy

        self.cp = cupy
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        l2 = int(props.get("l2CacheSize", 50 << 20))
        self.cache_bytes = l2
        self._scratch = cupy.empty(max(2 * l2, 64 << 20) // 4, dtype=cupy.float32)
        self._start, self._stop = cupy.cuda.Event(), cupy.cuda.Event()

    def flush_cache(self):
        self._scratch.fill(1.0)

    def time(self, fn, mode):
        cp = self.cp
        stream = cp.cuda.get_current_stream()
        if mode == "device":
            self._start.record(stream)
            fn()
            self._stop.record(stream)
            self._stop.synchronize()
            return cp.cuda.get_elapsed_time(self._start, self._stop) * 1e-3
        stream.synchronize()
        t0 = time.perf_counter_ns()
        fn()
        stream.synchronize()
        return (time.perf_counter_ns() - t0) * 1e-9


class HipTimer(Timer):
    """HIP events through hip-python (ROCm target); built only when that target is available.

    Every call goes through ``arbiter.targets.rocm`` (its ``hip`` handle and ``check``), so a failed
    event call raises ``HipError`` naming it instead of timing garbage. The L2 is flushed by
    overwriting a device buffer of twice its size (HIP reports l2CacheSize as 0 on some devices; then
    256 MiB, above the largest AMD last-level cache, is used).
    """

    def __init__(self):
        from arbiter.targets import rocm

        self.rocm = rocm
        hip, check = rocm.bindings(), rocm.check
        l2 = int(getattr(rocm.TARGET.properties(), "l2CacheSize", 0) or 0)
        self.cache_bytes = l2 or (128 << 20)
        self._scratch = rocm.RocmArray.empty((max(2 * l2, 256 << 20) // 4,), np.float32)
        self._start = check(hip.hipEventCreate(), "hipEventCreate")
        self._stop = check(hip.hipEventCreate(), "hipEventCreate")

    def flush_cache(self):
        self.rocm.check(self.rocm.hip.hipMemsetD32(ctypes.c_void_p(self._scratch.ptr), 0x3F800000,
                                                   self._scratch.size), "hipMemsetD32")

    def time(self, fn, mode):
        hip, check = self.rocm.hip, self.rocm.check
        if mode == "device":
            check(hip.hipEventRecord(self._start, None), "hipEventRecord")
            fn()
            check(hip.hipEventRecord(self._stop, None), "hipEventRecord")
            check(hip.hipEventSynchronize(self._stop), "hipEventSynchronize")
            return check(hip.hipEventElapsedTime(self._start, self._stop), "hipEventElapsedTime") * 1e-3
        check(hip.hipDeviceSynchronize(), "hipDeviceSynchronize")
        t0 = time.perf_counter_ns()
        fn()
        check(hip.hipDeviceSynchronize(), "hipDeviceSynchronize")
        return (time.perf_counter_ns() - t0) * 1e-9


_timers: dict[str, Timer] = {}


def timer_for(target: str) -> Timer:
    t = _timers.get(target)
    if t is None:
        t = _timers[target] = {"cpu": CpuTimer, "nvidia": CudaTimer, "rocm": HipTimer}[target]()
    return t


def _nbytes(region) -> int:
    total = sum(int(a.nbytes) for a in region.operands().values())
    return total + math.prod(region.output_shape()) * int(np.dtype("float32").itemsize if region.dtype == "bfloat16"
                                                           else np.dtype(region.dtype).itemsize)


def input_sets(region, timer: Timer, rng: np.random.Generator, max_sets: int = 8) -> list:
    """The region plus fresh copies, enough that rotating them overflows the cache; each with its own output."""
    n = 1
    size = _nbytes(region)
    if size and size * 2 < timer.cache_bytes:
        n = min(max_sets, math.ceil(2 * timer.cache_bytes / size))
    sets = [region] + [region.fresh(rng) for _ in range(n - 1)]
    return [r.with_out(r.alloc_out() if r.out is None else r.out) for r in sets]


def _summary(samples: list[float], mode, warmup_s, screened) -> Measurement:
    a = np.asarray(samples)
    med = float(np.median(a))
    p20, p80 = (float(v) for v in np.percentile(a, [20, 80]))
    return Measurement(mode, med, p20, p80, (p80 - p20) / med if med > 0 else 0.0, len(samples), warmup_s, screened)


def measure(candidate, params: dict, region, *, mode: str = "device", min_reps: int = 5, max_reps: int = 200,
            target_spread: float = 0.03, time_cap_s: float = 1.0, best_so_far: float | None = None,
            screen=DEFAULT_SCREEN, seed: int = 0) -> Measurement:
    """Time one solution on ``region`` (which must already have passed the gate)."""
    if mode not in MODES:
        raise ValueError(f"mode: {mode!r} is not one of {', '.join(MODES)}")
    timer = timer_for(region.target)
    target = targets.get(region.target)
    sets = input_sets(region, timer, np.random.default_rng(seed))
    run = candidate.run

    # Warm-up: untimed until two consecutive calls agree within 2x (compilation and handles are out).
    warm_start = time.perf_counter()
    previous = None
    for i in range(10):
        t0 = time.perf_counter()
        run(sets[i % len(sets)], params)
        target.synchronize()
        took = time.perf_counter() - t0
        if previous is not None and took < 2 * previous and previous < 2 * took:
            break
        previous = took
    warmup_s = time.perf_counter() - warm_start

    samples: list[float] = []
    deadline = time.perf_counter() + time_cap_s
    screened = False
    while len(samples) < max_reps:
        r = sets[len(samples) % len(sets)]
        timer.flush_cache()
        samples.append(timer.time(lambda: run(r, params), mode))
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
