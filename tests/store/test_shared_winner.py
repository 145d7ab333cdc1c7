"""A process that cannot serve the stored winner decides for itself, and never overwrites the winner every
other process shares (issue 20 item 4). Before: one call with a non-contiguous ``weight`` (which the stored
fused kernel does not apply to) re-decided by tier and saved NumPy over the tuned winner, for every process."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

import arbiter
from arbiter import dispatch
from arbiter import env as envmod
from arbiter.regions import RMSNorm
from arbiter.store import SolutionRecord
from arbiter.store.sql import SqlStore
from tests.store import _dispatchers

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(Path(_dispatchers.__file__))
FUSED = "numba_rmsnorm_fused"


def _call(mode: str, db: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, SCRIPT, mode, db], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def _region():
    rng = np.random.default_rng(1)
    return RMSNorm(rng.standard_normal((8, 64)).astype(np.float32), rng.standard_normal(64).astype(np.float32),
                   eps=1e-5)


def test_a_forced_winner_survives_a_call_with_a_non_contiguous_weight_from_another_process(tmp_path):
    db = str(tmp_path / "registry.db")
    st = SqlStore(db)
    dispatch.configure(store=st)
    region = _region()
    arbiter.arbitrate("rmsnorm", region, force=FUSED)  # the shared winner, as `arbiter tune` would store one
    fingerprint = envmod.environment("cpu").fingerprint
    before = SqlStore(db).load_solution(region.key.id, fingerprint)
    assert (before.candidate_name, before.chosen_by) == (FUSED, "forced")

    # Another process calls the same key with a strided weight: the fused kernel does not apply to it.
    # The weight's layout is part of the key (``layouts=weight-S1``): that call is a key of its own, decided there.
    served, _, loads, misses, fallbacks = _call("rmsnorm_strided", db)
    assert served != FUSED

    after = SqlStore(db).load_solution(region.key.id, fingerprint)
    assert (after.candidate_name, after.chosen_by, after.created) == (FUSED, "forced", before.created)
    assert [r.candidate_name for r in SqlStore(db).solutions() if r.key == region.key.id] == [FUSED]
    # and every other process is still served the shared winner
    served, _, loads, misses, fallbacks = _call("rmsnorm", db)
    assert (served, loads, misses, fallbacks) == (FUSED, "1", "0", "0")


def test_a_tier_choice_on_a_miss_never_replaces_a_winner_stored_meanwhile(tmp_path):
    """The race behind the same principle: a process decides a key by tier while another stores its measured
    winner; the tier choice is stored only where no winner exists."""
    db = str(tmp_path / "registry.db")
    st = SqlStore(db)
    region = _region()
    fingerprint = envmod.environment("cpu").fingerprint
    measured = SolutionRecord(region.key.id, FUSED, "numba_rmsnorm_fused@x", {}, "measured", fingerprint, 0.4)
    tier = SolutionRecord(region.key.id, "numpy_rmsnorm", "numpy_rmsnorm@x", {}, "tier", fingerprint)
    assert st.add_solution(measured) is True
    assert SqlStore(db).add_solution(tier) is False
    kept = SqlStore(db).load_solution(region.key.id, fingerprint)
    assert (kept.candidate_name, kept.chosen_by, kept.margin) == (FUSED, "measured", 0.4)
