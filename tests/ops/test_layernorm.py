"""layernorm: region validation, oracle, and every CPU candidate through the F4 gate."""
import numpy as np
import pytest

import arbiter
from arbiter import RegionError
from arbiter.candidates import REGISTRY
from arbiter.oracles.layernorm import oracle
from arbiter.regions import LayerNorm

BOTH = {"numpy_layernorm", "numba_layernorm_fused"}


def test_region_errors_name_the_argument(rng):
    x = rng.standard_normal((4, 8)).astype(np.float32)
    w = np.ones(8, np.float32)
    with pytest.raises(RegionError, match="^weight: shape"):
        LayerNorm(x, np.ones(7, np.float32))
    with pytest.raises(RegionError, match="^bias: dtype"):
        LayerNorm(x, w, np.ones(8, np.float64))
    with pytest.raises(RegionError, match="^eps: "):
        LayerNorm(x, w, eps=0.0)
    with pytest.raises(RegionError, match="^x: dtype int64"):
        LayerNorm(np.ones((4, 8), np.int64), w)


def test_oracle_normalises_each_row(rng):
    region = LayerNorm.random("cpu", "float64", {"rows": 5, "cols": 33}, {"bias": "0"})
    y = oracle(LayerNorm(region.x, np.ones(33), eps=1e-12))
    np.testing.assert_allclose(y.mean(-1), 0, atol=1e-12)
    np.testing.assert_allclose(y.std(-1), 1, rtol=1e-9)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("bias", ["1", "0"])
def test_every_candidate_passes_at_odd_shapes(dtype, bias, every_candidate):
    every_candidate(LayerNorm.random("cpu", dtype, {"rows": 37, "cols": 129}, {"bias": bias}), BOTH)


def test_float16_and_strided_go_to_the_vendor(every_candidate):
    half = LayerNorm.random("cpu", "float16", {"rows": 9, "cols": 65})
    every_candidate(half, {"numpy_layernorm"})
    numba = REGISTRY.get("numba_layernorm_fused", "cpu", "layernorm")
    assert "float16" in numba.applies_to(half)
    strided = LayerNorm.random("cpu", "float32", {"rows": 9, "cols": 65}, layout="S")
    assert "layout S" in numba.applies_to(strided)
    every_candidate(strided, {"numpy_layernorm"})


def test_dispatch_and_key():
    region = LayerNorm.random("cpu", "float32", {"rows": 20, "cols": 100})
    assert region.key.id == "cpu:layernorm:float32:R:bias=1:rows32,cols128"
    out = arbiter.run_arbitrated("layernorm", region)
    np.testing.assert_allclose(out, oracle(region), rtol=1e-4, atol=1e-4)
