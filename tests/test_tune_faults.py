"""A solution that passes the gate and then raises while being timed fails alone, on every tuning path
(issue 20 item 13): no figure for it, the others still measured, its failure recorded with the reason.
Before, ``tune_region`` raised out of the key and ``arbiter tune`` ended in a traceback; only ``--isolate``
recorded "crashed while timed"."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from arbiter import dispatch
from arbiter.regions import RMSNorm
from arbiter.store.sql import SqlStore
from arbiter.tune import tune_region

ROOT = Path(__file__).resolve().parents[1]


def _fresh_plugin():
    sys.path.insert(0, str(Path(__file__).parent))
    import raising_plugin

    raising_plugin.RaisesWhenTimed.calls = raising_plugin.RaisesWhenTimed.plain = 0
    return raising_plugin.RaisesWhenTimed()


def test_tune_region_fails_the_raising_solution_alone_and_decides_by_the_others(only_candidates):
    from arbiter.candidates import REGISTRY

    REGISTRY.load_builtin("cpu")
    others = list(REGISTRY.candidates("cpu", "rmsnorm"))
    only_candidates("cpu", "rmsnorm", _fresh_plugin(), *others)
    rng = np.random.default_rng(0)
    region = RMSNorm(rng.standard_normal((8, 100)).astype(np.float32), rng.standard_normal(100).astype(np.float32))
    st = dispatch.store()
    decision = tune_region(region, st, budget_s=0.5)
    rows = {r.candidate.name: r for r in decision.rows}
    bad = rows["raises_when_timed"]
    assert bad.status == "failed" and bad.timing is None
    assert bad.reason == "crashed while timed: raised RuntimeError: plug-in fault: scratch buffer exhausted"
    assert decision.winner.candidate.name != "raises_when_timed"
    timed = {m.candidate_name for m in st.load_measurements(region.key.id, decision.env.fingerprint)}
    assert "raises_when_timed" not in timed
    assert timed == {r.candidate.name for r in decision.rows if r.status == "passed"} and timed
    assert st.load_solution(region.key.id, decision.env.fingerprint).candidate_name == decision.winner.candidate.name


def test_arbiter_tune_with_a_raising_plugin_measures_the_others_and_says_why(tmp_path):
    db = str(tmp_path / "registry.db")
    env = {**os.environ, "ARBITER_PLUGINS": "raising_plugin", "COLUMNS": "200",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "arbiter", "--db", db, "tune", "--op", "rmsnorm", "--shape",
                           "8x100", "--budget-seconds", "30"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "crashed while timed" in done.stdout and "tuned 1 key(s)" in done.stdout
    st = SqlStore(db)
    [solution] = st.solutions()
    assert solution.candidate_name != "raises_when_timed"
    timed = {m.candidate_name for m in st.load_measurements(solution.key, solution.env)}
    assert timed and "raises_when_timed" not in timed
    [(_, _, verdict)] = [v for v in st.verdicts() if v[1] == "raises_when_timed"]
    assert not verdict.passed and verdict.reason.startswith("crashed while timed: raised RuntimeError")
