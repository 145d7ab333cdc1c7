"""The thin path on the CPU (issue 39 item 4): what building a region and dispatching cost over the winner's own
call, for NumPy and torch CPU operands, in µs and in Python calls (cProfile: a figure the box's load cannot move).

Per case, timed in interleaved rounds (best of 7 samples of N calls each, per call):

* **winner**: the installed solution's ``run`` on a prebuilt region (the kernel and its wrapper, nothing else);
* **prebuilt**: ``run_arbitrated`` on that prebuilt region (dispatch);
* **user**: ``run_arbitrated`` with the region built per call (NumPy operands), or ``arbiter.torch.<op>`` on the
  tensors (torch operands): what a user's call costs;
* **torch**: torch's own op on the tensors (torch cases only).

Goals: user - winner <= 1.5 µs (NumPy); ``arbiter.torch`` / ``run_arbitrated`` on a prebuilt region <= 1.5.

    python benchmarks/thin_path.py [--quick] [--out DIR]
"""
from __future__ import annotations

import argparse
import cProfile
import datetime
import pstats
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import arbiter  # noqa: E402
from arbiter import dispatch, regions  # noqa: E402
from arbiter.store import MemoryStore  # noqa: E402


def per_call(fn, calls: int) -> float:
    for _ in range(min(100, calls)):
        fn()
    best = []
    for _ in range(7):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        best.append((time.perf_counter_ns() - t0) / calls / 1e3)
    return min(best)


def python_calls(fn, n: int = 200) -> float:
    fn()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        fn()
    prof.disable()
    return pstats.Stats(prof).total_calls / n  # type: ignore[attr-defined]


def cases():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 64)).astype(np.float32)
    w, b = (rng.random(64).astype(np.float32) + 0.5 for _ in range(2))
    a, m = rng.standard_normal((16, 16)).astype(np.float32), rng.standard_normal((16, 16)).astype(np.float32)
    out = [("softmax 8x64", "softmax", lambda: regions.Softmax(x)),
           ("layernorm 8x64", "layernorm", lambda: regions.LayerNorm(x, w, bias=b)),
           ("matmul 16^3", "matmul", lambda: regions.Matmul(a, m))]
    return out, (x, w, b, a, m)


def run(quick: bool) -> list[str]:
    calls = 200 if quick else 3000
    arbiter.configure(store=MemoryStore(), policy="tier")
    numpy_cases, (x, w, b, a, m) = cases()
    lines = ["## NumPy operands (µs per call, best of 7; Python calls per call)", "",
             "| case | winner | winner's run | run_arbitrated, prebuilt | user path | user - winner | "
             "Python calls: user / winner |", "|---|---|---|---|---|---|---|"]
    lines += [numpy_row(name, op, make, calls) for name, op, make in numpy_cases]
    try:
        import torch
    except ImportError:
        return lines + ["", "torch operands: skipped (needs PyTorch)"]
    import arbiter.torch as at

    tx, tw, tb, ta, tm = (torch.from_numpy(v) for v in (x, w, b, a, m))
    torch_cases = [("softmax 8x64", "softmax", lambda: at.softmax(tx, -1), lambda: torch.softmax(tx, -1),
                    lambda: regions.Softmax(x)),
                   ("layernorm 8x64", "layernorm", lambda: at.layernorm(tx, tw, tb),
                    lambda: torch.layer_norm(tx, (64,), tw, tb, 1e-5), lambda: regions.LayerNorm(x, w, bias=b)),
                   ("matmul 16^3", "matmul", lambda: at.matmul(ta, tm), lambda: ta @ tm,
                    lambda: regions.Matmul(a, m))]
    lines += ["", "## torch CPU operands, no gradients (µs per call, best of 7; Python calls per call)", "",
              "| case | winner (torch caller) | torch | run_arbitrated, prebuilt | arbiter.torch | "
              "arbiter.torch / prebuilt | Python calls: arbiter.torch / torch |", "|---|---|---|---|---|---|---|"]
    with torch.no_grad():
        lines += [torch_row(*case, calls) for case in torch_cases]
    return lines


def numpy_row(name, op, make, calls) -> str:
    arbiter.run_arbitrated(op, make())
    region = make()
    route = dispatch.route(region.key)
    own = per_call(lambda: route.run(region, route.params), calls)
    pre = per_call(lambda: arbiter.run_arbitrated(op, region), calls)
    user = per_call(lambda: arbiter.run_arbitrated(op, make()), calls)
    py_user = python_calls(lambda: arbiter.run_arbitrated(op, make()))
    py_own = python_calls(lambda: route.run(region, route.params))
    return (f"| {name} | {route.label} | {own:.2f} | {pre:.2f} | {user:.2f} | {user - own:+.2f} | "
            f"{py_user:.0f} / {py_own:.0f} |")


def torch_row(name, op, mine, ref, make, calls) -> str:
    mine()
    region = make()
    region.back = regions.converted_by_caller  # what arbiter.torch builds: a torch caller's region
    route = dispatch.route(region.key, torch_caller=True) or dispatch.route(region.key)
    pre = per_call(lambda: arbiter.run_arbitrated(op, region), calls)
    t_at, t_ref = per_call(mine, calls), per_call(ref, calls)
    return (f"| {name} | {route.label} | {t_ref:.2f} | {pre:.2f} | {t_at:.2f} | {t_at / pre:.2f} | "
            f"{python_calls(mine):.0f} / {python_calls(ref):.0f} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    text = "\n".join([f"# The thin path on the CPU ({datetime.date.today()})", ""] + run(args.quick)) + "\n"
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "thin_path.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
