"""The README's worked example runs as written, in its own process, on a real registry file."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_custom_candidate_example_runs(tmp_path):
    env = dict(os.environ, ARBITER_DB=str(tmp_path / "registry.db"))
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "custom_candidate.py")], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "my_softmax" in done.stdout and "hits 99 loads 1 misses 0" in done.stdout
