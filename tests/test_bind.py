"""arbiter.bind: a bound handle skips region validation but refuses operands that differ."""
import numpy as np
import pytest

import arbiter
from arbiter import RegionError


def test_bound_rmsnorm_computes_like_run_arbitrated_and_counts_hits():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((16, 32)).astype(np.float32), rng.standard_normal(32).astype(np.float32)
    f = arbiter.bind("rmsnorm", x, w, eps=1e-5)
    x2 = rng.standard_normal((16, 32)).astype(np.float32)
    got = f(x2, w)
    want = arbiter.run_arbitrated("rmsnorm", arbiter.regions.RMSNorm(x2, w, eps=1e-5))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    key = arbiter.regions.RMSNorm(x2, w, eps=1e-5).key.id
    before = sum(r["hits"] + r["misses"] for r in arbiter.stats() if r["key"] == key)
    f(x2, w)
    after = sum(r["hits"] + r["misses"] for r in arbiter.stats() if r["key"] == key)
    assert after == before + 1


@pytest.mark.parametrize("bad, argument, what", [
    (lambda x: x[:, :16].copy(), "x", "shape"),
    (lambda x: x.astype(np.float64), "x", "dtype"),
    (lambda x: np.asfortranarray(x), "x", "strides"),
])
def test_bound_handle_refuses_a_different_operand_naming_it(bad, argument, what):
    x, w = np.ones((8, 32), np.float32), np.ones(32, np.float32)
    f = arbiter.bind("rmsnorm", x, w)
    with pytest.raises(RegionError, match=rf"{argument}: {what}"):
        f(bad(x), w)


def test_bound_matmul_keyword_operands_are_bound_too():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((8, 4)).astype(np.float32), rng.standard_normal((4, 6)).astype(np.float32)
    bias, res = rng.standard_normal(6).astype(np.float32), rng.standard_normal((8, 6)).astype(np.float32)
    f = arbiter.bind("matmul", a, b, bias=bias, activation="relu", residual=res)
    got = f(a, b, bias, res)
    np.testing.assert_allclose(got, np.maximum(a @ b + bias, 0) + res, rtol=1e-5, atol=1e-5)
    with pytest.raises(RegionError, match="operands: expected 4"):
        f(a, b)


def test_bind_refuses_what_it_cannot_bind():
    x = np.ones(8, np.float32)
    with pytest.raises(RegionError, match="op: pointwise"):
        arbiter.bind("pointwise", x, [("relu",)])
    with pytest.raises(RegionError, match="out: "):
        arbiter.bind("softmax", x, out=np.empty_like(x))
    with pytest.raises(RegionError, match="x: dtype int64"):
        arbiter.bind("softmax", np.arange(8))  # validated once, at bind time
