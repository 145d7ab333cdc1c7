"""The audit's catch table (issue 38 item 7): per fault class, the real calls from the first wrong one until the
audit removes the solution, at audit rates 1e-3 and 1e-2.

Each fault class is a softmax candidate right on every gate probe (its fault starts after the gate's calls, or sits
at a width the gate does not draw) and served as the key's only hand-tuned solution, NumPy's softmax behind it. A
caller calls ``run_arbitrated`` on 8 x 64 float32 rows (8 x widths in (512, 1024] for the width class), keeping
its last 100 results, until the route serves another solution; each class and rate is run ``--runs`` times (fresh
registries) and the median and maximum are reported. Classes:

* **stale after N**: right for N calls, then a stale workspace (zeros): every call wrong from then on;
* **wrong on 10% of the data**: wrong only on calls whose logits are small whole numbers (quantized), one call in 10;
* **pooled output**: after N calls, one output buffer per shape when no ``out=`` is given (the caller's kept
  result changes under it);
* **flush-to-zero**: after N calls, turns flush-to-zero on for the calling thread at every call and leaves it on;
* **one width**: wrong at 777 columns only, a width inside the (512, 1024] bucket the gate does not probe; the
  caller draws a width per call.

    python benchmarks/audit_catch.py [--runs 5] [--quick] [--out DIR]
"""
from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the fault classes the audit's tests use (tests/audit_faults.py)

import arbiter  # noqa: E402
from arbiter import audit, dispatch  # noqa: E402
from arbiter.candidates import REGISTRY  # noqa: E402
from arbiter.regions import Softmax  # noqa: E402
from arbiter.store import MemoryStore  # noqa: E402
from audit_faults import Flushes, OneWidth, Pooled, Quantized, Stale, set_ftz  # noqa: E402

ONSET = Stale.after  # calls before a fault begins (the gate's own calls are fewer)


def _inputs(cls, rng, i):
    if cls is OneWidth:
        return rng.standard_normal((8, int(rng.integers(513, 1025)))).astype(np.float32)
    if cls is Quantized and rng.random() < 0.1:
        return rng.integers(-4, 5, (8, 64)).astype(np.float32)
    return rng.standard_normal((8, 64)).astype(np.float32)


def calls_to_removal(cls, rate: float, seed: int, limit: int) -> int | None:
    """Calls from the first wrong one until the route serves another solution (None: not removed by ``limit``)."""
    wrong = cls()
    with REGISTRY.only("cpu", "softmax", (wrong, REGISTRY.get("numpy_softmax", "cpu", "softmax"))):
        dispatch.reset()  # (before configure: a reset puts the audit rate back to ARBITER_AUDIT's)
        arbiter.configure(store=MemoryStore(), audit=rate)
        rng, kept = np.random.default_rng(seed), []
        try:
            for i in range(limit):
                region = Softmax(_inputs(cls, rng, i))
                kept = [*kept[-99:], arbiter.run_arbitrated("softmax", region)]
                route = dispatch.route(region.key)
                if route is not None and route.label == wrong.name:
                    continue
                audit.drain(30)
                if wrong.first_wrong is not None and (route is None or route.label != wrong.name):
                    return wrong.calls - wrong.first_wrong + 1
            return None
        finally:
            audit.drain(30)
            arbiter.configure(audit=0.0)
            if cls is Flushes:
                set_ftz(False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    runs, rates = (1, (1e-2,)) if args.quick else (args.runs, (1e-3, 1e-2))
    classes = [Stale, Quantized, Pooled, OneWidth] + ([Flushes] if platform.machine() == "x86_64"
                                                      and platform.system() == "Linux" else [])
    lines = [f"# The audit's catch table ({datetime.date.today()})", "",
             f"Calls from the first wrong call until the audit removed the solution; median (max) of {runs} runs, "
             "softmax 8 x 64 float32 (the width class: 8 x 513-1024).", "",
             "| fault class | " + " | ".join(f"rate {r:g}" for r in rates) + " |",
             "|---|" + "---|" * len(rates)]
    for cls in classes:
        cells = []
        for rate in rates:
            limit = int(40 / rate) + ONSET
            got = [calls_to_removal(cls, rate, seed, limit) for seed in range(runs)]
            done = [g for g in got if g is not None]
            missed = len(got) - len(done)
            cell = f"{statistics.median(done):,.0f} ({max(done):,})" if done else "not removed"
            cells.append(cell + (f", {missed} not removed in {limit:,}" if missed and done else ""))
            print(cls.name, rate, got, flush=True)
        lines.append(f"| {cls.name} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "audit_catch.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
