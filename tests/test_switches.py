"""ARBITER_VERBOSE and ARBITER_DISABLE, used as a user does: environment variables of a fresh process."""
import os
import subprocess
import sys

SCRIPT = """
import numpy as np
import arbiter
from arbiter.regions import Softmax
x = np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32)
region = Softmax(x)
for _ in range(5):
    y = arbiter.run_arbitrated("softmax", region)
assert np.allclose(y, np.exp(x) / np.exp(x).sum(-1, keepdims=True), atol=1e-6)
arbiter.flush()
print([(r["solution"], r["policy"], r["hits"], r["misses"]) for r in arbiter.stats()])
"""


def _run(tmp_path, **env):
    base = {k: v for k, v in os.environ.items() if not k.startswith("ARBITER_")}
    return subprocess.run([sys.executable, "-c", SCRIPT], env={**base, **env}, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)


def test_verbose_prints_each_decision_once(tmp_path):
    db = str(tmp_path / "r.db")
    first = _run(tmp_path, ARBITER_VERBOSE="1", ARBITER_DB=db, ARBITER_POLICY="tune")
    assert first.returncode == 0, first.stderr
    lines = [line for line in first.stderr.splitlines() if line.startswith("arbiter: cpu:softmax")]
    assert len(lines) == 1, first.stderr  # five dispatches, one decision
    assert "decided now, " in lines[0] and ("measured, margin" in lines[0] or "tier" in lines[0]), lines[0]
    winner = lines[0].split(" -> ")[1].split(" (")[0]
    second = _run(tmp_path, ARBITER_VERBOSE="1", ARBITER_DB=db)
    [line] = [line for line in second.stderr.splitlines() if line.startswith("arbiter: cpu:softmax")]
    assert f"-> {winner} (stored, " in line, line
    quiet = _run(tmp_path, ARBITER_DB=db)
    assert "arbiter:" not in quiet.stderr


def test_verbose_names_the_solutions_that_failed_the_gate(tmp_path):
    plugin = tmp_path / "wrong_softmax.py"
    plugin.write_text(
        "import numpy as np\nimport arbiter\n"
        "@arbiter.candidate(op='softmax', tier=arbiter.Tier.HAND_TUNED, priority=99)\n"
        "def wrong_softmax(region):\n    out = region.alloc_out()\n    out[...] = 0.5\n    return out\n")
    out = _run(tmp_path, ARBITER_VERBOSE="1", ARBITER_DB=str(tmp_path / "r.db"), ARBITER_PLUGINS="wrong_softmax",
               PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    assert out.returncode == 0, out.stderr
    assert "arbiter:   failed the gate: wrong_softmax: " in out.stderr, out.stderr


def test_disable_serves_the_tier_default_without_the_registry(tmp_path):
    db = tmp_path / "r.db"
    out = _run(tmp_path, ARBITER_DISABLE="1", ARBITER_DB=str(db), ARBITER_POLICY="strict", ARBITER_VERBOSE="1")
    assert out.returncode == 0, out.stderr  # strict would raise: nothing is stored; the switch wins
    assert "('numpy_softmax', 'disabled', 4, 1)" in out.stdout, out.stdout
    assert "ARBITER_DISABLE" in out.stderr
    assert not db.exists()  # neither created, nor written (counters included)
    db.write_bytes(b"not a registry, and never read" * 100)  # a broken registry would stop a read with an error
    again = _run(tmp_path, ARBITER_DISABLE="1", ARBITER_DB=str(db))
    assert again.returncode == 0 and "disabled" in again.stdout, again.stderr
    assert _run(tmp_path, ARBITER_DB=str(db)).returncode != 0  # the same file, read with the arbiter on
