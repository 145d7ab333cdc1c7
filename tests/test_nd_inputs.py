"""N-D operands through ``run_arbitrated`` (issue 29, item 3): matmul's and gated's leading dimensions are rows,
row ops reduce over the last axis of any rank, contiguous operands are not copied, and serving a key prints no
internal NumPy warning (item 7)."""
import warnings

import numpy as np
import pytest

import arbiter
from arbiter import regions


def rand(*shape, scale=1.0):
    return (np.random.default_rng(sum(shape)).standard_normal(shape) * scale).astype(np.float32)


def test_matmul_takes_leading_batch_dimensions_without_a_copy():
    a, w, bias, res = rand(2, 8, 64), rand(64, 32), rand(32), rand(2, 8, 32)
    region = regions.Matmul(a, w, bias=bias, residual=res, activation="relu")
    assert np.shares_memory(region.a, a) and region.a.shape == (16, 64)  # a view, not a copy
    assert region.key.bucket == regions.Matmul(rand(16, 64), w, bias=bias, residual=rand(16, 32),
                                               activation="relu").key.bucket  # the same problem as 2-D
    y = arbiter.run_arbitrated("matmul", region)
    assert y.shape == (2, 8, 32)
    np.testing.assert_allclose(y, np.maximum(a @ w + bias, 0) + res, rtol=1e-4, atol=1e-4)
    out = np.empty((2, 8, 32), np.float32)
    y = arbiter.run_arbitrated("matmul", regions.Matmul(a, w, out=out))
    assert np.shares_memory(y, out) and y.shape == out.shape
    np.testing.assert_allclose(out, a @ w, rtol=1e-4, atol=1e-4)
    permuted = a.transpose(1, 0, 2)  # leading dimensions that do not merge: computed all the same
    np.testing.assert_allclose(arbiter.run_arbitrated("matmul", regions.Matmul(permuted, w)), permuted @ w,
                               rtol=1e-4, atol=1e-4)


def test_gated_and_row_ops_take_n_d_inputs():
    x, wg, wu = rand(3, 4, 16), rand(16, 8), rand(16, 8)
    y = arbiter.run_arbitrated("gated", regions.Gated(x, wg, wu))
    g = x @ wg
    np.testing.assert_allclose(y, g / (1 + np.exp(-g)) * (x @ wu), rtol=1e-4, atol=1e-4)
    y = arbiter.run_arbitrated("softmax", regions.Softmax(x))
    assert y.shape == x.shape
    np.testing.assert_allclose(y.sum(-1), 1.0, rtol=1e-5)


def test_bad_n_d_operands_name_the_argument():
    with pytest.raises(arbiter.RegionError, match="^residual: shape \\(16, 32\\) should be \\(2, 8, 32\\)"):
        regions.Matmul(rand(2, 8, 64), rand(64, 32), residual=rand(16, 32))
    with pytest.raises(arbiter.RegionError, match="^a: must be"):
        regions.Matmul(rand(64), rand(64, 32))


@pytest.mark.parametrize("op, make", [
    ("matmul", lambda s: regions.Matmul(rand(8, 16, scale=s), rand(16, 8), activation="silu")),
    ("gated", lambda s: regions.Gated(rand(8, 16, scale=s), rand(16, 8), rand(16, 8))),
    ("pointwise", lambda s: regions.Pointwise(rand(64, scale=s), [("silu",), ("sigmoid",)])),
])
def test_serving_a_key_warns_nothing_on_large_negative_values(op, make):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        arbiter.run_arbitrated(op, make(1.0))  # decided (the gate's probes are not this test's concern)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "overflow encountered in exp" reached users before
        y = arbiter.run_arbitrated(op, make(1e4))
    assert np.isfinite(y).all()
