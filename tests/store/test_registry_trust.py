"""The registry's trust model (issue 28 item 5; docs/reliability.md, "Registry trust"): a registry another user
can write is refused unless named in ARBITER_TRUST_REGISTRY; where it is opened anyway, a passed verdict this
user's gate did not vouch for is gated again, so a flipped ``verdicts.passed`` never serves a failed candidate;
``doctor`` reports it; ``export --env --out`` publishes through a name nobody can create first.

Real processes and a real second user (``arbiter_other``, created when missing); skipped where not root."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from tests.targets.test_numba_cache import OTHER, _as_other, needs_other_user

VICTIM = """
    import json, os, warnings
    import numpy as np
    import arbiter
    from arbiter import dispatch
    from arbiter.regions import Softmax
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)
        y = arbiter.run_arbitrated("softmax", Softmax(x), policy=os.environ.get("POLICY"))
        arbiter.flush()
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True)
    route = dispatch.route(Softmax(x).key)
    print("RESULT " + json.dumps({"err": float(abs(y - ref).max()), "served": route.candidate.name,
                                  "verified": dispatch.verified_count(),
                                  "warnings": [str(w.message) for w in caught if "kernel-arbiter" in str(w.message)]}))
"""


def _env(db: Path, **extra) -> dict:
    env = {**os.environ, "ARBITER_DB": str(db), "ARBITER_PLUGINS": "tests.store.plugin_inexact",
           "PYTHONPATH": os.environ.get("PYTHONPATH", "") or str(Path(__file__).parents[2]), **extra}
    env.pop("ARBITER_SYSTEM_DB", None)
    env.pop("ARBITER_TRUST_REGISTRY", None)
    env.update(extra)
    return env


def _victim(env: dict) -> dict:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(VICTIM)], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.split("RESULT ", 1)[1])


def _doctor(env: dict) -> subprocess.CompletedProcess:
    # A wide $COLUMNS: the temporary path is long, and a machine's own $COLUMNS (80) folds the line in it.
    return subprocess.run([sys.executable, "-m", "arbiter", "doctor"], env={**env, "COLUMNS": "1000"},
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def shared():
    path = Path(tempfile.mkdtemp(prefix="arbiter-trust-"))
    path.chmod(0o1777)  # like /tmp: both users reach it, neither may replace the other's files
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _flip(db: Path) -> None:
    """What the other user does with write access: the failed plug-in's verdict says passed, and the key's
    solution names it (the sqlite3 command line, run as that user)."""
    sql = ("UPDATE verdicts SET passed = 1, reason = '' WHERE identity IN "
           "(SELECT identity FROM candidates WHERE name = 'inexact_softmax'); "
           "UPDATE solutions SET candidate = 'inexact_softmax', identity = (SELECT identity FROM candidates "
           "WHERE name = 'inexact_softmax'), params = '{}';")
    if shutil.which("sqlite3") is None:  # (this Python may not be the other user's to run, so the CLI is used)
        pytest.skip("needs the sqlite3 command line, which the other user runs")
    _as_other(f"sqlite3 {db} \"{sql}\"")


@needs_other_user
def test_a_flipped_verdict_never_serves_the_candidate_the_gate_failed(shared):
    db = shared / "registry.db"
    env = _env(db)
    first = _victim({**env, "POLICY": "tune"})  # every candidate gated (the plug-in fails) and timed
    assert first["served"] != "inexact_softmax" and first["err"] < 1e-5
    with sqlite3.connect(db) as conn:
        [(passed,)] = conn.execute("SELECT passed FROM verdicts v JOIN candidates c ON v.identity = c.identity "
                                   "WHERE c.name = 'inexact_softmax'").fetchall()
    assert passed == 0
    for f in db.parent.glob("registry.db*"):
        f.chmod(0o666)  # the file as the issue found it: writable by everyone
    _flip(db)

    # Before: the file was opened, the flipped verdict trusted: inexact_softmax served (max error 0.05), 0
    # verdicts computed, doctor said ok. Now: refused, with the file and the fix named.
    refused = _victim(env)
    assert refused["served"] != "inexact_softmax" and refused["err"] < 1e-5, refused
    [warning] = refused["warnings"]
    assert str(db) in warning and "writable by others (mode 0666)" in warning and "ARBITER_TRUST_REGISTRY" in warning
    doctor = _doctor(env)
    assert doctor.returncode == 1 and "writable by others" in doctor.stdout, doctor.stdout

    # Opened anyway when named: the flipped verdict is not this user's gate's, so the gate runs again.
    named = _env(db, ARBITER_TRUST_REGISTRY=str(db))
    doctor = _doctor(named)
    out = " ".join(doctor.stdout.split())
    assert doctor.returncode == 1 and "inexact_softmax rests on a passed verdict your gate did not compute" in out, out
    opened = _victim(named)
    assert opened["served"] != "inexact_softmax" and opened["err"] < 1e-5 and opened["verified"] >= 1, opened
    assert not opened["warnings"]
    with sqlite3.connect(db) as conn:
        [(passed,)] = conn.execute("SELECT passed FROM verdicts v JOIN candidates c ON v.identity = c.identity "
                                   "WHERE c.name = 'inexact_softmax'").fetchall()
    assert passed == 0  # the gate's own verdict replaced the flipped row


@needs_other_user
def test_following_the_refusals_advice_does_not_make_a_tampered_registry_trusted(shared, tmp_path):
    """Issue 40 item 1: the refusal advises a copy of one's own or ``chmod go-w``; before, following either served
    the flipped verdict's candidate (max error 0.050, 0 verdicts computed) and doctor said ok. Trust follows where a
    verdict came from (this user's ledger), not the file's mode now."""
    db = shared / "registry.db"
    first = _victim({**_env(db), "POLICY": "tune"})
    assert first["served"] != "inexact_softmax"
    for f in db.parent.glob("registry.db*"):
        f.chmod(0o666)
    _flip(db)
    copied = tmp_path / "mine.db"  # the first fix: `cp FILE mine.db` (a file of one's own, mode 0644)
    shutil.copy(db, copied)
    copied.chmod(0o644)
    for f in db.parent.glob("registry.db*"):  # the second fix: `chmod go-w` on the original
        f.chmod(0o644)
    for fixed in (copied, db):
        env = _env(fixed)
        doctor = _doctor(env)
        out = " ".join(doctor.stdout.split())
        assert doctor.returncode == 1 and "inexact_softmax rests on a passed verdict your gate did not compute" in \
            out, out
        served = _victim(env)
        assert served["served"] != "inexact_softmax" and served["err"] < 1e-5 and served["verified"] >= 1, served
        assert _doctor(env).returncode == 0  # the gate's own verdict replaced the flipped row
        again = _victim(env)
        assert again["verified"] == 0 and again["served"] == served["served"]  # trusted now: this user computed it


def test_a_registry_exported_and_imported_again_stays_usable(tmp_path):
    mine = tmp_path / "mine.db"
    first = _victim({**_env(mine), "POLICY": "tune"})
    export = tmp_path / "mine.jsonl"
    cli = [sys.executable, "-m", "arbiter"]
    assert subprocess.run([*cli, "--db", str(mine), "export", str(export)], env=_env(mine)).returncode == 0
    fresh = tmp_path / "fresh.db"
    assert subprocess.run([*cli, "--db", str(fresh), "import", str(export)], env=_env(fresh)).returncode == 0
    again = _victim(_env(fresh))  # the imported solution serves; imported verdicts are gated here once
    assert again["served"] == first["served"] and again["err"] < 1e-5


@needs_other_user
def test_a_registry_of_another_user_is_refused_even_for_root_unless_named(shared):
    mine = shared / "mine.db"
    _victim(_env(mine))  # a real registry, which the other user copies: theirs, mode 0644
    mine.chmod(0o644)
    db = shared / "theirs.db"
    _as_other(f"cp {mine} {db} && chmod 644 {db}")
    mine.unlink()
    env = _env(db)
    refused = _victim(env)
    [warning] = refused["warnings"]
    assert str(db) in warning and f"owned by {OTHER}" in warning and "ARBITER_TRUST_REGISTRY" in warning
    assert "in-memory" in warning
    doctor = _doctor(env)
    assert doctor.returncode == 1 and f"owned by {OTHER}" in doctor.stdout
    assert os.stat(db).st_uid != 0 and sorted(p.name for p in shared.iterdir()) == ["theirs.db"]


def test_a_registry_of_ones_own_is_opened_and_its_verdicts_trusted(tmp_path):
    db = tmp_path / "mine.db"
    env = _env(db)
    first = _victim(env)
    second = _victim(env)
    assert first["verified"] >= 1 and second["verified"] == 0 and not second["warnings"]
    doctor = _doctor(env)
    assert doctor.returncode == 0 and ": ok," in doctor.stdout


@needs_other_user
def test_export_env_out_never_writes_through_a_file_another_user_created_first(shared, tmp_path):
    db = tmp_path / "mine.db"
    env = _env(db)
    _victim(env)
    fingerprint = sqlite3.connect(db).execute("SELECT fingerprint FROM environments").fetchone()[0]
    out = shared / "system.db"
    # Before: the partial file was OUT.partial-<pid>: the other user creates it for the next pids, world-writable,
    # and the published system.db was then their file.
    first = os.getpid()
    last = min(first + 20000, int(Path("/proc/sys/kernel/pid_max").read_text()) - 1)
    _as_other(f"cd {shared} && seq -f 'system.db.partial-%.0f' {first} {last} | xargs touch && "
              f"seq -f 'system.db.partial-%.0f' {first} {last} | xargs chmod 666")
    result = subprocess.run([sys.executable, "-m", "arbiter", "export", "--env", fingerprint, "--out", str(out)],
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    st = os.stat(out)
    assert st.st_uid == os.geteuid() and st.st_mode & 0o777 == 0o444
    assert len(list(shared.glob("system.db.partial-*"))) == last - first + 1  # theirs only, untouched
    with sqlite3.connect(f"file:{out}?mode=ro", uri=True) as conn:
        assert conn.execute("SELECT count(*) FROM solutions").fetchone()[0] >= 1


def test_on_a_server_a_flipped_verdict_is_gated_again_and_doctor_names_it(postgres):
    # A server database: anyone with its credentials writes it, so a passed verdict counts only if this user's
    # gate vouched for it (its ledger, in the private cache folder).
    db = postgres.new()
    env = _env(Path("unused"), ARBITER_DB=db)
    first = _victim({**env, "POLICY": "tune"})
    assert first["served"] != "inexact_softmax"
    assert _victim(env)["verified"] == 0  # this user's own verdicts: warm on a server too
    postgres.script(db, "UPDATE verdicts SET passed = TRUE, reason = '' WHERE identity IN "
                        "(SELECT identity FROM candidates WHERE name = 'inexact_softmax'); "
                        "UPDATE solutions SET candidate = 'inexact_softmax', identity = (SELECT identity FROM "
                        "candidates WHERE name = 'inexact_softmax'), params = '{}'")
    doctor = _doctor(env)
    out = " ".join(doctor.stdout.split())
    assert doctor.returncode == 1 and "inexact_softmax rests on a passed verdict your gate did not compute" in out, out
    after = _victim(env)
    assert after["served"] != "inexact_softmax" and after["err"] < 1e-5 and after["verified"] >= 1, after
    assert postgres.query(db, "SELECT v.passed FROM verdicts v JOIN candidates c ON v.identity = c.identity "
                              "WHERE c.name = 'inexact_softmax'") == [(False,)]
