"""``arbiter run``, the main job, as a user runs it (a subprocess on a fresh registry): it gates every
candidate and times the solutions of every key, prints how each winner was chosen, and a second run
serves everything from the registry; ``--policy strict`` lists every missing key and the command that
fills them (issue 16 items 4 and 5)."""
import os
import re
import shlex
import subprocess
import sys

import pytest

from arbiter.suite import suite

N = len(suite("quick"))


def arbiter_cli(*args, cwd):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARBITER_")}
    return subprocess.run([sys.executable, "-m", "arbiter", *args], env={**env, "COLUMNS": "200"},
                          capture_output=True, text=True, timeout=600, cwd=cwd)


@pytest.mark.slow
def test_run_measures_every_key_then_serves_them_from_the_registry(tmp_path):
    db = str(tmp_path / "r.db")
    first = arbiter_cli("--db", db, "run", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    summary = re.search(r"(\d+) of (\d+) keys decided now: (\d+) verdicts and (\d+) timings computed", first.stdout)
    assert summary, first.stdout
    decided, total, verdicts, timings = map(int, summary.groups())
    assert decided == total == N and verdicts >= N and timings >= N  # every key gated and timed
    for header in ("winner", "how chosen", "margin", "over", "gate failed"):
        assert header in first.stdout
    # how each key was chosen: which keys separate (measured) and which do not (tier default: not separated)
    # depends on the machine's load, so only that every key says one of them is asserted
    assert len(re.findall(r"\bmeasured\b|tier default: ", first.stdout)) >= N, first.stdout
    assert len(re.findall(r"\b\d+ of \d+\b", first.stdout)) >= N  # a gate count on every key's row
    # A measured winner's margin says it is faster than the solution named beside it (and the spread follows).
    for row in first.stdout.splitlines():
        cells = [c.strip() for c in row.split("│")]
        if len(cells) > 5 and cells[3] == "measured":
            assert re.match(r"\d+\.\d\dx faster", cells[4]), row
    second = arbiter_cli("--db", db, "run", cwd=tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"all {N} keys served from the registry: 0 verdicts and 0 timings computed" in second.stdout
    assert "(stored)" in second.stdout


@pytest.mark.slow
def test_strict_lists_every_missing_key_and_the_command_that_fills_them(tmp_path):
    db = str(tmp_path / "r.db")
    # The README's sequence: a two-shape tune, then the strict main job.
    tuned = arbiter_cli("--db", db, "tune", "--op", "matmul", "--shape", "512x1x512", "--shape", "256x256x256",
                        "--dtype", "float32", cwd=tmp_path)
    assert tuned.returncode == 0, tuned.stdout + tuned.stderr
    strict = arbiter_cli("--db", db, "run", "--policy", "strict", cwd=tmp_path)
    assert strict.returncode == 2, strict.stdout + strict.stderr
    listed = [line for line in strict.stdout.splitlines() if line.startswith("  ") and "[cpu:" in line]
    assert len(listed) == N - 1, strict.stdout  # 512x1x512 is a quick-suite key; 256^3 is not
    assert "cpu:matmul:float32:RR:activation=none,bias=0,residual=0:m512,n1,k512" not in strict.stdout
    command = strict.stdout.strip().splitlines()[-1].strip()
    assert command == f"arbiter --db {db} tune --suite quick", strict.stdout
    filled = arbiter_cli(*shlex.split(command)[1:], cwd=tmp_path)
    assert filled.returncode == 0, filled.stdout + filled.stderr
    again = arbiter_cli("--db", db, "run", "--policy", "strict", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"all {N} keys served from the registry: 0 verdicts and 0 timings computed" in again.stdout


def test_strict_on_an_empty_registry_lists_every_key_and_the_command_that_fills_them(tmp_path):
    """The short real-process run of ``arbiter run`` in the README's command (the two above are `slow`, run by
    ``.ci/run``'s second step): ``--policy strict`` computes nothing, lists every quick-suite key and exits 2."""
    db = str(tmp_path / "r.db")
    strict = arbiter_cli("--db", db, "run", "--policy", "strict", cwd=tmp_path)
    assert strict.returncode == 2, strict.stdout + strict.stderr
    listed = [line for line in strict.stdout.splitlines() if line.startswith("  ") and "[cpu:" in line]
    assert len(listed) == N, strict.stdout
    assert strict.stdout.strip().splitlines()[-1].strip() == f"arbiter --db {db} tune --suite quick", strict.stdout
    assert "Traceback" not in strict.stdout + strict.stderr
