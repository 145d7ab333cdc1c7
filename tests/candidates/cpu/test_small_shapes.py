"""Issue 31 item 4: the vendor formulas on small shapes, and exact GELU without scipy's erf."""
from __future__ import annotations

import numpy as np
import pytest

from arbiter.candidates import REGISTRY
from arbiter.candidates.cpu import _common
from arbiter.regions import RMSNorm

pytest.importorskip("numba")


def test_exact_gelu_is_one_numba_pass_not_scipy_erf(monkeypatch, rng):
    from scipy.special import erf

    z = rng.standard_normal((300, 500)).astype(np.float32) * 4
    want = (z.astype(np.float64) * 0.5 * (1 + erf(z.astype(np.float64) / np.sqrt(2)))).astype(np.float32)

    def no_scipy(_):
        raise AssertionError("scipy.special.erf called")

    monkeypatch.setattr(_common, "erf", no_scipy)
    _common.activation_inplace("gelu", z)
    np.testing.assert_allclose(z, want, rtol=2e-6, atol=1e-6)


def test_rmsnorm_serves_the_sum_of_squares_in_one_pass(rng):
    """The candidate does not build the ``x * x`` temporary the obvious formula builds; same result."""
    x, w = rng.standard_normal((7, 3000)).astype(np.float32), rng.standard_normal(3000).astype(np.float32)
    cand = REGISTRY.get("numpy_rmsnorm", "cpu", "rmsnorm")
    got = cand.run(RMSNorm(x, w, eps=1e-6), {})
    want = x / np.sqrt(np.mean(x.astype(np.float64) ** 2, axis=-1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
    assert "einsum" in cand.source()
