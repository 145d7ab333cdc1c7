"""Fleet processes for tests/store/test_fleet.py (run as ``python _fleet.py MODE DB CLASS``).

TEST-ONLY HOOK: ``CLASS`` poses this process as a host of an environment class. Its environment key is this
machine's own with one more field, ``test_class``, so it gets a fingerprint of its own; nothing in the
``arbiter`` package reads it. Real hosts of different hardware differ in their real fields (device, driver,
library versions) instead.

* ``record DB CLASS [N]``: a production process under the ``record`` miss policy dispatching the ``KEYS`` rmsnorm
  shapes (the first N) once each (each key recorded under its environment, served by its tier default meanwhile);
* ``tune DB CLASS [ARGS...]``: ``arbiter --db DB tune ARGS`` in this process (the real CLI, claims and all);
  with ``FLEET_TEST_STALL=FILE`` its first key stalls inside the tuning (after the claim, its lease renewed by
  the heartbeat) and the key's id is written to FILE, for the test to SIGKILL it there;
* ``serve DB CLASS [N]``: a production process (policy ``tier``) dispatching every key (the first N) once, and
  printing how many verdicts it computed. ``DB`` ``-``: the default registry (``ARBITER_DB`` over
  ``ARBITER_SYSTEM_DB``).
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

ROWS = (1, 2, 4, 8, 16, 32)
COLS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
KEYS = [(r, c) for r in ROWS for c in COLS]  # 60 keys, each its own bucket


def pose_as(env_class: str) -> str:
    """The test hook: this process's cpu environment key gets ``test_class`` (a fingerprint per class)."""
    from arbiter import env as envmod

    real = envmod.environment("cpu")
    posed = envmod.EnvironmentKey.from_fields("cpu", {**real.as_dict(), "test_class": env_class})
    return envmod.adopt("cpu", posed.fingerprint, posed.as_dict()).fingerprint


def dispatch_all(db: str, policy: str, n: int = len(KEYS)) -> None:
    import arbiter
    from arbiter import dispatch
    from arbiter.regions import RMSNorm
    from arbiter.store.sql import SqlStore

    arbiter.configure(store=None if db == "-" else SqlStore(db), policy=policy)
    rng = np.random.default_rng(0)
    for rows, cols in KEYS[:n]:
        x = rng.standard_normal((rows, cols)).astype(np.float32)
        arbiter.run_arbitrated("rmsnorm", RMSNorm(x, np.ones(cols, np.float32)))
    print(f"verified {dispatch.verified_count()}", flush=True)


def tune(db: str, args: list[str]) -> None:
    stall = os.environ.get("FLEET_TEST_STALL")
    if stall:
        import arbiter.cli.tune_run as cli_tune

        real = cli_tune.decide  # the way arbiter tune decides each key (decide.decide with a tune request)

        def stalled(region, *a, **kw):
            with open(stall, "w") as f:
                f.write(region.key.id)
            time.sleep(600)  # SIGKILLed here, holding the claim
            return real(region, *a, **kw)

        cli_tune.decide = stalled
    from arbiter.cli import app

    app(["--db", db, "tune", *args], prog_name="arbiter")


if __name__ == "__main__":
    mode, db, env_class, *rest = sys.argv[1:]
    print(f"{mode} as {pose_as(env_class)}", flush=True)
    if mode == "record":
        dispatch_all(db, "record", *map(int, rest))
    elif mode == "serve":
        dispatch_all(db, "tier", *map(int, rest))
    else:
        tune(db, rest)
