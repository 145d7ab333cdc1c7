"""Claim rules (issue 18 item 1), in one process on SQLite and PostgreSQL: one holder a key, leases that run
out, a late holder's result refused with its transaction, and a done claim reopened only when its key lost its
measurements. The processes of a fleet: tests/store/test_fleet.py."""
from __future__ import annotations

import threading
import time

import pytest

from arbiter.store import MeasurementRecord, SolutionRecord
from arbiter.store.claims import Claims, LostClaim, counts
from arbiter.store.sql import SqlStore
from tests.store._workers import ENV, key


def _tuned(st, k):
    """What tune_region commits for a key: measurements and the solution (here without gating anything)."""
    st.save_measurements(k, ENV, [MeasurementRecord("lab_kernel", {}, "device", 1e-5, 1e-5, 1e-5, 0.01, 10, 0.0)])
    st.save_solution(SolutionRecord(k, "lab_kernel", "lab_kernel@1", {}, "measured", ENV, 0.2))


def test_each_key_goes_to_one_holder_and_a_lapsed_lease_to_the_next(backend):
    db = backend.new()
    a, b = SqlStore(db), SqlStore(db)
    ca, cb = Claims(a, holder="host-a", lease_s=0.5), Claims(b, holder="host-b", lease_s=30)
    ca.offer([key(1), key(2)], ENV)
    cb.offer([key(2), key(3)], ENV)  # offering twice is harmless
    got = [ca.claim(ENV), cb.claim(ENV), cb.claim(ENV)]
    assert sorted(got) == [key(1), key(2), key(3)] and cb.claim(ENV) is None
    assert counts(a) == {"claimed": 3}

    time.sleep(0.7)  # host-a's lease on key(1) runs out without renewal: host-b takes it over
    assert cb.claim(ENV) == got[0] and cb.claim(ENV) is None
    # host-a wakes up late: its result and its done mark commit nothing
    with pytest.raises(LostClaim, match="no longer held by host-a"), a.transaction():
            _tuned(a, got[0])
            ca.finish(got[0], ENV)
    assert a.load_measurements(got[0], ENV) == [] and backend.query(db, "select count(*) from solutions") == [(0,)]
    for k in (got[0], got[1], got[2]):
        with b.transaction():
            _tuned(b, k)
            cb.finish(k, ENV)
    assert counts(a) == {"done": 3}
    assert Claims(a).claim(ENV) is None


def test_a_lease_renewed_by_its_heartbeat_outlives_its_length(backend):
    db = backend.new()
    st = SqlStore(db)
    mine, other = Claims(st, holder="busy", lease_s=0.6), Claims(SqlStore(db), holder="idle", lease_s=0.6)
    mine.offer([key(1)], ENV)
    assert mine.claim(ENV) == key(1)
    with mine.lease(key(1), ENV) as lease:
        time.sleep(1.5)  # 2.5 leases long
        assert other.claim(ENV) is None and not lease.lost.is_set()
    mine.release(key(1), ENV)  # given back unfinished: open at once
    assert other.claim(ENV) == key(1)


def test_concurrent_claimers_never_share_a_key(backend):
    db = backend.new()
    Claims(SqlStore(db)).offer([key(i) for i in range(60)], ENV)
    taken: list[list[str]] = [[] for _ in range(4)]

    def work(i):
        c = Claims(SqlStore(db), holder=f"t{i}", lease_s=30)
        while (k := c.claim(ENV)) is not None:
            taken[i].append(k)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [k for t in taken for k in t]
    assert sorted(every) == sorted(key(i) for i in range(60))  # each key once, none lost


def test_a_done_key_whose_measurements_are_gone_is_offered_again_and_force_reopens(backend):
    db = backend.new()
    st = SqlStore(db)
    c = Claims(st, holder="h")
    c.offer([key(1), key(2)], ENV)
    for _ in range(2):
        k = c.claim(ENV)
        with st.transaction():
            _tuned(st, k)
            c.finish(k, ENV)
    c.offer([key(1), key(2)], ENV)
    assert c.claim(ENV) is None  # done and measured: nothing to do
    backend.script(db, "DELETE FROM measurements WHERE id = (SELECT min(id) FROM measurements)")  # key(1)'s
    c.offer([key(1), key(2)], ENV)
    assert c.claim(ENV) == key(1) and c.claim(ENV) is None
    c.offer([key(2)], ENV, reopen=True)  # tune --force
    assert c.claim(ENV) == key(2)


def test_prune_deletes_the_claims_of_the_pruned_environments(backend):
    """A pruned environment's pending claims are not handed to tuners afterwards."""
    st = SqlStore(backend.new())
    claims = Claims(st, holder="host-a")
    claims.offer([key(1), key(2)], ENV)
    claims.offer([key(3)], "other-env")
    assert claims.claim(ENV) is not None
    removed = st.prune([ENV])
    assert removed["claims"] == 2
    assert counts(st, ENV) == {} and counts(st, "other-env") == {"open": 1}
    assert claims.claim(ENV) is None
