"""CPU timings of the newer op kinds: layernorm, attention, fft, gated (SwiGLU), pointwise chains.

Same rules as ``benchmarks/cpu_suite.py`` (whose helpers it uses): at each shape every solution
that applies passes the F4 gate first, then is timed with ``arbiter.timing.measure`` beside the
others in one run (median, relative p20-p80 spread, warm-up and compilation outside the timings).
Ratios vendor / best non-vendor go to ``docs/cpu_ops.md`` with the date and the machine.

    python benchmarks/cpu_ops_suite.py [--quick] [--out DIR]

``--out DIR`` (default ``docs``): the tables go to ``DIR/cpu_ops.md``. ``--quick``: the first shape of each
section, without waiting for a quiet machine (a smoke run, as in ``cpu_suite.py``).
"""
from __future__ import annotations

import datetime
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from arbiter.candidates import REGISTRY
from arbiter.regions import FFT, Attention, Gated, LayerNorm, Pointwise
from cpu_suite import machine, parse_args, sweep_tables


def att(b, h, q, k, d):
    return {"batch": b, "heads": h, "q": q, "k": k, "d": d}


# (section title, op, region type, attrs, [(dtype, dims), ...])
SWEEPS = [
    ("layernorm (weight, bias)", "layernorm", LayerNorm, {"bias": "1"}, [
        ("float32", {"rows": r, "cols": c}) for r, c in [(64, 128), (1024, 1024), (4096, 1024), (256, 16384)]]
        + [("float64", {"rows": 1024, "cols": 1024})]),
    ("attention", "attention", Attention, {}, [
        ("float32", att(1, 8, 128, 128, 64)), ("float32", att(1, 8, 512, 512, 64)),
        ("float32", att(4, 8, 1, 4096, 64)), ("float64", att(1, 8, 256, 256, 64))]),
    ("attention, causal", "attention", Attention, {"causal": "1"}, [
        ("float32", att(1, 8, 128, 128, 64)), ("float32", att(1, 8, 512, 512, 64)),
        ("float32", att(1, 8, 512, 2048, 64))]),
    ("fft c2c forward", "fft", FFT, {"kind": "c2c"}, [
        ("complex64", {"batch": 64, "n": 256}), ("complex64", {"batch": 64, "n": 4096}),
        ("complex64", {"batch": 4, "n": 65536}), ("complex64", {"batch": 64, "n": 1000}),
        ("complex128", {"batch": 64, "n": 4096})]),
    ("fft r2c forward", "fft", FFT, {"kind": "r2c"}, [
        ("float32", {"batch": 64, "n": 4096}), ("float64", {"batch": 64, "n": 4096})]),
    ("fft c2r (r2c inverse)", "fft", FFT, {"kind": "r2c", "inverse": "1"}, [
        ("complex64", {"batch": 64, "n": 4096})]),
    ("gated (SwiGLU) silu(x @ Wg) * (x @ Wu)", "gated", Gated, {}, [
        ("float32", {"m": m, "n": n, "k": k}) for m, n, k in [(16, 1024, 512), (256, 2048, 512), (2048, 1024, 256)]]
        + [("float64", {"m": 256, "n": 1024, "k": 256})]),
    ("pointwise tanh(relu(x * y + s))", "pointwise", Pointwise, {"chain": "mul[t]>add[s]>relu>tanh"}, [
        ("float32", {"size": n}) for n in (1000, 100_000, 1_000_000, 8_000_000)]
        + [("float64", {"size": 1_000_000})]),
    ("pointwise silu(x) * y", "pointwise", Pointwise, {"chain": "silu>mul[t]"}, [
        ("float32", {"size": n}) for n in (100_000, 4_000_000)]),
]
QUICK = {title: [shapes[0]] for title, _, _, _, shapes in SWEEPS}  # a smoke run


def main(argv=None):
    args = parse_args(argv, __doc__)
    started = time.time()
    body = sweep_tables(SWEEPS, QUICK if args.quick else None, 40)
    head = [
        "# CPU timings of the newer op kinds: vendor (NumPy / SciPy) against the numba tiers",
        "",
        f"Measured {datetime.date.today().isoformat()} by `python benchmarks/cpu_ops_suite.py"
        f"{' --quick' if args.quick else ''}` in {time.time() - started:.0f} s, one run, every solution side "
        "by side. The \"vendor (NumPy)\" column is the HAND_TUNED candidate (scipy.fft for fft).",
        f"Machine: {machine()}.",
        "",
        "Noise: 2 cores shared with other engineers' jobs; each row waits for the machine to be quiet and "
        "names the CPU share others used just before it (last column). Treat a ratio whose two spreads "
        "overlap as no result (\"separated: no\").",
        "",
        "Timing: `arbiter.timing.measure`, mode `device` (`perf_counter_ns` around the call), warm-up until "
        "two calls agree within 2x (numba compilation stays out), median with the relative p20-p80 spread, "
        "inputs rotated when they fit in cache; a solution over 1.5x the best after 3 repetitions is "
        "screened. Every solution passed the F4 gate at the shape before it was timed. \"separated\": the winner "
        "beats the runner-up (often another parameter set of the same candidate, not the vendor) by more than twice "
        "the larger relative spread.",
        "",
    ]
    compile_lines = []
    for op in ("layernorm", "attention", "fft", "gated"):
        for cand in REGISTRY.candidates("cpu", op):
            log = getattr(cand, "compile_log", None)
            for tag, s in (log.seconds.items() if log else ()):
                src = "numba disk cache" if log.from_disk.get(tag) else "compiled"
                compile_lines.append(f"- {cand.name} {tag}: {s * 1e3:.0f} ms ({src})")
    text = "\n".join(head + body + ["## Compile or cache-load times (first use in this run; outside the timings)",
                                    "", *compile_lines, ""])
    Path(args.out).mkdir(parents=True, exist_ok=True)
    out = Path(args.out) / "cpu_ops.md"
    out.write_text(text)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
