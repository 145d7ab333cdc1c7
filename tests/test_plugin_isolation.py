"""A plug-in that hangs or crashes fails its own verdict, not its caller (issue 40 item 7): a plug-in's gate runs
in a child process with a time limit by default, for ``run_arbitrated`` under policy tune and for ``arbiter tune``
without --isolate; an isolated child is timed warm. Real processes, a real SIGSEGV, a real hang."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np

from arbiter.candidates import REGISTRY
from arbiter.isolate import Isolated
from arbiter.regions import Softmax
from test_cli_output import ROOT, _env

CALLER = """
    import json, numpy as np, arbiter
    from arbiter import dispatch
    from arbiter.regions import Softmax
    x = np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)
    y = arbiter.run_arbitrated("softmax", Softmax(x), policy="tune")
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    st = dispatch.store()
    print("RESULT " + json.dumps({"err": float(abs(y - e / e.sum(axis=1, keepdims=True)).max()),
                                  "served": dispatch.route(Softmax(x).key).candidate.name}))
"""


def _hostile_env(tmp_path, **extra):
    return _env(plugins=("plugin_hostile",), ARBITER_DB=str(tmp_path / "r.db"), ARBITER_PLUGIN_TIMEOUT_S="5",
                **extra)


def test_a_hanging_and_a_crashing_plugin_fail_their_gate_and_the_caller_is_served(tmp_path):
    # before: the caller hung forever in the hanging candidate's gate (or died with rc 139 in the crashing one's)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(CALLER)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=_hostile_env(tmp_path))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert result["served"] not in ("hangs_forever", "segfaults") and result["err"] < 1e-6, result
    explained = subprocess.run([sys.executable, "-m", "arbiter", "explain", "--op", "softmax", "--shape", "8x64",
                                "--json"], capture_output=True, text=True, timeout=300, cwd=ROOT,
                               env=_hostile_env(tmp_path))
    rows = {r["solution"]: r for r in json.loads(explained.stdout)["rows"]}
    assert rows["hangs_forever"]["reason"].startswith("isolated: timed out after 5 s (killed)"), rows
    assert rows["segfaults"]["reason"].startswith("isolated: crashed with SIGSEGV"), rows


def test_arbiter_tune_without_isolate_survives_them_too(tmp_path):
    done = subprocess.run([sys.executable, "-m", "arbiter", "tune", "--op", "softmax", "--shape", "8x64", "--json"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env=_hostile_env(tmp_path))
    assert done.returncode == 0, done.stderr
    [tuned] = json.loads(done.stdout)["tuned"]
    assert tuned["winner"] not in ("hangs_forever", "segfaults")
    reasons = {s["solution"]: s["reason"] for s in tuned["solutions"]}
    assert "timed out" in reasons["hangs_forever"] and "SIGSEGV" in reasons["segfaults"]


def test_the_isolated_child_is_kept_and_timed_warm(rng):
    region = Softmax(rng.standard_normal((64, 1000)).astype(np.float32))
    cand = REGISTRY.get("numpy_softmax", "cpu", "softmax")
    runner = Isolated(timeout_s=120)
    try:
        first = runner.measure(cand, {}, region, time_cap_s=0.2)
        pid = runner._proc.pid
        second = runner.measure(cand, {}, region, time_cap_s=0.2)
        assert runner._proc.pid == pid  # one child for both: warm
        assert first.median_s > 0 and second.median_s > 0
    finally:
        runner.close()
