"""tune --workers: keys spread over worker processes, one registry, nothing lost, dead workers retried."""
import os

import numpy as np

from arbiter import Candidate, Tier
from arbiter.parallel import tune_parallel
from arbiter.store.sql import SqlStore
from arbiter.suite import mm, rows


class DiesOnce(Candidate):
    """Kills its worker process the first time it runs anywhere (a marker file remembers)."""

    name, target, op, tier = "dies_once", "cpu", "rmsnorm", Tier.EMITTED
    marker = None

    def run(self, region, params):
        if not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(3)
        out = region.alloc_out()
        x = region.x
        np.multiply(x / np.sqrt((x * x).mean(-1, keepdims=True) + region.eps), region.weight, out=out)
        return out


PROBLEMS = [mm(16, 16, 16), mm(33, 17, 9), mm(1, 64, 64), rows("softmax", 8, 100), rows("softmax", 9, 300),
            rows("rmsnorm", 8, 100)]


def test_two_workers_tune_every_key_once_into_one_registry(tmp_path):
    outcome = tune_parallel(PROBLEMS, "cpu", workers=2, budget_s=0.2)
    assert not outcome.failed and not outcome.lost
    assert set(outcome.tuned) == {p.label for p in PROBLEMS}
    assert len(outcome.workers) >= 2 and len(set(outcome.workers.values())) == 1  # one CPU environment
    store = SqlStore(os.environ["ARBITER_DB"])
    keys = {info["key"] for info in outcome.tuned.values()}
    assert {s.key for s in store.solutions()} == keys  # one solution per key, none lost, none doubled
    assert all(store.load_measurements(k, outcome.workers[0]) for k in keys)
    store.close()


def test_a_worker_that_dies_loses_only_its_key_which_is_retried(tmp_path, only_candidates):
    DiesOnce.marker = str(tmp_path / "died")
    from arbiter.candidates.cpu.numpy_rmsnorm import NumpyRMSNorm

    only_candidates("cpu", "rmsnorm", NumpyRMSNorm(), DiesOnce())
    outcome = tune_parallel(PROBLEMS, "cpu", workers=2, budget_s=0.2)
    assert outcome.retried == ["rmsnorm 8x100 float32"]
    assert set(outcome.tuned) == {p.label for p in PROBLEMS} and not outcome.lost
