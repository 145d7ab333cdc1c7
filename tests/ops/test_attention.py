"""attention: region validation, the causal convention, and every CPU candidate through the F4 gate."""
import numpy as np
import pytest

from arbiter import RegionError
from arbiter.candidates import REGISTRY
from arbiter.oracles.attention import oracle
from arbiter.regions import Attention
from arbiter.verify import verify

BOTH = {"numpy_attention", "numba_flash_attention"}


def test_region_errors_name_the_argument(rng):
    q = rng.standard_normal((1, 2, 5, 8)).astype(np.float32)
    k = rng.standard_normal((1, 2, 7, 8)).astype(np.float32)
    with pytest.raises(RegionError, match="^q: must be 4-D"):
        Attention(q[0], k, k)
    with pytest.raises(RegionError, match="^k: shape"):
        Attention(q, k[..., :4], k)
    with pytest.raises(RegionError, match="^v: shape"):
        Attention(q, k, k[:, :, :3])
    with pytest.raises(RegionError, match="^scale: "):
        Attention(q, k, k, scale=float("nan"))
    with pytest.raises(RegionError, match="^causal: "):
        Attention(q, k, k, causal="yes")


def test_query_and_key_lengths_differ_and_head_size_is_bucketed_exactly():
    region = Attention.random("cpu", "float32", {"batch": 2, "heads": 3, "q": 19, "k": 37, "d": 24})
    assert region.key.id == "cpu:attention:float32:RRR:causal=0:batch2,heads4,q32,k64,d24"
    assert region.scale == pytest.approx(1 / np.sqrt(24))


def test_causal_is_top_left_aligned():
    region = Attention.random("cpu", "float64", {"batch": 1, "heads": 2, "q": 6, "k": 4, "d": 8}, {"causal": "1"})
    y = oracle(region)
    np.testing.assert_allclose(y[:, :, 0], region.v[:, :, 0])  # query 0 sees key 0 only
    full = oracle(Attention(region.q, region.k, region.v))
    np.testing.assert_allclose(y[:, :, 3:], full[:, :, 3:])  # queries >= k_len - 1 see every key


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("causal", ["0", "1"])
def test_every_candidate_passes_at_odd_shapes(dtype, causal, every_candidate):
    dims = {"batch": 2, "heads": 3, "q": 19, "k": 37, "d": 24} if causal == "0" else \
        {"batch": 1, "heads": 2, "q": 41, "k": 23, "d": 16}
    every_candidate(Attention.random("cpu", dtype, dims, {"causal": causal}), BOTH)


def test_every_block_size_of_the_fused_kernel_passes():
    flash = REGISTRY.get("numba_flash_attention", "cpu", "attention")
    region = Attention.random("cpu", "float32", {"batch": 1, "heads": 2, "q": 13, "k": 300, "d": 32},
                              {"causal": "1"})
    for params in flash.param_space():
        assert verify(flash, params, region).passed, params


def test_float16_is_served_by_the_vendor(every_candidate):
    region = Attention.random("cpu", "float16", {"batch": 1, "heads": 2, "q": 17, "k": 33, "d": 16})
    every_candidate(region, {"numpy_attention"})
    assert "float16" in REGISTRY.get("numba_flash_attention", "cpu", "attention").applies_to(region)
