"""Adding an op kind is one folder and one registration line (issue 27 item 1): here the folder is this file.

``rowsum`` (``out[i] = sum_j x[i, j]``) brings its region, oracle, a probe family of its own, a quick-suite shape
and a work model as one ``OpKind``; one ``register_op_kind`` line makes it an op like the built-ins. It is then
gated (a candidate wrong only on the op's own family is rejected, naming it), tuned, served through
``run_arbitrated`` and shown by the report and the stats, with no file of the arbiter touched."""
import numpy as np
import pytest

import arbiter
from arbiter import Tier, dispatch, probes
from arbiter.keys import layout_class
from arbiter.ops import OpKind, TorchOp, op_kind, register_op_kind, unregister_op
from arbiter.ops.family import Family, host_rows, write_x
from arbiter.regions import Region, dtype_name, random_operand


# --- the op kind: what would be arbiter/ops/rowsum/ ----------------------------------------------------------
class RowSum(Region):
    """``out[i] = sum_j x[i, j]`` for 2-D ``x``."""

    op = "rowsum"
    DIMS = ("rows", "cols")
    __slots__ = ("x",)

    def __init__(self, x, *, out=None):
        self.target, self.x, self.back = self.adopt("x", x)
        self.dtype = dtype_name(self.x.dtype)
        if self.x.ndim != 2:
            raise arbiter.RegionError("x", f"must be 2-D [rows, cols], got shape {tuple(self.x.shape)}")
        self.check_out(out, (self.x.shape[0],))
        self.complete(layout_class(self.x), {"rows": self.x.shape[0], "cols": self.x.shape[1]}, ())

    def operands(self):
        return {"x": self.x}

    def output_shape(self):
        return (self.x.shape[0],)

    @classmethod
    def random(cls, target, dtype, dims, attrs=None, layout="R", rng=None):
        rng = rng if rng is not None else np.random.default_rng(0)
        return cls(random_operand(target, (dims["rows"], dims["cols"]), dtype, layout, rng))

    def resized(self, dims, rng):
        return self.random(self.target, self.dtype, dims, None, self.layout, rng)


def rowsum_oracle(region):
    return np.asarray(region.x, dtype=np.float64).sum(axis=-1)


def _nan_rows(region, rng):
    """A NaN in every other row: the sum of a row holding NaN is NaN."""
    host, rows = host_rows(region)
    rows[::2, rng.integers(0, rows.shape[1])] = np.nan
    write_x(region, host)


ROWSUM = OpKind(
    "rowsum", RowSum, rowsum_oracle,
    families=(Family("nan_rows", ("rowsum",), "a NaN in every other row (the row's sum is NaN)", _nan_rows),),
    suite=(({"rows": 16, "cols": 200}, "float32", {}),),
    work=lambda dims, dtype: (4.0 * dims["rows"] * dims["cols"], "B") if {"rows", "cols"} <= dims.keys() else None,
    work_text="bytes of x read",
    # torch.ops.arbiter.rowsum: its schema, its region from the op's arguments, its output's shape (the fake kernel)
    torch_op=TorchOp("(Tensor x) -> Tensor", RowSum, lambda x: (x.shape[0],)),
    # its row of docs/budgets.md's special-values table (NaN / Inf inputs, masked entries, other)
    special_values=("a NaN or Inf in a row makes its sum NaN or that infinity", "-", "-"),
)


# --- candidates, as a plug-in would register them ------------------------------------------------------------
def nansum_rowsum(region):  # wrong on the op's own family only: it drops NaN, so benign data passes
    out = region.alloc_out()
    np.nansum(region.x, axis=-1, out=out)
    return out


def numpy_rowsum(region):
    out = region.alloc_out()
    np.sum(region.x, axis=-1, out=out)
    return out


def einsum_rowsum(region):
    return np.einsum("ij->i", region.x, out=region.alloc_out())


@pytest.fixture
def rowsum_op():
    register_op_kind(ROWSUM)  # the registration line
    arbiter.candidate(op="rowsum", tier=Tier.HAND_TUNED, priority=10, name="nansum_rowsum")(nansum_rowsum)
    arbiter.candidate(op="rowsum", tier=Tier.EMITTED, name="numpy_rowsum")(numpy_rowsum)
    arbiter.candidate(op="rowsum", tier=Tier.EMITTED, name="einsum_rowsum")(einsum_rowsum)
    yield
    for name in ("nansum_rowsum", "numpy_rowsum", "einsum_rowsum"):
        arbiter.unregister(name, "cpu", "rowsum")
    unregister_op("rowsum")


def test_a_new_op_kind_is_gated_tuned_served_and_reported(rowsum_op, tmp_path):
    from arbiter.report import collect, render, work
    from arbiter.store.sql import SqlStore
    from arbiter.suite import Problem
    from arbiter.tune import tune_region

    assert op_kind("rowsum") is ROWSUM and [f.name for f in probes.families("rowsum")] == ["benign", "nan_rows"]
    [(dims, dtype, attrs)] = ROWSUM.suite
    region = Problem("rowsum", dims, dtype, attrs).region()
    assert region.key.id == "cpu:rowsum:float32:R:-:rows16,cols256"

    # gated: the NaN-dropping candidate passes benign data and fails the op's own family
    decision = arbiter.arbitrate("rowsum", region)
    rows = {r.candidate.name: r for r in decision.rows}
    assert rows["nansum_rowsum"].status == "failed" and "nan_rows" in rows["nansum_rowsum"].reason
    assert decision.winner.candidate.name in ("numpy_rowsum", "einsum_rowsum")

    # tuned: both correct candidates timed, the winner stored
    sql = SqlStore(str(tmp_path / "rowsum.db"))
    dispatch.configure(store=sql)
    tuned = tune_region(region, sql, budget_s=0.1)
    assert tuned.winner.candidate.name in ("numpy_rowsum", "einsum_rowsum")
    assert {r.candidate.name for r in tuned.rows if r.timing is not None} == {"numpy_rowsum", "einsum_rowsum"}, \
        [(r.candidate.name, r.status, r.reason) for r in tuned.rows]

    # served
    for _ in range(2):
        out = arbiter.run_arbitrated("rowsum", Problem("rowsum", dims, dtype).region(seed=1))
    np.testing.assert_allclose(out, Problem("rowsum", dims, dtype).region(seed=1).x.sum(axis=1), rtol=1e-5)
    [row] = [s for s in arbiter.stats() if s["op"] == "rowsum"]
    assert row["solution"] == tuned.winner.candidate.name and row["hits"] >= 1
    arbiter.flush()

    # reported: its section, the rejection in the gate's words, its work model
    report = collect([("user", SqlStore(str(tmp_path / "rowsum.db"), readonly=True))])
    [section] = report.sections
    assert (section.target, section.op, section.dtype) == ("cpu", "rowsum", "float32")
    [key] = section.keys
    assert key.winner == tuned.winner.candidate.name and [r.solution.label for r in key.rejected] == ["nansum_rowsum"]
    assert "cpu · rowsum · float32" in render(report)
    assert work("rowsum", dims, dtype) == (4.0 * 16 * 200, "B")


def test_a_new_op_kind_is_a_torch_op_eager_and_compiled(rowsum_op):
    """Issue 41 item 1: the kind's ``TorchOp`` makes ``torch.ops.arbiter.rowsum`` (and ``arbiter.torch.OPS``),
    whether the kind is registered before or after ``import arbiter.torch``; the wrong candidate never serves it."""
    torch = pytest.importorskip("torch")
    import arbiter.torch as at

    x = torch.randn(16, 200)
    want = x.double().sum(1).float()
    for call in (torch.ops.arbiter.rowsum, at.OPS["rowsum"]):
        torch.testing.assert_close(call(x), want, rtol=1e-5, atol=1e-4)
    x[0, 3] = float("nan")  # the NaN-dropping candidate would return a number here
    assert torch.isnan(torch.ops.arbiter.rowsum(x)[0])
    torch.library.opcheck(torch.ops.arbiter.rowsum.default, (torch.randn(5, 7),),
                          test_utils=("test_schema", "test_faketensor"))
    compiled = torch.compile(lambda t: torch.ops.arbiter.rowsum(t) * 2.0, fullgraph=True, backend="aot_eager")
    y = torch.randn(9, 33)
    torch.testing.assert_close(compiled(y), 2.0 * y.double().sum(1).float(), rtol=1e-5, atol=1e-4)
    served = {s["solution"] for s in arbiter.stats() if s["op"] == "rowsum" and s["installed"]}
    assert served and "nansum_rowsum" not in served, served


def test_an_unregistered_op_kind_leaves_the_catalogue_as_published(rowsum_op):
    row = "| rowsum | a NaN or Inf in a row makes its sum NaN or that infinity | - | - |"
    assert "nan_rows" in probes.markdown() and row in probes.markdown()  # its family and its special values
    unregister_op("rowsum")
    assert "nan_rows" not in probes.markdown() and row not in probes.markdown()
    register_op_kind(ROWSUM)  # the fixture unregisters it again


def test_adding_an_op_kind_leaves_every_other_ops_verdicts_valid():
    """Issue 41 item 2: a verdict's identity carries the core's rules and its own op's, so registering a kind
    changes no other candidate's identity (no stored verdict of another op is taken again); and the golden
    verdicts pin the new kind from its suite without a line of ``tests/gate_golden.py`` naming it."""
    import json

    import gate_golden
    from arbiter import gate
    from arbiter.candidates import REGISTRY

    before = {(c.op, c.name): c.identity() for c in REGISTRY.all() if c.target == "cpu"}
    register_op_kind(ROWSUM)
    try:
        arbiter.candidate(op="rowsum", tier=Tier.EMITTED, name="numpy_rowsum")(numpy_rowsum)
        after = {(c.op, c.name): c.identity() for c in REGISTRY.all() if c.target == "cpu" and c.op != "rowsum"}
        assert after == before
        assert gate.gate_version("rowsum").startswith(gate.gate_version() + "/rowsum-1+")  # its oracle digested
        now = gate_golden.current()
        assert now["verdicts"]["numpy_rowsum@rowsum@suite"]["passed"] and "rowsum" in now["oracles"]
        problems = gate_golden.check(json.loads(gate_golden.GOLDEN.read_text()), now)
        assert problems == [f"op kind 'rowsum' is not in tests/gate_golden.json (a new kind is pinned from its "
                            f"suite): regenerate it with `{gate_golden.REGENERATE}`"]
    finally:
        arbiter.unregister("numpy_rowsum", "cpu", "rowsum")
        unregister_op("rowsum")
