"""What the CPU benchmark scripts share: interleaved timing rounds (each path timed in turn every round, so a
change of load touches every path alike)."""
from __future__ import annotations

import time

import numpy as np


def interleaved(paths: dict, calls: int, rounds: int, clock=time.perf_counter_ns) -> dict:
    """{name: (median, p20, p80) µs per call}, the paths timed in turn each round after one warm-up round;
    ``clock``: a nanosecond clock (``time.thread_time_ns`` for the calling thread's CPU time)."""
    samples: dict[str, list[float]] = {name: [] for name in paths}
    for r in range(rounds + 1):
        for name, fn in paths.items():
            t0 = clock()
            for _ in range(calls):
                fn()
            if r:
                samples[name].append((clock() - t0) / calls / 1000)
    return {name: (float(np.median(s)), float(np.percentile(s, 20)), float(np.percentile(s, 80)))
            for name, s in samples.items()}
