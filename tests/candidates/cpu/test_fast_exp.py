"""The vectorisable exp the fused softmax uses: accuracy over its range, in both dtypes."""
from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from arbiter.candidates.cpu._numba import fast_exp


@njit(cache=True)
def _exp_all(x, out):
    for i in range(x.size):
        out[i] = fast_exp(x[i])


@pytest.mark.parametrize("dtype,bound,low,high", [(np.float32, 3e-7, -87.0, 88.0),
                                                   (np.float64, 2e-15, -700.0, 700.0)])
def test_relative_error_within_bound(dtype, bound, low, high):
    x = np.concatenate([np.linspace(low, high, 200_001), [0.0, -1e-30, 1e-30]]).astype(dtype)
    out = np.empty_like(x)
    _exp_all(x, out)
    ref = np.exp(x.astype(np.float64))
    assert out.dtype == dtype
    assert np.max(np.abs(out - ref) / ref) < bound


def test_far_below_range_is_tiny_not_nan():
    x = np.array([-np.inf, -1e30, -200.0], dtype=np.float32)
    out = np.empty_like(x)
    _exp_all(x, out)
    assert np.all(np.isfinite(out)) and np.all(out < 1e-37)
