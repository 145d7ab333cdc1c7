"""Op kinds as plug-ins: a ``cumsum`` op defined here, outside the package, gets every rule unchanged:
region keys, the F4 gate against its own oracle, selection, dispatch counters, and persistence."""
import numpy as np
import pytest

import arbiter
from arbiter import RegionError, Tier
from arbiter import env as envmod
from arbiter.keys import layout_class
from arbiter.ops import OPS
from arbiter.regions import Region, dtype_name, random_operand


class CumSum(Region):
    """``out = cumsum(x, axis=-1)`` for 2-D ``x``."""

    op = "cumsum"
    DIMS = ("rows", "cols")
    __slots__ = ("x",)

    def __init__(self, x, *, out=None):
        self.target, self.x, self.back = self.adopt("x", x)
        self.dtype = dtype_name(self.x.dtype)
        if self.x.ndim != 2:
            raise RegionError("x", f"must be 2-D [rows, cols], got shape {tuple(self.x.shape)}")
        self.check_out(out, self.x.shape)
        self.complete(layout_class(self.x), {"rows": self.x.shape[0], "cols": self.x.shape[1]}, ())

    def operands(self):
        return {"x": self.x}

    def output_shape(self):
        return tuple(self.x.shape)

    @classmethod
    def random(cls, target, dtype, dims, attrs=None, layout="R", rng=None):
        rng = rng if rng is not None else np.random.default_rng(0)
        return cls(random_operand(target, (dims["rows"], dims["cols"]), dtype, layout, rng))

    def resized(self, dims, rng):
        return self.random(self.target, self.dtype, dims, None, self.layout, rng)


def cumsum_oracle(region):
    return np.cumsum(np.asarray(region.x, dtype=np.float64), axis=-1)


def numpy_cumsum(region):
    out = region.alloc_out()
    np.cumsum(region.x, axis=-1, out=out)
    return out


def exclusive_scan(region):  # a classic scan bug: the exclusive prefix sum (x[0] dropped, shifted right)
    out = region.alloc_out()
    out[:, 0] = 0
    np.cumsum(region.x[:, :-1], axis=-1, out=out[:, 1:])
    return out


@pytest.fixture
def cumsum_op():
    arbiter.register_op("cumsum", CumSum, cumsum_oracle)
    # The buggy scan is preferred by tier: only the gate keeps it from winning.
    arbiter.candidate(op="cumsum", tier=Tier.HAND_TUNED, priority=10, name="exclusive_scan")(exclusive_scan)
    arbiter.candidate(op="cumsum", tier=Tier.EMITTED, name="numpy_cumsum")(numpy_cumsum)
    yield
    arbiter.unregister("exclusive_scan", "cpu", "cumsum")
    arbiter.unregister("numpy_cumsum", "cpu", "cumsum")
    OPS.pop("cumsum")


def test_register_op_checks_the_region_type():
    with pytest.raises(ValueError, match="region_type: CumSum.op is 'cumsum', expected 'scan'"):
        arbiter.register_op("scan", CumSum, cumsum_oracle)


def test_gate_selection_and_counters_apply_unchanged(cumsum_op):
    region = CumSum.random("cpu", "float32", {"rows": 7, "cols": 300})
    assert region.key.id == "cpu:cumsum:float32:R:-:rows8,cols512"
    decision = arbiter.arbitrate("cumsum", region)
    rows = {r.candidate.name: r for r in decision.rows}
    assert rows["exclusive_scan"].status == "failed" and "elementwise budget" in rows["exclusive_scan"].reason
    assert decision.winner.candidate.name == "numpy_cumsum"
    arbiter.run_arbitrated("cumsum", region)
    out = arbiter.run_arbitrated("cumsum", CumSum.random("cpu", "float32", {"rows": 5, "cols": 400}))
    assert out.shape == (5, 400)
    [row] = [s for s in arbiter.stats() if s["op"] == "cumsum"]
    assert (row["solution"], row["hits"]) == ("numpy_cumsum", 2)
    with pytest.raises(RegionError, match="^x: must be 2-D"):
        CumSum(np.ones(3, np.float32))


def test_the_winner_persists_in_the_sql_registry(cumsum_op, tmp_path):
    from arbiter.store.sql import SqlStore

    path = str(tmp_path / "plugin.db")
    arbiter.configure(store=SqlStore(path))
    region = CumSum.random("cpu", "float64", {"rows": 3, "cols": 33})
    arbiter.run_arbitrated("cumsum", region)
    arbiter.flush()
    reopened = SqlStore(path)
    stored = reopened.load_solution(region.key.id, envmod.environment("cpu").fingerprint)
    reopened.close()
    assert stored is not None and stored.candidate_name == "numpy_cumsum"
