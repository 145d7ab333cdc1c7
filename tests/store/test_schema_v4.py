"""Schema v4: ``counters.loads`` (a stored solution installed by a process, apart from misses); a v3 registry
is upgraded with every counter kept (issue 16 item 7)."""
from arbiter.store import CountDelta
from arbiter.store.models import SCHEMA_VERSION
from arbiter.store.sql import SqlStore
from tests.store._workers import ENV, key


def test_a_v3_registry_is_upgraded_to_v4_keeping_every_counter(backend):
    db = backend.new()
    st = SqlStore(db)
    st.add_counts([CountDelta(key(1), "lab_kernel", "{}", ENV, hits=7, misses=2, fallbacks=1)])
    st.close()
    # v3 is v4 without counters.loads and verdicts.origin (and v5's claims): take them away and say v3, as a
    # v3 kernel-arbiter left the file
    backend.script(db, "DROP TABLE claims; ALTER TABLE counters DROP COLUMN loads; "
                       "ALTER TABLE verdicts DROP COLUMN origin; UPDATE schema_version SET version = 3")
    assert backend.query(db, "select version from schema_version") == [(3,)]

    again = SqlStore(db)  # opening upgrades, in one transaction
    assert again.version() == SCHEMA_VERSION  # through v4 (and v5: claims, tests/store/test_fleet_cli.py)
    assert [(c.hits, c.misses, c.fallbacks, c.loads) for c in again.counts()] == [(7, 2, 1, 0)]
    again.add_counts([CountDelta(key(1), "lab_kernel", "{}", ENV, hits=1, loads=3),
                      CountDelta(key(2), "lab_kernel", "{}", ENV, loads=1)])
    assert sorted((c.key, c.hits, c.misses, c.fallbacks, c.loads) for c in SqlStore(db).counts()) == \
        [(key(1), 8, 2, 1, 3), (key(2), 0, 0, 0, 1)]
    assert SqlStore(db).integrity_check() == []
