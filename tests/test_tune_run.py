"""``arbiter tune`` as values (issue 27 item 5): the options checked once into a ``TuneRun``, ``plan`` listing the
keys (each once; those measured here skipped unless --force), and the run chosen from the two."""
from __future__ import annotations

import pytest
import typer

from arbiter import dispatch
from arbiter import env as envmod
from arbiter.cli.output import Steps
from arbiter.cli.tune_run import TuneRun, parse_devices, plan
from arbiter.store import MeasurementRecord, MemoryStore
from arbiter.suite import Problem


class _Out:
    def __init__(self):
        from arbiter.cli.common import console

        self.console, self.steps = console(), Steps()


def test_a_run_refuses_contradicting_options_by_name():
    with pytest.raises(typer.BadParameter, match="--workers/--devices") as exc:
        TuneRun(from_recorded=True, watch=True, workers=2)
    assert exc.value.param_hint == "--watch"
    with pytest.raises(typer.BadParameter, match="--from-recorded"):
        TuneRun(watch=True)
    with pytest.raises(typer.BadParameter, match="0,1,2") as exc:
        parse_devices("0,x")
    assert exc.value.param_hint == "--devices"
    assert TuneRun(devices=parse_devices("0, 1")).parallel and not TuneRun().parallel


def test_the_plan_lists_each_key_once_and_skips_those_measured_here():
    st = MemoryStore()
    dispatch.configure(store=st)
    try:
        small, same_bucket, other = (Problem("rmsnorm", {"rows": r, "cols": 64}) for r in (8, 7, 64))
        measured = Problem("rmsnorm", {"rows": 256, "cols": 64})
        env = envmod.environment("cpu")
        st.save_measurements(measured.key("cpu").id, env.fingerprint, [
            MeasurementRecord("numpy_rmsnorm", {}, "device", 1e-5, 1e-5, 1e-5, 0.0, 10, 0.0)])
        run = TuneRun(problems=(small, same_bucket, other, measured))
        planned = plan(run, _Out())
        assert [item.problem for item in planned.todo] == [small, other]  # 7 rows fall in 8's bucket
        assert [item.seed for item in planned.todo] == [0, 2]  # the seed is the problem's place in the run
        assert [p for p, _ in planned.skipped] == [measured]
        assert [item.problem for item in plan(TuneRun(problems=run.problems, force=True), _Out()).todo] == \
            [small, other, measured]
        with pytest.raises(typer.BadParameter, match="nothing to tune"):
            plan(TuneRun(), _Out())
    finally:
        dispatch.configure(store=MemoryStore())
