"""What the GPU benchmarks share: whether this machine can run them (imported by name; the scripts' folder is
on ``sys.path`` when one runs)."""
from __future__ import annotations


def cannot_run(script: str, why_torch: str = "") -> bool:
    """True (after saying why) unless the nvidia target is available and PyTorch sees a CUDA device: these
    benchmarks measure against torch in the same run. ``why_torch`` says what torch is there for."""
    from arbiter import targets

    ok = targets.get("nvidia").available()
    if ok is not True:
        print(f"{script}: skipped, the nvidia target is unavailable ({ok})")
        return True
    try:
        import torch
    except ImportError:
        print(f"{script}: skipped, torch is not installed{f' ({why_torch})' if why_torch else ''}")
        return True
    if not torch.cuda.is_available():
        print(f"{script}: skipped, torch sees no CUDA device")
        return True
    return False


def host_us(call, n: int, *, warmup: int = 20, rounds: int = 3, sync=None, queued: bool = False) -> float:
    """Host microseconds per call of ``call``: ``n`` calls back to back and one device synchronize, best of
    ``rounds`` after ``warmup`` calls (the regime of a host-bound loop, where the GPU keeps up). ``sync``: the
    device synchronize to use (torch's by default; a CuPy-only measurement passes CuPy's). ``queued``: the
    synchronize falls outside the timing (the launch queue holds the ``n`` calls), so the host cost alone is
    timed even where a kernel is slower than its launch (timed inside, the device's time would be measured)."""
    import time

    if sync is None:
        import torch

        sync = torch.cuda.synchronize
    for _ in range(warmup):
        call()
    sync()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            call()
        if not queued:
            sync()
        best = min(best, (time.perf_counter_ns() - t0) / n / 1e3)
        if queued:
            sync()
    return best


def timed(call, *, mode: str = "device", max_reps: int = 200, time_cap_s: float = 0.4) -> dict:
    """``arbiter.timing.measure_calls`` of ``call`` on the nvidia target as a row entry: median µs, spread,
    repetitions."""
    from arbiter.timing import measure_calls

    m = measure_calls([call], "nvidia", mode=mode, min_reps=10, max_reps=max_reps, time_cap_s=time_cap_s)
    return {"us": m.median_s * 1e6, "spread": m.spread, "reps": m.reps}


def write_report(out: str, stem: str, report: dict, text: str) -> None:
    """``<out>/<stem>.json`` (the rows) and ``<out>/<stem>.md`` (the table), and the table printed last."""
    import json
    import os

    with open(os.path.join(out, f"{stem}.json"), "w") as f:
        json.dump(report, f, indent=1)
    with open(os.path.join(out, f"{stem}.md"), "w") as f:
        f.write(text + "\n")
    print(text)
