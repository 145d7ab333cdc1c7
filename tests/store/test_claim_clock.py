"""A holder whose clock stepped ahead (issue 40 item 8). Before: a tuner whose clock jumped +1 h claimed a key
(``expires`` = its now + the lease, an hour in everyone else's future) and died; the key was blocked for that
hour ("lease ends in 3510 s") and nothing capped an expiry far beyond any lease. Now a claim written more than
``CLOCK_SLACK_S`` in the reader's future has its expiry capped at the reader's now plus the holder's own lease
(``expires - updated``): a dead holder's key is claimable one lease later, a live one keeps it by renewing, and
an expiry past ``MAX_LEASE_S`` is treated as expired. Real holder processes (their clock moved by an hour), on
SQLite and PostgreSQL (docs/reliability.md, "Signals and locks")."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from arbiter.store.claims import CLOCK_SLACK_S, MAX_LEASE_S, Claims, counts, pending
from arbiter.store.sql import SqlStore
from tests.store._workers import ENV, key

ROOT = Path(__file__).resolve().parents[2]

# A holder process whose clock is an hour ahead: time.time() and the claim's ``updated`` stamp both moved, as a
# clock step moves them. It claims key(1) for LEASE seconds, holds it for HOLD seconds (its heartbeat renewing,
# with its clock) and dies without giving it back.
HOLDER = """
import datetime, os, sys, time
real = time.time
time.time = lambda: real() + 3600.0
from arbiter.store import claims
claims.utcnow = lambda: datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
from arbiter.store.sql import SqlStore
from tests.store._workers import ENV, key
db, lease, hold = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
c = claims.Claims(SqlStore(db), holder="ahead:1:dead", lease_s=lease)
c.offer([key(1)], ENV)
assert c.claim(ENV) == key(1)
if hold:
    with c.lease(key(1), ENV):
        print("holding", flush=True)
        time.sleep(hold)
print("dying", flush=True)
os._exit(0)
"""


def _holder(db: str, lease: float, hold: float = 0.0) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-c", HOLDER, db, str(lease), str(hold)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_dead_holder_whose_clock_was_an_hour_ahead_blocks_its_key_one_lease_not_an_hour(backend):
    db = backend.new()
    holder = _holder(db, 2.0)
    out, err = holder.communicate(timeout=120)
    assert holder.returncode == 0 and "dying" in out, err
    stored = backend.query(db, "SELECT expires FROM claims")[0][0]
    assert stored > time.time() + 3500  # the stored expiry is an hour ahead of this clock
    reader = Claims(SqlStore(db), holder="reader", lease_s=60)
    [(k, who, ends)] = reader.held(ENV)
    assert (k, who) == (key(1), "ahead:1:dead")
    assert ends - time.time() <= 2.0 + 1.0  # before: 3600 s ("lease ends in 3510 s")
    [row] = pending_like(db)
    assert row <= 2.0 + 1.0
    assert reader.claim(ENV) is None  # capped, not yet expired: the holder might be alive and renewing
    assert backend.query(db, "SELECT expires FROM claims")[0][0] <= time.time() + 2.0 + 1.0  # the cap is stored
    time.sleep(2.5)
    assert reader.claim(ENV) == key(1)  # before: None for an hour


def pending_like(db: str) -> list[float]:
    """Seconds until each claimed key's lease ends, as ``pending`` (``stats --pending``) reads them."""
    from sqlalchemy import text

    st = SqlStore(db)
    with st.engine.begin() as conn:  # pending lists recorded keys: record the claimed one
        conn.execute(text("INSERT INTO recorded_keys (key, env, dims, created) VALUES (:k, :e, '{}', "
                          "CURRENT_TIMESTAMP)"), {"k": key(1), "e": ENV})
    now = time.time()
    return [r["expires"] - now for r in pending(st) if r["state"] == "claimed"]


def test_a_live_holder_whose_clock_is_ahead_keeps_its_key_while_it_renews(backend):
    """The cap is the holder's own lease from the reader's now: a holder that is alive renews before it lapses
    and is not robbed of its key; once it dies the key is claimable a lease later."""
    db = backend.new()
    holder = _holder(db, 1.5, hold=5.0)
    assert holder.stdout.readline().strip() == "holding", holder.stderr.read()
    reader = Claims(SqlStore(db), holder="reader", lease_s=60)
    started = time.monotonic()
    while holder.poll() is None and time.monotonic() - started < 3.5:
        assert reader.claim(ENV) is None  # renewed every 0.5 s: never lapses by the capped expiry
        time.sleep(0.2)
    holder.communicate(timeout=60)
    deadline = time.monotonic() + 1.5 + CLOCK_SLACK_S
    while reader.claim(ENV) is None:
        assert time.monotonic() < deadline, "the dead holder's key was not claimable a lease after its end"
        time.sleep(0.2)
    assert counts(SqlStore(db), ENV) == {"claimed": 1}


def test_an_expiry_past_the_longest_lease_is_treated_as_expired(backend):
    """A claim whose ``expires`` is further ahead than any lease (``MAX_LEASE_S``), with an ``updated`` that does
    not give it away (written so by hand, or by a holder whose clock was a year ahead when it also wrote
    ``updated`` long ago): claimable at once."""
    db = backend.new()
    owner = Claims(SqlStore(db), holder="gone:1:dead", lease_s=60)
    owner.offer([key(2)], ENV)
    assert owner.claim(ENV) == key(2)
    backend.script(db, f"UPDATE claims SET expires = {time.time() + MAX_LEASE_S * 10:.0f}")
    assert Claims(SqlStore(db), holder="reader").held(ENV) == []
    assert Claims(SqlStore(db), holder="reader").claim(ENV) == key(2)
