"""One bad row breaks no caller (issue 40 item 6). Before: ``solutions.params = 'not json'`` made every dispatch
of the environment raise a raw ``JSONDecodeError`` (its solutions are loaded in one query), ``doctor`` end in a
traceback and ``explain`` print ``Expecting value: line 1 column 1``; on PostgreSQL anyone with write access
could do it to a fleet. Now a row that does not decode (bad JSON, JSON of the wrong shape, an unknown policy, a
number that is none) is taken as absent: the key is decided again by the miss policy and the decision replaces
the row, with one warning naming the registry, the table, the key and the fix; ``doctor`` names the row (exit
1, no traceback) and ``doctor --repair`` drops it alone. Real processes on SQLite and PostgreSQL
(docs/reliability.md, "Registry")."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KEY = "cpu:softmax:float32:R:axis=last:rows4,cols16"

DISPATCH = """
import numpy as np, arbiter
from arbiter.regions import Softmax
x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
y = arbiter.run_arbitrated("softmax", Softmax(x))
np.testing.assert_allclose(y, np.exp(x) / np.exp(x).sum(-1, keepdims=True), rtol=1e-5)
print("served", [r["solution"] for r in arbiter.stats() if r["installed"]], flush=True)
"""

# (column, value written over the stored row, dialects it can be stored on: a server's json and float columns
# refuse text that is not JSON or a number; valid JSON of the wrong shape and unknown names it takes)
FAULTS = [("params", "'not json'", ("sqlite",)), ("params", "'[1, 2]'", ("sqlite", "postgresql")),
          ("policy", "'bogus'", ("sqlite", "postgresql")), ("margin", "'abc'", ("sqlite",))]


def _env(db: str, **extra):
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "ARBITER_DB": db, "COLUMNS": "250", **extra}


def _dispatch(db: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", DISPATCH], cwd=ROOT, env=_env(db), capture_output=True, text=True,
                          timeout=300)


def _cli(db: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "arbiter", "--db", db, *args], cwd=ROOT, env=_env(db),
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("column,value,dialects", FAULTS, ids=[f"{c}={v}" for c, v, _ in FAULTS])
def test_a_solution_row_that_does_not_decode_is_decided_again_not_raised(backend, column, value, dialects):
    if backend.name not in dialects:
        pytest.skip(f"{backend.name} refuses {value} in solutions.{column}")
    db = backend.new()
    first = _dispatch(db)
    assert first.returncode == 0, first.stderr
    backend.script(db, f"UPDATE solutions SET {column} = {value}")
    again = _dispatch(db)  # before: JSONDecodeError (or ValueError: 'bogus' is not a valid ChosenBy) raised
    assert again.returncode == 0, again.stderr
    assert "served ['numpy_softmax']" in again.stdout
    assert "Traceback" not in again.stderr, again.stderr
    warned = [line for line in again.stderr.splitlines() if "cannot be read" in line]
    assert len(warned) == 1, again.stderr  # one warning: the registry, the table, the key and the fix
    assert "the solutions row of key " + KEY in warned[0] and "doctor --repair" in warned[0], warned
    assert backend.name == "postgresql" or db in warned[0], warned
    [(params, policy)] = backend.query(db, "SELECT params, policy FROM solutions")
    assert policy == "tier" and params in ({}, "{}")  # the miss decided the key again and replaced the row
    assert _dispatch(db).stderr.count("cannot be read") == 0


def test_doctor_names_an_unreadable_row_and_repair_drops_it_alone(backend):
    db = backend.new()
    assert _dispatch(db).returncode == 0
    backend.script(db, "UPDATE solutions SET policy = 'bogus'")
    doctor = _cli(db, "doctor")  # before: a traceback (JSONDecodeError / ValueError from the solutions' load)
    text = " ".join(doctor.stdout.split())
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    assert "Traceback" not in doctor.stdout + doctor.stderr
    assert f"problem: solutions row 1 of key {KEY}" in text and "policy is 'bogus', not one of" in text, text
    assert "Nothing was changed" in text and "doctor --repair" in text, text
    explain = _cli(db, "explain", "--op", "softmax", "--shape", "4x16")  # before: "Expecting value: line 1 ..."
    assert explain.returncode == 0, explain.stdout + explain.stderr
    assert "Traceback" not in explain.stdout + explain.stderr
    assert f"the solutions row of key {KEY}" in explain.stderr and "cannot be read" in explain.stderr
    verdicts = backend.query(db, "SELECT count(*) FROM verdicts")[0][0]
    assert verdicts > 0
    repair = _cli(db, "doctor", "--repair")
    assert repair.returncode == 0, repair.stdout + repair.stderr
    assert "dropped 1 unreadable row(s) (1 solutions); the other rows are kept" in " ".join(repair.stdout.split())
    assert backend.query(db, "SELECT count(*) FROM solutions")[0][0] == 0
    assert backend.query(db, "SELECT count(*) FROM verdicts")[0][0] == verdicts  # the good rows are kept
    assert _cli(db, "doctor").returncode == 0


def test_a_verdict_and_a_measurement_that_do_not_decode_are_gated_and_timed_again(backend):
    """A verdict whose probes are not a list counts as never computed (the gate runs again and its verdict
    replaces the row); a measurement with an unknown timing mode is left out of what explain shows."""
    db = backend.new()
    assert _cli(db, "tune", "--op", "softmax", "--shape", "4x16", "--budget-seconds", "2").returncode == 0
    bad_measurement = "reps = 'many'" if backend.name == "sqlite" else "mode = 'sideways'"
    backend.script(db, "UPDATE verdicts SET probes = '{\"not\": \"a list\"}'; "
                       f"UPDATE measurements SET {bad_measurement} WHERE id = (SELECT min(id) FROM measurements)")
    explain = _cli(db, "explain", "--op", "softmax", "--shape", "4x16")
    assert explain.returncode == 0, explain.stdout + explain.stderr
    assert "Traceback" not in explain.stdout + explain.stderr
    assert "the verdicts row of key" in explain.stderr and "the measurements row of key" in explain.stderr
    doctor = _cli(db, "doctor", "--repair")
    assert doctor.returncode == 0 and "Traceback" not in doctor.stdout + doctor.stderr, doctor.stdout
    assert _cli(db, "doctor").returncode == 0
