"""Measured selection end to end on the GPU: `arbiter tune` stores a winner, a new process dispatches to it."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpu_support import requires_gpu

pytestmark = [pytest.mark.gpu, requires_gpu]

DISPATCH = r"""
import json, numpy as np
import arbiter
from arbiter import dispatch, env, targets
from arbiter.regions import Matmul
region = Matmul.random("nvidia", "float32", {"m": 100, "n": 1, "k": 1003}, rng=np.random.default_rng(3))
for _ in range(5):
    arbiter.run_arbitrated("matmul", region, policy="strict")  # strict: a miss without a stored solution raises
stored = dispatch.store().load_solution(region.key.id, env.environment("nvidia").fingerprint)
row = [r for r in arbiter.stats() if r["key"] == region.key.id][0]
print(json.dumps({"stored": stored.candidate_name, "stored_policy": stored.chosen_by, "served": row["solution"],
                  "hits": row["hits"], "loads": row["loads"], "misses": row["misses"],
                  "verified": dispatch.verified_count()}))
"""


def test_tune_then_a_new_process_dispatches_to_the_stored_solution(tmp_path):
    db = str(tmp_path / "registry.db")
    tune = subprocess.run([sys.executable, "-m", "arbiter", "--db", db, "tune", "--op", "matmul",
                           "--shape", "100x1x1003", "--target", "nvidia"], capture_output=True, text=True)
    assert tune.returncode == 0, tune.stdout + tune.stderr
    run = subprocess.run([sys.executable, "-c", DISPATCH], capture_output=True, text=True,
                         env={**__import__("os").environ, "ARBITER_DB": db})
    assert run.returncode == 0, run.stdout + run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["served"].startswith(got["stored"])  # the stored winner is what is served
    assert (got["hits"], got["loads"], got["misses"]) == (4, 1, 0)  # one load from the registry, then the table
    assert got["verified"] == 0  # its verdict came from the registry too: no gate run in this process
