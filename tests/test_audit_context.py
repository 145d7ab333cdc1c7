"""The audit sees what the caller keeps and the context it runs in (issue 38 item 7, and item 4 under the audit).

Each wrong candidate here passes the gate (its fault starts after the gate's calls, or at a shape the gate never
probed) and is demoted by the audit on the program's own calls: a real call held to the budget of the family its
data belongs to (not the loosest), a kernel that starts leaving flush-to-zero on, a per-shape pooled output handed
out twice, a shape inside the bucket that the gate did not probe (the first call of every exact shape is sampled).
"""
from __future__ import annotations

import numpy as np
import pytest

import arbiter
from arbiter import audit, dispatch
from arbiter.candidates import REGISTRY
from arbiter.oracles.budgets import budget_for
from arbiter.regions import Attention, LayerNorm, Softmax
from audit_faults import Flushes, OneWidth, Pooled, set_ftz, softmax
from test_gate_context import x86_glibc
from wrong_candidates import LayerNormUnshiftedMean


class StartsFlushingToZero(Flushes):
    name = "starts_flushing_to_zero"


def _builtin():
    return REGISTRY.get("numpy_softmax", "cpu", "softmax")


def _x(cols=64, seed=0):
    return np.random.default_rng(seed).standard_normal((8, cols)).astype(np.float32)


def _served(region):
    route = dispatch.route(region.key)
    return None if route is None else route.label


def _calls_until_demoted(name, make, limit):
    for i in range(1, limit + 1):
        arbiter.run_arbitrated("softmax", make(i))
        assert audit.drain(30)
        if _served(make(i)) != name:
            return i
    return None


@x86_glibc
def test_a_kernel_that_starts_leaving_flush_to_zero_on_is_demoted(only_candidates, caplog):
    wrong = StartsFlushingToZero()
    only_candidates("cpu", "softmax", wrong, _builtin())
    arbiter.configure(audit=1.0)
    try:
        assert _calls_until_demoted("starts_flushing_to_zero", lambda i: Softmax(_x()), 400)
        assert wrong.calls == wrong.after + 1  # demoted on the first call that left it on
        from arbiter import fpenv

        assert not fpenv.state().flush_to_zero  # and the caller's thread was given its environment back
        assert any("floating-point environment changed (flush-to-zero on" in r.getMessage() for r in caplog.records)
    finally:
        set_ftz(False)


def test_a_pooled_output_handed_out_twice_is_demoted(only_candidates, caplog):
    wrong = Pooled()
    only_candidates("cpu", "softmax", wrong, _builtin())
    arbiter.configure(audit=1.0)
    kept = []
    for i in range(1, 400):
        kept.append(arbiter.run_arbitrated("softmax", Softmax(_x(seed=i))))  # the caller keeps every result
        assert audit.drain(30)
        if _served(Softmax(_x())) != "pooled_output":
            break
    assert wrong.calls == wrong.after + 2  # the second pooled call shares the first one's memory
    assert any("pooled buffer" in r.getMessage() for r in caplog.records)
    np.testing.assert_allclose(arbiter.run_arbitrated("softmax", Softmax(_x(seed=1))),
                               softmax(_x(seed=1).astype(np.float64)), rtol=1e-5)


def test_the_first_call_of_a_shape_the_gate_never_probed_is_checked(only_candidates):
    only_candidates("cpu", "softmax", OneWidth(), _builtin())
    arbiter.configure(audit=1e-9)  # practically never by chance: only the first call of each exact shape
    arbiter.run_arbitrated("softmax", Softmax(_x(1000)))
    assert audit.drain(30) and _served(Softmax(_x(1000))) == "wrong_at_one_width"
    for cols in (600, 900, 1000):  # other widths of the bucket: right, kept
        arbiter.run_arbitrated("softmax", Softmax(_x(cols)))
    assert audit.drain(30) and _served(Softmax(_x(1000))) == "wrong_at_one_width"
    arbiter.run_arbitrated("softmax", Softmax(_x(777)))  # the first call at 777: sampled, wrong
    assert audit.drain(30)
    assert _served(Softmax(_x(777))) != "wrong_at_one_width"


def test_a_real_call_is_held_to_the_budget_its_data_matches():
    """Constant layernorm rows are the eps_dominated family's (the op's budget), not large_offset's 3000x: the
    unshifted float32 mean that misses a row of 131.325 by 59x the op's budget is now a failure."""
    cols = 4096
    x = np.full((4, cols), 131.325, np.float32)
    w, b = np.random.default_rng(0).standard_normal((2, cols)).astype(np.float32)
    region = LayerNorm(x, w, b, eps=1e-5)
    cand = LayerNormUnshiftedMean()
    budget, _ = audit.real_budget(cand, region)
    assert budget == budget_for("layernorm", "float32")
    reason, _, excess = audit.compare_call(region, cand.run(region, {}), budget)
    assert reason and excess > 10, (reason, excess)
    # rows with a large common offset are the large_offset family's: its budget, scaled to their condition
    rng = np.random.default_rng(1)
    offset = LayerNorm((rng.standard_normal((4, cols)) * 0.1 + 300).astype(np.float32), w, b, eps=1e-5)
    loose, _ = audit.real_budget(cand, offset)
    assert loose.atol > 100 * budget.atol
    # attention: benign scores get the op's budget, scores near the exp range the family's
    q = rng.standard_normal((1, 2, 16, 8)).astype(np.float32) * 0.3
    benign = Attention(q, q.copy(), q.copy())
    assert audit.real_budget(REGISTRY.get("numpy_attention", "cpu", "attention"), benign)[0] == \
        budget_for("attention", "float32")
    large = Attention(q * 30, q * 30, q.copy())
    assert audit.real_budget(REGISTRY.get("numpy_attention", "cpu", "attention"), large)[0].atol > \
        budget_for("attention", "float32").atol


@pytest.fixture(autouse=True)
def _audit_off():
    yield
    arbiter.configure(audit=0.0)


@x86_glibc
def test_a_kernel_flushing_at_every_call_is_seen_at_a_low_rate(only_candidates):
    """The first flushing call is rarely the sampled one: the sampled call runs under the default environment, so
    the kernel's own change is seen there too; the caller's environment (flushed by then) is given back as it was."""
    wrong = Flushes()
    only_candidates("cpu", "softmax", wrong, _builtin())
    arbiter.configure(audit=0.05)
    try:
        assert _calls_until_demoted("flushes_to_zero", lambda i: Softmax(_x()), 2000)
        assert wrong.calls > wrong.after  # served until its fault began, then demoted
    finally:
        set_ftz(False)
