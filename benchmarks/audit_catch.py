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
import ctypes
import ctypes.util
import datetime
import platform
import statistics
import struct
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import arbiter  # noqa: E402
from arbiter import Candidate, Tier, audit, dispatch  # noqa: E402
from arbiter.candidates import REGISTRY  # noqa: E402
from arbiter.regions import Softmax  # noqa: E402
from arbiter.store import MemoryStore  # noqa: E402

ONSET = 200  # calls before a fault begins (the gate's own calls are fewer)


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _set_ftz(on: bool) -> None:
    """x86-64 glibc: MXCSR's FTZ and DAZ bits in fenv_t (byte 28)."""
    lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    buf = ctypes.create_string_buffer(1024)
    lib.fegetenv(buf)
    raw = bytearray(buf.raw)
    mxcsr = struct.unpack_from("<I", raw, 28)[0]
    struct.pack_into("<I", raw, 28, (mxcsr | 0x8040) if on else (mxcsr & ~0x8040))
    lib.fesetenv(ctypes.create_string_buffer(bytes(raw), 1024))


class _Fault(Candidate):
    target, op, tier, priority = "cpu", "softmax", Tier.HAND_TUNED, 100

    def __init__(self):
        self.calls, self.first_wrong, self.pool = 0, None, {}

    def faulty(self, region) -> bool:
        return self.calls > ONSET

    def run(self, region, params):
        self.calls += 1
        out = region.out
        if self.faulty(region):
            if self.first_wrong is None:
                self.first_wrong = self.calls
            return self.wrong(region)
        out = region.alloc_out()
        out[...] = _softmax(region.x)
        return out


class Stale(_Fault):
    name = "stale_after_n"

    def wrong(self, region):
        out = region.alloc_out()
        out[...] = 0.0
        return out


class Quantized(_Fault):
    name = "wrong_on_quantized"

    def faulty(self, region):
        x = region.x
        return bool(np.all(x == np.round(x)))

    def wrong(self, region):  # its exact-table path forgets to normalise
        out = region.alloc_out()
        out[...] = np.exp(region.x - region.x.max(axis=-1, keepdims=True))
        return out


class Pooled(_Fault):
    name = "pooled_output"

    def wrong(self, region):
        if region.out is not None:
            region.out[...] = _softmax(region.x)
            return region.out
        buf = self.pool.setdefault(region.x.shape, np.empty(region.x.shape, region.x.dtype))
        buf[...] = _softmax(region.x)
        return buf


class Flushes(_Fault):
    name = "flushes_to_zero"

    def wrong(self, region):
        _set_ftz(True)
        out = region.alloc_out()
        out[...] = _softmax(region.x)
        return out


class OneWidth(_Fault):
    name = "wrong_at_one_width"

    def faulty(self, region):
        return region.x.shape[-1] == 777

    def wrong(self, region):
        out = region.alloc_out()
        out[...] = _softmax(region.x) * 1.01
        return out


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
                _set_ftz(False)


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
