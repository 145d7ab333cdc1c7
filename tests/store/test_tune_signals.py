"""A tuner terminated mid-key (issue 28 item 7): SIGTERM or SIGHUP give the key's claim back at once, the process
still ends by that signal, and a run never reports success while a key it was asked for is held by a live lease.
Real ``arbiter tune`` processes on the default local SQLite registry."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from arbiter.store.claims import counts
from arbiter.store.sql import SqlStore

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["tune", "--op", "rmsnorm", "--shape", "64x4096", "--shape", "32x4096"]


def _env():
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "COLUMNS": "250"}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_tuner_signalled_mid_key_releases_its_claim_and_the_rerun_tunes_every_key(tmp_path, sig):
    """Before: the signalled tuner left its key claimed for the 60 s lease; the rerun printed "tuned 1 key(s)",
    exit 0, the other key silently skipped. Only SIGINT released the claim."""
    db = str(tmp_path / "registry.db")
    proc = subprocess.Popen([sys.executable, "-m", "arbiter", "--db", db, *ARGS], cwd=tmp_path, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "gating and timing" in line:  # mid-key: its claim is held
            break
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
    text = "".join(lines) + out
    assert proc.returncode == -sig, text
    assert "claimed" not in counts(SqlStore(db)), text  # given back at once, not after the lease
    again = subprocess.run([sys.executable, "-m", "arbiter", "--db", db, *ARGS], cwd=tmp_path, env=_env(),
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert counts(SqlStore(db)) == {"done": 2}, again.stdout


def test_a_key_held_by_a_live_lease_is_waited_for_not_skipped(tmp_path):
    """Before: a key another holder held (a tuner SIGKILLed mid-key) was skipped without a word and the run said
    "tuned 1 key(s)", exit 0. Now the run waits for the lease (the key ends done, or is taken over once it
    lapses) and then tunes it. The dead holder's lease lapses when the run says it waits for it (a fixed 12 s
    lease lapsed first on a loaded machine, while the run was still starting: nothing was left to wait for)."""
    import sqlite3

    from arbiter import env as envmod
    from arbiter.cli.tune import problems_from_options
    from arbiter.store.claims import Claims

    db = str(tmp_path / "registry.db")
    keys = [p.key("cpu").id for p in problems_from_options("rmsnorm", ["64x4096", "32x4096"], ["float32"], "none",
                                                          False, False)]
    fingerprint = envmod.environment("cpu").fingerprint
    dead = Claims(SqlStore(db), holder="gone:1:dead", lease_s=600.0)
    dead.offer(keys, fingerprint)
    assert dead.claim(fingerprint, [keys[0]]) == keys[0]  # and never renewed: its holder died
    proc = subprocess.Popen([sys.executable, "-m", "arbiter", "--db", db, *ARGS], cwd=tmp_path, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "claimed by gone:1:dead" in line:  # waiting for the live lease, not skipping the key
            break
    with sqlite3.connect(db) as conn:  # the lease lapses: the waiting run takes the key over
        conn.execute("UPDATE claims SET expires = 0 WHERE holder = 'gone:1:dead'")
    out, _ = proc.communicate(timeout=300)
    text = "".join(lines) + out
    assert proc.returncode == 0, text
    assert "claimed by gone:1:dead" in text
    assert "tuned 2 key(s)" in text, text
    assert counts(SqlStore(db)) == {"done": 2}
