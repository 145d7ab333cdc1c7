"""Claim holders are unique across containers (issue 28 item 6): two PID namespaces both run a process 1 on
hosts of one name, and a stalled holder's late result must still be refused. Real processes in real PID
namespaces (``unshare --pid``; skipped where this user may not create one)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from arbiter.store.claims import Claims, counts
from arbiter.store.sql import SqlStore
from tests.store._workers import ENV, key

ROOT = Path(__file__).resolve().parents[2]

HOLDER = r"""
import sys, time
from arbiter.store import MeasurementRecord, SolutionRecord
from arbiter.store.claims import Claims, LostClaim
from arbiter.store.sql import SqlStore
from tests.store._workers import ENV, key

import os
db, lease, go = sys.argv[1], float(sys.argv[2]), sys.argv[3]
st = SqlStore(db)
claims = Claims(st, lease_s=lease)
got = claims.claim(ENV)
print("claimed", got, claims.holder, flush=True)
while not os.path.exists(go):  # stalled (past its lease) or working, until the test says go
    time.sleep(0.05)
try:
    with st.transaction():
        st.save_measurements(got, ENV, [MeasurementRecord("lab_kernel", {}, "device", 1e-5, 1e-5, 1e-5, 0.01,
                                                          10, 0.0)])
        st.save_solution(SolutionRecord(got, "lab_kernel", "lab_kernel@1", {}, "measured", ENV, 0.2))
        claims.finish(got, ENV)
    print("committed", flush=True)
except LostClaim:
    print("refused", flush=True)
"""


def _in_own_pid_namespace(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen(["unshare", "--pid", "--fork", sys.executable, "-c", HOLDER, *map(str, args)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_holders_in_two_pid_namespaces_are_told_apart(tmp_path):
    """Before: both holders were ``host:1``; the stalled one's late result committed as if it still held the
    claim, and the live holder's was refused."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "--pid", "--fork", "true"],
                                                         capture_output=True).returncode != 0:
        pytest.skip("cannot create a PID namespace here (unshare --pid needs root or user namespaces)")
    db = str(tmp_path / "registry.db")
    Claims(SqlStore(db)).offer([key(1)], ENV)
    go_stalled, go_live = tmp_path / "go-stalled", tmp_path / "go-live"
    stalled = _in_own_pid_namespace(db, 0.5, go_stalled)  # claims, then stalls past its 0.5 s lease
    first = stalled.stdout.readline().split()
    assert first[:2] == ["claimed", key(1)], stalled.stderr.read()
    time.sleep(0.8)
    live = _in_own_pid_namespace(db, 30, go_live)  # takes the lapsed claim over
    second = live.stdout.readline().split()
    assert second[:2] == ["claimed", key(1)], live.stderr.read()
    assert first[2].split(":")[1] == second[2].split(":")[1] == "1"  # process 1 of its namespace, both
    go_stalled.touch()  # the stalled holder wakes up first, then the live one commits
    assert stalled.stdout.readline().strip() == "refused", stalled.stderr.read()
    go_live.touch()
    assert live.stdout.readline().strip() == "committed", live.stderr.read()
    stalled.wait(30)
    live.wait(30)
    assert counts(SqlStore(db)) == {"done": 1}
