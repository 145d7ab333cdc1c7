"""The checks CI runs before the tests, run by the tests too, so `python -m pytest` alone catches what they
catch: ruff (the rules in pyproject.toml's [tool.ruff]) on the code, tests, benchmarks and examples, and mypy (at
the strictness of [tool.mypy]) on arbiter/. Both are in the `test` extra."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str, timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_ruff_finds_nothing():
    done = _run("ruff", "check", "--no-cache", "arbiter", "tests", "benchmarks", "examples", timeout=300)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def test_mypy_finds_nothing_in_arbiter():
    done = _run("mypy", timeout=900)  # files, strictness and library overrides: pyproject.toml
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "Success: no issues found" in done.stdout
