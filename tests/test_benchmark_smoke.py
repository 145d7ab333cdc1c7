"""The GPU benchmarks' --quick modes run in CI: without a GPU they say so and exit 0; with one they
run their smallest configurations end to end and write their tables."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_support import gpu_available

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script, table", [("model_block.py", "model_block.md"), ("user_path.py", "user_path.md")])
def test_quick_mode_runs_or_skips_cleanly(tmp_path, script, table):
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--quick", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=900,
                         env={**os.environ, "ARBITER_DB": str(tmp_path / "registry.db")})
    assert run.returncode == 0, run.stdout + run.stderr
    if gpu_available():
        assert (tmp_path / table).read_text().strip()
    else:
        assert "skipped" in run.stdout and not (tmp_path / table).exists()
