"""CPU crossovers: every candidate (each parameter set) of each op, timed side by side per shape.

For each op a sweep of shapes; at each shape every solution that applies is first put through the
F4 gate, then timed with ``arbiter.timing.measure`` (perf_counter_ns, warm-up with compilation
outside the timings, median and p20/p80 spread, inputs rotated when they fit in cache), all in one
run. The winner per bucket, its ratio to the vendor (NumPy) candidate, and whether the margin beats
the noise (winner faster than the runner-up by more than twice their larger relative spread) are
written to ``docs/cpu_crossovers.md`` with the date and the machine.

    python benchmarks/cpu_suite.py [--quick] [--out DIR]

``--out DIR`` (default ``docs``): the tables go to ``DIR/cpu_crossovers.md``. ``--quick``: the first (smallest)
shape of each section, without waiting for a quiet machine, 0.05 s timing cap (a smoke run of seconds; its
figures are not results).
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from arbiter.candidates import REGISTRY, params_id  # noqa: E402
from arbiter.regions import Matmul, RMSNorm, Softmax  # noqa: E402
from arbiter.targets.cpu import blas_info, cpu_model  # noqa: E402
from arbiter.timing import measure  # noqa: E402
from arbiter.verify import verify  # noqa: E402

EPILOGUE = {"bias": 1, "activation": "gelu", "residual": 1}

# (section title, op, region type, attrs, [(dtype, dims), ...])
SWEEPS = [
    ("matmul, no epilogue", "matmul", Matmul, {}, [
        ("float32", {"m": m, "n": n, "k": k}) for m, n, k in
        [(16, 16, 16), (64, 64, 64), (128, 128, 128), (256, 256, 256), (512, 512, 512), (1024, 1024, 1024),
         (8, 1024, 1024)]] + [("float64", {"m": 256, "n": 256, "k": 256})]),
    ("GEMV (M or N = 1)", "matmul", Matmul, {}, [
        ("float32", {"m": m, "n": n, "k": k}) for m, n, k in
        [(1, 256, 256), (1, 4096, 1024), (1, 4096, 4096), (256, 1, 256), (4096, 1, 1024), (4096, 1, 4096)]]
        + [("float64", {"m": 1, "n": 4096, "k": 4096})]),
    ("matmul + bias -> gelu -> residual", "matmul", Matmul, EPILOGUE, [
        ("float32", {"m": m, "n": n, "k": k}) for m, n, k in
        [(16, 16, 16), (64, 256, 64), (256, 1024, 256), (1024, 1024, 1024), (4096, 1024, 64), (2048, 4096, 256)]]
        + [("float64", {"m": 1024, "n": 1024, "k": 256})]),
    ("matmul + bias -> relu", "matmul", Matmul, {"bias": 1, "activation": "relu"}, [
        ("float32", {"m": m, "n": n, "k": k}) for m, n, k in [(64, 256, 64), (1024, 1024, 256), (4096, 1024, 64)]]),
    ("softmax, last axis", "softmax", Softmax, {}, [
        ("float32", {"rows": r, "cols": c}) for r, c in
        [(64, 128), (1024, 128), (1024, 1024), (4096, 1024), (4096, 4096), (256, 16384), (16384, 256)]]
        + [("float64", {"rows": 1024, "cols": 1024}), ("float64", {"rows": 4096, "cols": 4096})]),
    ("RMSNorm", "rmsnorm", RMSNorm, {}, [
        ("float32", {"rows": r, "cols": c}) for r, c in
        [(64, 128), (1024, 128), (1024, 1024), (4096, 1024), (4096, 4096), (256, 16384), (16384, 256)]]
        + [("float64", {"rows": 1024, "cols": 1024}), ("float64", {"rows": 4096, "cols": 4096})]),
]
MARKER = "<!-- measured: everything below is written by benchmarks/cpu_suite.py -->"
QUICK = {  # the smallest shape of each section (a smoke run)
    title: [shapes[0]] for title, _, _, _, shapes in SWEEPS
}


def label(cand, params) -> str:
    p = params_id(params)
    return cand.name if p == "{}" else f"{cand.name}{p}"


def busy_fraction(seconds: float = 0.25) -> float:
    """Share of the machine's CPU time used by others while this process sleeps (from /proc/stat)."""
    def sample():
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
        return sum(values), values[3] + values[4]  # total, idle + iowait

    total0, idle0 = sample()
    time.sleep(seconds)
    total1, idle1 = sample()
    return 1.0 - (idle1 - idle0) / max(total1 - total0, 1)


def wait_quiet(threshold: float = 0.15, patience_s: float = 60.0) -> float:
    """Wait until other processes use under ``threshold`` of the CPUs (2 shared cores: a neighbour's
    test run stalls every parallel barrier for a scheduler slice). Returns the last busy fraction."""
    deadline = time.time() + patience_s
    busy = busy_fraction()
    while busy > threshold and time.time() < deadline:
        busy = busy_fraction(1.0)
    return busy


def run_shape(op, kind, attrs, dtype, dims, seed, quick: bool = False):
    """Wait for a quiet machine (not when ``quick``), then gate and time every applicable solution at one shape.

    Returns (region, rows, busy fraction of the CPUs used by others just before)."""
    region = kind.random("cpu", dtype, dims, attrs=attrs, rng=np.random.default_rng(seed))
    rows = []
    best = None
    busy = busy_fraction(0.05) if quick else wait_quiet()
    for cand in REGISTRY.candidates("cpu", op):
        if cand.applies_to(region) is not True:
            continue
        for params in cand.param_space():
            verdict = verify(cand, params, region)
            if not verdict.passed:
                rows.append({"label": label(cand, params), "cand": cand, "fail": verdict.reason})
                continue
            m = measure(cand, params, region, time_cap_s=0.05 if quick else 0.5, best_so_far=best, seed=seed)
            if not m.screened:
                best = m.median_s if best is None else min(best, m.median_s)
            rows.append({"label": label(cand, params), "cand": cand, "m": m,
                         "compile_s": getattr(cand, "last_compile_s", None)})
    return region, rows, busy


def separated(winner, runner_up) -> bool:
    """The design's rule: the margin must exceed twice the larger relative spread."""
    if runner_up is None:
        return True
    margin = runner_up.median_s / winner.median_s - 1.0
    return margin > 2 * max(winner.spread, runner_up.spread)


def us(seconds: float) -> str:
    v = seconds * 1e6
    return f"{v:.1f}" if v < 1000 else f"{v:,.0f}"


def section_table(title, results) -> list[str]:
    lines = [f"### {title}", "",
             "| shape | dtype | bucket | vendor (NumPy) us | best numba solution | us | vendor / best numba | "
             "winner | separated | others' CPU use |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    detail = []
    for region, rows, busy in results:
        timed = [r for r in rows if "m" in r]
        vendor = next((r for r in timed if r["cand"].tier.name == "HAND_TUNED"), None)
        ours = sorted((r for r in timed if r["cand"].tier.name != "HAND_TUNED"), key=lambda r: r["m"].median_s)
        ranked = sorted((r for r in timed if not r["m"].screened), key=lambda r: r["m"].median_s)
        winner = ranked[0]
        runner = ranked[1]["m"] if len(ranked) > 1 else None
        best = ours[0] if ours else None
        v = f"{us(vendor['m'].median_s)} ±{vendor['m'].spread * 100:.0f}%" if vendor else "-"
        b = (f"{us(best['m'].median_s)} ±{best['m'].spread * 100:.0f}%{' screened' if best['m'].screened else ''}"
             if best else "-")
        ratio = f"{vendor['m'].median_s / best['m'].median_s:.2f}x" if vendor and best else "-"
        lines.append(f"| {region.shape_text()} | {region.dtype} | {region.key.shape_text} | {v} | "
                     f"{best['label'] if best else '(none applies)'} | {b} | {ratio} | "
                     f"{winner['cand'].tier.name.lower()}: {winner['label']} | "
                     f"{'yes' if separated(winner['m'], runner) else 'no'} | {busy * 100:.0f}% |")
        cells = []
        for r in rows:
            if "m" in r:
                tag = " (screened)" if r["m"].screened else ""
                cells.append(f"{r['label']} {us(r['m'].median_s)} ±{r['m'].spread * 100:.0f}% "
                             f"n={r['m'].reps}{tag}")
            else:
                cells.append(f"{r['label']} FAILED GATE: {r['fail']}")
        detail.append(f"- {region.shape_text()} {region.dtype}: " + "; ".join(cells))
    return lines + ["", "<details><summary>every solution (median us, relative p20-p80 spread, reps)</summary>",
                    "", *detail, "", "</details>", ""]


def machine() -> str:
    model, flags = cpu_model()
    blas = blas_info()
    import numba

    return (f"{model} ({os.cpu_count()} cores visible; ISA {flags}); {platform.system()} {platform.release()}; "
            f"Python {platform.python_version()}, NumPy {np.__version__} ({blas['blas']} {blas['blas_version']}, "
            f"{blas['blas_threads']} BLAS threads), numba {numba.__version__} "
            f"({numba.config.NUMBA_NUM_THREADS} threads, layer {numba.threading_layer()})")


def compile_lines() -> list[str]:
    lines = []
    for cand in REGISTRY.candidates("cpu", "matmul") + REGISTRY.candidates("cpu", "softmax") + \
            REGISTRY.candidates("cpu", "rmsnorm"):
        logs = [getattr(cand, "compile_log", None)] + list(getattr(cand, "compile_logs", {}).values())
        for log in filter(None, logs):
            for tag, s in log.seconds.items():
                src = "numba disk cache" if log.from_disk.get(tag) else "compiled"
                lines.append(f"- {cand.name} `{log.dispatcher.__name__}` {tag}: {s * 1e3:.0f} ms ({src})")
        for k in getattr(cand, "_kernels", {}).values():
            for tag, s in k.compile_s.items():
                lines.append(f"- {cand.name} kernel `k_{k.hash}` {tag}: {s * 1e3:.0f} ms")
    return lines


def parse_args(argv, doc: str) -> argparse.Namespace:
    """A suite's command line: ``--quick`` and ``--out DIR`` (default ``docs``)."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the smallest shape per section, no waiting (smoke run)")
    ap.add_argument("--out", default=str(ROOT / "docs"), help="folder of the markdown file written (default docs)")
    return ap.parse_args(argv)


def sweep_tables(sweeps, quick: dict | None, title_width: int) -> list[str]:
    """Run every sweep (its shapes, or ``quick[title]`` when given), printing one line a shape as it goes;
    the markdown table lines of all sweeps."""
    body = []
    for n, (title, op, kind, attrs, shapes) in enumerate(sweeps):
        results = []
        for dtype, dims in (quick[title] if quick else shapes):
            region, rows, busy = run_shape(op, kind, attrs, dtype, dims, seed=n, quick=quick is not None)
            results.append((region, rows, busy))
            print(f"{title:<{title_width}} {region.shape_text():>16} {dtype} (others {busy:.0%}): " + ", ".join(
                f"{r['label']}={us(r['m'].median_s)}" for r in rows if "m" in r), flush=True)
        body += section_table(title, results)
    return body


def main(argv=None):
    args = parse_args(argv, __doc__)
    started = time.time()
    body = sweep_tables(SWEEPS, QUICK if args.quick else None, 36)
    head = [
        "## Measured",
        "",
        f"Measured {datetime.date.today().isoformat()} by `python benchmarks/cpu_suite.py"
        f"{' --quick' if args.quick else ''}` in {time.time() - started:.0f} s, one run, every solution side "
        "by side.",
        f"Machine: {machine()}.",
        "",
        "Timing: `arbiter.timing.measure`, mode `device` (on the CPU, `perf_counter_ns` around the call), "
        "warm-up until two calls agree within 2x (numba compilation or disk-cache load stays out), median of "
        "repetitions with the relative p20-p80 spread, inputs rotated when they fit in cache; solutions over "
        "1.5x the best after 3 repetitions are screened (not ranked). Every solution passed the F4 gate at "
        "the shape before it was timed. \"separated\": the winner beats the runner-up by more than twice the "
        "larger relative spread; otherwise the difference is noise and tier priority would hold.",
        "",
    ]
    text = "\n".join(head + body + ["## Compile times (first use in this run; kept out of the timings)", "",
                                    *compile_lines(), ""])
    # The hand-written reading of the figures above the marker is kept; everything below is replaced.
    Path(args.out).mkdir(parents=True, exist_ok=True)
    out = Path(args.out) / "cpu_crossovers.md"
    kept = out.read_text().split(MARKER)[0] if out.exists() and MARKER in out.read_text() else ""
    out.write_text(kept + MARKER + "\n\n" + text)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
