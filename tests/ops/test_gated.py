"""gated (SwiGLU): region validation, the epilogue flag, and every CPU candidate through the F4 gate."""
import numpy as np
import pytest

from arbiter import RegionError
from arbiter.candidates import REGISTRY
from arbiter.regions import Gated
from arbiter.verify import verify

BOTH = {"numpy_gated", "numba_gated_fused"}


def test_region_errors_name_the_argument(rng):
    x = rng.standard_normal((5, 8)).astype(np.float32)
    w = rng.standard_normal((8, 6)).astype(np.float32)
    with pytest.raises(RegionError, match="^w_gate: shape"):
        Gated(x, w[:7], w)
    with pytest.raises(RegionError, match="^w_up: shape"):
        Gated(x, w, w[:, :5])
    with pytest.raises(RegionError, match="^w_up: dtype"):
        Gated(x, w, w.astype(np.float64))
    with pytest.raises(RegionError, match=r"^x: must be \[M, K\] or \[\.\.\., M, K\]"):
        Gated(x[0], w, w)


def test_the_gate_is_a_fused_epilogue():
    assert Gated.random("cpu", "float32", {"m": 3, "n": 4, "k": 5}).has_epilogue


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_candidate_passes_at_odd_shapes(dtype, every_candidate):
    every_candidate(Gated.random("cpu", dtype, {"m": 37, "n": 29, "k": 70}), BOTH)


def test_every_block_height_passes_including_a_tail():
    fused = REGISTRY.get("numba_gated_fused", "cpu", "gated")
    region = Gated.random("cpu", "float32", {"m": 161, "n": 17, "k": 33})  # 161 = 5 * 32 + 1
    for params in fused.param_space():
        assert verify(fused, params, region).passed, params


def test_float16_and_strided_weights(every_candidate):
    every_candidate(Gated.random("cpu", "float16", {"m": 9, "n": 20, "k": 31}), {"numpy_gated"})
    every_candidate(Gated.random("cpu", "float32", {"m": 9, "n": 20, "k": 31}, layout="RSC"), BOTH)
