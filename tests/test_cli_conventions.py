"""The CLI keeps a command line's conventions (issue 29, items 4-6): --version and -h, ``export -`` to stdout,
``explain`` of a key as ``stats`` prints it, a missing registry / unknown op named with a non-zero exit, a hint
when nothing was recorded, --json on run, tune and doctor, the tuning budget from the environment, decisions
through ``logging``, and a progress bar when stderr is a terminal."""
from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time

import pytest

import arbiter as arbiter_pkg
from test_cli_output import ROOT, _env, arbiter, joined, ok

SOFTMAX = ["--op", "softmax", "--shape", "4x8"]


def test_version_and_short_help():
    assert ok(arbiter("--version")).strip() == f"kernel-arbiter {arbiter_pkg.__version__}"
    assert "Usage:" in ok(arbiter("-h")) and "--db" in ok(arbiter("stats", "-h"))


def test_a_missing_registry_and_an_unknown_op_exit_non_zero_naming_themselves(tmp_path):
    done = arbiter("--db", tmp_path / "nodir" / "x.db", "stats")
    assert done.returncode == 1 and "no registry here" in joined(done.stdout + done.stderr)
    assert not (tmp_path / "nodir").exists()  # reading created nothing
    ok(arbiter("--db", tmp_path / "r.db", "tune", *SOFTMAX))
    done = arbiter("--db", tmp_path / "r.db", "stats", "--op", "sofmax")
    said = joined(done.stdout + done.stderr)
    assert done.returncode == 2 and "--op: unknown op 'sofmax' (did you mean 'softmax'?); known:" in said


def test_export_dash_explain_key_and_json_of_tune_and_doctor(tmp_path):
    db = tmp_path / "r.db"
    tuned = json.loads(ok(arbiter("--db", db, "tune", *SOFTMAX, "--json")))  # stdout is the JSON alone
    [entry] = tuned["tuned"]
    assert entry["key"] == "cpu:softmax:float32:R:axis=last:rows4,cols8" and entry["winner"]
    exported = subprocess.run([sys.executable, "-m", "arbiter", "--db", str(db), "export", "-"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=600, env=_env())
    header, *rows = [json.loads(line) for line in exported.stdout.splitlines()]  # JSON Lines: a header, then rows
    assert header["format"] == "kernel-arbiter-registry" and {r["section"] for r in rows} >= {"solutions"}
    assert not (tmp_path / "-").exists()
    [row] = json.loads(ok(arbiter("--db", db, "stats", "--json")))["solutions"]
    explained = json.loads(ok(arbiter("--db", db, "explain", row["key"], "--json")))
    assert explained["key"] == row["key"] and explained["rows"]
    doctor = json.loads(ok(arbiter("--db", db, "doctor", "--json")))
    assert doctor["ok"] and doctor["state"] == "ok" and doctor["rows"]["solutions"] == 1


def test_doctor_lines_fit_80_columns(tmp_path):
    db = tmp_path / "r.db"
    ok(arbiter("--db", db, "tune", *SOFTMAX))
    assert max(map(len, ok(arbiter("--db", db, "doctor")).splitlines())) <= 80


def test_nothing_recorded_says_why_and_the_budget_comes_from_the_environment(tmp_path):
    out = ok(arbiter("--db", tmp_path / "r.db", "tune", "--from-recorded"))
    assert "nothing recorded to tune" in joined(out) and "ARBITER_POLICY=record" in joined(out)
    done = subprocess.run([sys.executable, "-m", "arbiter", "--db", str(tmp_path / "m.db"), "tune", "--op",
                           "softmax", "--shape", "4x8", "--shape", "4x16"], capture_output=True, text=True,
                          timeout=600, env=_env(ARBITER_TUNE_BUDGET_SECONDS="0"), cwd=ROOT)
    assert "--budget-seconds reached" in joined(done.stdout), done.stdout + done.stderr


def test_decisions_go_through_the_logging_module(tmp_path):
    code = ("import logging, numpy as np\nlogging.basicConfig(level=logging.INFO, format='LOG %(name)s %(message)s')\n"
            "import arbiter\nfrom arbiter import regions\n"
            "arbiter.run_arbitrated('softmax', regions.Softmax(np.ones((4, 8), np.float32)), policy='tier')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          env=_env(ARBITER_DB=str(tmp_path / "r.db")), cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "LOG arbiter arbiter: cpu:softmax:float32" in done.stderr  # no ARBITER_VERBOSE: the user's logging


def _on_a_terminal(args, tmp_path, seconds: float = 300) -> bytes:
    """``arbiter ARGS`` with stderr on a pseudo-terminal (stdout piped): what the terminal received."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))  # a terminal 80 columns wide
    proc = subprocess.Popen([sys.executable, "-m", "arbiter", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=follower, stdin=subprocess.DEVNULL, cwd=ROOT,
                            env={k: v for k, v in _env().items() if k != "COLUMNS"} | {"TERM": "xterm"})
    os.close(follower)
    seen = b""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ready, _, _ = select.select([leader], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: the process ended
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    proc.wait(timeout=60)
    os.close(leader)
    assert proc.returncode == 0, seen.decode(errors="replace")
    return seen


def test_tune_shows_a_progress_bar_on_a_terminal(tmp_path):
    # a SQLite registry: tune takes the claims path, which showed no bar before (0 bytes on stderr)
    seen = _on_a_terminal(["--db", tmp_path / "r.db", "tune", "--op", "matmul", "--shape", "64x64x64", "--shape",
                           "32x32x32"], tmp_path)
    text = seen.decode(errors="replace")
    assert "keys" in text and "━" in text, text[-2000:]


@pytest.mark.slow
def test_run_json_and_a_bar_on_a_terminal(tmp_path):
    db = tmp_path / "r.db"
    out = json.loads(ok(arbiter("--db", db, "run", "--policy", "tier", "--calls", "1", "--json")))
    assert out["suite"] == "quick" and len(out["keys"]) == out["decided_now"] > 0
    text = _on_a_terminal(["--db", db, "run", "--calls", "1"], tmp_path).decode(errors="replace")
    assert "keys" in text and "━" in text
