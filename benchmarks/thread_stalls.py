"""The thread-pool stalls arbiter's import prevents, timed (issue 31; moved here from tests/test_cpu_threads.py,
issue 41 item 4: a wall-clock ratio is a benchmark's figure, a busy box breaks it as an assertion).

    python benchmarks/thread_stalls.py [--quick] [--out DIR]

Each case runs in a fresh process that imports arbiter first, as a user's program does, once with the threading
layer arbiter asks numba for (workqueue, no OpenMP variable set) and once with numba's OpenMP layer spinning
(``NUMBA_THREADING_LAYER=omp OMP_WAIT_POLICY=active``, what numba picks where its OpenMP layer loads first):

* a parallel numba row sum of 64x1000 float32 right after a 256x256 BLAS product (the numba pool wakes behind BLAS's);
* a 128x128 float64 BLAS product right after that numba kernel (BLAS's pool waits behind numba's spinning one).

Prints each case's median of 40 calls alone and right after the other library, in µs; the predicted stall
(issue 31's measurements) is 8-30 ms behind the spinning pool and well under 2 ms with arbiter's choice.
``--quick``: 10 calls a median instead of 40; ``--out DIR``: also write ``DIR/thread_stalls.md``."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

PRELUDE = """
import json, os, sys, time
import numpy as np
import arbiter
from numba import njit, prange, threading_layer

@njit(parallel=True)
def rowsum(x, out):
    for i in prange(x.shape[0]):
        s = 0.0
        for j in range(x.shape[1]):
            s += x[i, j]
        out[i] = s

calls = int(sys.argv[1])
x, out = np.random.rand(64, 1000).astype(np.float32), np.empty(64, np.float32)
"""

# the numba kernel timed, alone and right after a BLAS product
NUMBA_AFTER_BLAS = PRELUDE + """
a = np.random.rand(256, 256).astype(np.float32)
rowsum(x, out)

def call():
    t0 = time.perf_counter(); rowsum(x, out); return time.perf_counter() - t0

def other():
    a @ a
"""

# the BLAS product timed, alone and right after the numba kernel
BLAS_AFTER_NUMBA = PRELUDE + """
a = np.random.rand(128, 128)
rowsum(x, out); a @ a

def call():
    t0 = time.perf_counter(); a @ a; return time.perf_counter() - t0

def other():
    rowsum(x, out)
"""

MEASURE = """
alone = [call() for _ in range(calls)]
after = []
for _ in range(calls):
    other()
    after.append(call())
print(json.dumps({"layer": threading_layer(), "alone_us": float(np.median(alone)) * 1e6,
                  "after_us": float(np.median(after)) * 1e6}))
"""

CASES = [("numba row sum after BLAS", NUMBA_AFTER_BLAS), ("BLAS product after numba", BLAS_AFTER_NUMBA)]
SETTINGS = [("arbiter's (workqueue)", {}), ("numba's omp, spinning", {"NUMBA_THREADING_LAYER": "omp",
                                                                        "OMP_WAIT_POLICY": "active"})]


def probe(script: str, calls: int, env: dict) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "NUMBA_THREADING_LAYER",
                                                               "NUMBA_THREADING_LAYER_PRIORITY")}
    root = str(Path(__file__).resolve().parents[1])
    clean["PYTHONPATH"] = os.pathsep.join(filter(None, [root, clean.get("PYTHONPATH")]))
    run = subprocess.run([sys.executable, "-c", script + MEASURE, str(calls)], env={**clean, **env},
                         capture_output=True, text=True, timeout=300, check=True)
    return json.loads(run.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="10 calls a median instead of 40")
    p.add_argument("--out", default=None, help="also write DIR/thread_stalls.md")
    args = p.parse_args(argv)
    try:
        import numba  # noqa: F401
    except ImportError:
        print("skipped: numba is not installed (pip install -e '.[cpu]')")
        return 0
    calls = 10 if args.quick else 40
    rows = ["| case | threading | layer | alone µs | after the other µs |", "| --- | --- | --- | --- | --- |"]
    print(f"{'case':26} {'threading':24} {'layer':10} {'alone µs':>9} {'after µs':>9}")
    for case, script in CASES:
        for setting, env in SETTINGS:
            r = probe(script, calls, env)
            print(f"{case:26} {setting:24} {r['layer']:10} {r['alone_us']:9.0f} {r['after_us']:9.0f}")
            rows.append(f"| {case} | {setting} | {r['layer']} | {r['alone_us']:.0f} | {r['after_us']:.0f} |")
    load = os.getloadavg()[0]
    print(f"(load {load:.1f}, {os.cpu_count()} cores; medians of {calls} calls)")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "thread_stalls.md").write_text("\n".join(rows) + f"\n\nload {load:.1f}, {os.cpu_count()} "
                                                      f"cores; medians of {calls} calls\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
