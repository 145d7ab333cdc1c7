"""Many hosts tune into one registry, each key once per environment (issue 18 items 1, 2, 4).

6 tuning processes posing as 3 hosts of each of 2 environment classes (tests/store/_fleet.py's test-only
hook) watch one registry while 2 production processes record 60 keys each; one tuner is SIGKILLed inside a
key, holding its claim. Run on SQLite (one machine) and on the real PostgreSQL server (``backend``).
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.store import _fleet

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(Path(_fleet.__file__))
LEASE_S = 2.0
N = len(_fleet.KEYS)


def _env(**extra):
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "COLUMNS": "200", **extra}


def _start(tmp_path, name, *args, **extra):
    out = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 (the child writes to it after this returns)
    proc = subprocess.Popen([sys.executable, SCRIPT, *args], cwd=tmp_path, env=_env(**extra), stdout=out,
                            stderr=subprocess.STDOUT)
    proc.log = tmp_path / f"{name}.log"
    return proc


def _wait_for(what, predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.mark.slow
def test_six_hosts_of_two_classes_tune_each_recorded_key_once_and_take_over_a_dead_hosts_key(backend, tmp_path):
    from arbiter.store.sql import SqlStore

    db = backend.new()
    SqlStore(db).close()  # the schema, before the processes race to open it

    def q(sql, **params):  # key ids hold ":", so they are bound, never pasted into the text
        from sqlalchemy import create_engine, text
        from sqlalchemy.pool import NullPool

        from arbiter.store.diagnostics import to_url

        engine = create_engine(to_url(db), poolclass=NullPool)
        try:
            with engine.connect() as conn:
                return [tuple(r) for r in conn.execute(text(sql), params).all()]
        finally:
            engine.dispose()

    stall = tmp_path / "stalled-key"
    watch = ["--from-recorded", "--watch", "--poll-seconds", "0.3", "--lease-seconds", str(LEASE_S),
             "--watch-seconds", "170"]
    tuners = [_start(tmp_path, f"tune-{c}{h}", "tune", db, c, *watch,
                     **({"FLEET_TEST_STALL": str(stall)} if (c, h) == ("A", 0) else {}))
              for h in range(3) for c in "AB"]
    victim = tuners[0]
    try:
        recorders = [_start(tmp_path, f"record-{c}", "record", db, c) for c in "AB"]
        for r in recorders:
            assert r.wait(timeout=120) == 0, r.log.read_text()
        envs = {c: r.log.read_text().split()[2] for c, r in zip("AB", recorders)}
        assert envs["A"] != envs["B"]
        assert sorted(q("select env, count(*) from recorded_keys group by env")) == sorted(
            (fp, N) for fp in envs.values())

        # the victim holds a claim and is inside the key: kill it there
        key = _wait_for("the victim to stall inside a key", lambda: stall.exists() and stall.read_text(), 120)
        victim.send_signal(signal.SIGKILL)
        assert victim.wait(timeout=30) == -signal.SIGKILL
        killed_at = time.time()
        [(state, holder, expires)] = q("select state, holder, expires from claims where key = :k and env = :e",
                                     k=key, e=envs["A"])
        assert state == "claimed" and f":{victim.pid}:" in holder and expires > killed_at - 0.5

        _wait_for("every key of both classes done", lambda: q("select count(*) from claims where state = "
                                                               "'done'")[0][0] == 2 * N, 150)
        for t in tuners[1:]:  # the survivors are watching for more: SIGTERM stops them cleanly
            t.send_signal(signal.SIGTERM)
        for t in tuners[1:]:
            assert t.wait(timeout=60) == 0, t.log.read_text()[-3000:]
    finally:
        for t in tuners:
            if t.poll() is None:
                t.kill()

    logs = {t.pid: t.log.read_text() for t in tuners}
    # each key tuned exactly once per environment: the survivors' own tallies add up to the keys, no more
    tallies = [int(m) for text in logs.values() for m in re.findall(r"tuned (\d+) key\(s\) on cpu", text)]
    assert len(tallies) == 5 and sum(tallies) == 2 * N, tallies
    assert q("select count(*), count(distinct key || ' ' || env) from solutions") == [(2 * N, 2 * N)]
    assert sorted(q("select env, count(*) from solutions group by env")) == sorted((fp, N) for fp in envs.values())
    assert q("select count(distinct key || ' ' || env) from measurements")[0][0] == 2 * N
    assert q("select state, count(*) from claims group by state") == [("done", 2 * N)]
    # the dead host's key went to a live host of its class, on a second claim taken after its lease ran out
    [(holder, attempts)] = q("select holder, attempts from claims where key = :k and env = :e", k=key, e=envs["A"])
    assert attempts == 2 and f":{victim.pid}:" not in holder, holder
    taker = int(holder.split(":")[-2])  # host:pid:token
    assert taker in [t.pid for t in tuners[1:]] and envs["A"] in logs[taker]
    assert f"(claimed by {holder})" in logs[taker]
    assert q("select count(*) from claims where attempts <> 1") == [(1,)]
    # each host tuned only its own class's keys
    for t in tuners[1:]:
        mine = envs["A"] if t in tuners[0::2] else envs["B"]
        assert f"under {mine}" in logs[t.pid], logs[t.pid][-2000:]
        assert q("select count(*) from claims where env <> :e and holder like :h", e=mine, h=f"%:{t.pid}") == [(0,)]

    # counters: production's first dispatches were misses; a serving process now loads every tuned solution
    def counted(env):
        return q(f"select sum(hits), sum(misses), sum(fallbacks), sum(loads) from counters where env = '{env}'")[0]

    assert [counted(fp) for fp in envs.values()] == [(0, N, 0, 0)] * 2
    servers = [_start(tmp_path, f"serve-{c}", "serve", db, c) for c in "AB"]
    for s in servers:
        assert s.wait(timeout=120) == 0, s.log.read_text()
    assert [counted(fp) for fp in envs.values()] == [(0, N, 0, N)] * 2
    assert SqlStore(db).integrity_check() == []
