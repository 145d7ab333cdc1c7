"""The synthesized fused-epilogue matmul: every activation through the gate, forced selection, its source."""
from __future__ import annotations

import numpy as np
import pytest

import arbiter
from arbiter.candidates import REGISTRY, Tier
from arbiter.regions import ACTIVATIONS, Matmul
from arbiter.verify import verify

NAME = "numba_epilogue_synth"
DIMS = {"m": 67, "n": 45, "k": 33}


@pytest.fixture
def cand():
    found = REGISTRY.get(NAME, "cpu", "matmul")
    assert found is not None and found.tier is Tier.SYNTHESIZED
    return found


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_each_activation_with_bias_and_residual_passes(cand, activation, rng):
    region = Matmul.random("cpu", "float32", DIMS, attrs={"bias": 1, "activation": activation, "residual": 1},
                           rng=rng)
    verdict = verify(cand, cand.param_space()[0], region)
    assert verdict.passed, verdict.reason


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_parameter_set_passes(cand, dtype, rng):
    region = Matmul.random("cpu", dtype, DIMS, attrs={"bias": 1, "activation": "gelu", "residual": 1}, rng=rng)
    for params in cand.param_space():
        verdict = verify(cand, params, region)
        assert verdict.passed, f"{params}: {verdict.reason}"


def test_forced_selection_serves_it(cand, rng):
    region = Matmul.random("cpu", "float32", DIMS, attrs={"bias": 1, "activation": "gelu", "residual": 1}, rng=rng)
    decision = arbiter.arbitrate("matmul", region, force=NAME)
    assert decision.winner.candidate is cand and decision.winner.status == "passed"
    served = arbiter.run_arbitrated("matmul", region)
    vendor = REGISTRY.get("numpy_matmul", "cpu", "matmul").run(region.with_out(None), {})
    np.testing.assert_allclose(served, vendor, rtol=1e-5, atol=1e-5)


def test_refuses_what_it_cannot_fuse(cand, rng):
    plain = Matmul.random("cpu", "float32", {"m": 3, "n": 4, "k": 5}, rng=rng)
    assert "no epilogue" in cand.applies_to(plain)
    half = Matmul.random("cpu", "float16", {"m": 3, "n": 4, "k": 5}, attrs={"bias": 1}, rng=rng)
    assert "dtype float16" in cand.applies_to(half)
    strided = Matmul.random("cpu", "float32", {"m": 3, "n": 4, "k": 5}, attrs={"residual": 1}, layout="RRS",
                            rng=rng)
    assert "residual: strided" in cand.applies_to(strided)


def test_source_for_shows_the_generated_kernel_and_its_hash(cand, rng):
    region = Matmul.random("cpu", "float32", DIMS, attrs={"bias": 1, "activation": "silu"}, rng=rng)
    text = cand.source_for(region)
    kernel = cand.generated(region, cand.param_space()[0])
    assert f"content hash {kernel.hash}" in text and kernel.path.name == f"k_{kernel.hash}.py"
    assert "# chain: v + bias[row] -> silu" in text and "math.exp" in text
    other = cand.source_for(region.resized({"m": 3, "n": 4, "k": 5}, rng))
    assert other == text  # the kernel depends on the chain and dtype, not on the shape


def test_identity_covers_the_generator(cand):
    import arbiter.synth.cpu as synth_cpu

    assert synth_cpu.TEMPLATE in cand.source()
    assert cand.identity().startswith(NAME + "@")
