"""tune --workers: keys spread over worker processes, one registry, nothing lost, dead workers retried."""
import os

from arbiter.parallel import tune_parallel
from arbiter.store.sql import SqlStore
from arbiter.suite import mm, rows

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


def test_a_worker_that_dies_loses_only_its_key_which_is_retried(tmp_path, monkeypatch):
    monkeypatch.setenv("ARBITER_PLUGINS", "dying_plugin")  # workers are fresh processes: load it there
    monkeypatch.setenv("ARBITER_TEST_MARKER", str(tmp_path / "died"))
    # the worker itself must die (as one the kernel's OOM killer ends would): a plug-in's gate, isolated by
    # default, would die in its own child instead (tests/test_plugin_isolation.py)
    monkeypatch.setenv("ARBITER_ISOLATE_PLUGINS", "0")
    outcome = tune_parallel(PROBLEMS, "cpu", workers=2, budget_s=0.2)
    assert outcome.retried == ["rmsnorm 8x100 float32"]
    assert set(outcome.tuned) == {p.label for p in PROBLEMS} and not outcome.lost
    assert (tmp_path / "died").exists()



def test_a_worker_that_cannot_start_raises_workers_died():
    import pytest

    from arbiter.errors import WorkersDied

    with pytest.raises(WorkersDied, match="could not start"):
        tune_parallel(PROBLEMS[:1], "no_such_target", workers=1, budget_s=0.1)


def test_tune_workers_that_die_end_with_one_line_and_exit_1(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import arbiter.parallel
    from arbiter.cli import app
    from arbiter.errors import WorkersDied

    def dying(*args, **kwargs):
        raise WorkersDied("workers keep dying (6 started); run `arbiter tune` without --workers to see why")

    monkeypatch.setattr(arbiter.parallel, "tune_parallel", dying)
    done = CliRunner().invoke(app, ["--db", str(tmp_path / "registry.db"), "tune", "--op", "rmsnorm",
                                    "--shape", "8x100", "--workers", "2"])
    assert done.exit_code == 1, done.output
    assert "error: workers keep dying" in " ".join(done.output.split()) and "Traceback" not in done.output
