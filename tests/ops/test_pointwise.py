"""pointwise chains: region validation, chain keys, the synthesized kernel, and the F4 gate."""
import numpy as np
import pytest

import arbiter
from arbiter import RegionError
from arbiter.candidates import REGISTRY
from arbiter.oracles.pointwise import oracle
from arbiter.regions import Pointwise
from arbiter.synth import content_hash, pointwise

BOTH = {"numpy_pointwise", "synth_pointwise_fused"}
CHAINS = ["mul[t]>add[s]>relu>tanh", "sub[t]>sigmoid>max[s]>square>neg",
          "silu>gelu_tanh>min[t]>exp>abs"]


def test_region_errors_name_the_step(rng):
    x = rng.standard_normal(10).astype(np.float32)
    with pytest.raises(RegionError, match=r"^ops\[1\]: unknown op 'cube'"):
        Pointwise(x, [("relu",), ("cube",)])
    with pytest.raises(RegionError, match=r"^ops\[0\]: 'add' is binary"):
        Pointwise(x, [("add",)])
    with pytest.raises(RegionError, match=r"^ops\[0\]: shape \(9,\) should equal"):
        Pointwise(x, [("mul", x[:9])])
    with pytest.raises(RegionError, match=r"^ops\[0\]: dtype float64 differs"):
        Pointwise(x, [("mul", x.astype(np.float64))])
    with pytest.raises(RegionError, match=r"^ops\[0\]: 'tanh' is unary"):
        Pointwise(x, [("tanh", 1.0)])
    with pytest.raises(RegionError, match="^ops: must be a sequence"):
        Pointwise(x, "relu")


def test_chain_structure_is_the_key_and_scalars_are_not(rng):
    x, y = rng.standard_normal((2, 3, 5)).astype(np.float32)
    a = Pointwise(x, [("mul", y), ("add", 1.0), ("relu",), ("tanh",)])
    b = Pointwise(x, [("mul", y), ("add", 2.5), ("relu",), ("tanh",)])
    assert a.key == b.key and a.key.id == "cpu:pointwise:float32:RR:chain=mul[t]>add[s]>relu>tanh:size16"
    assert arbiter.keys.ProblemKey.parse(a.key.id) == a.key
    np.testing.assert_allclose(oracle(a), np.tanh(np.maximum(x.astype(float) * y + 1.0, 0)), rtol=1e-12)


def test_synthesized_source_is_readable_with_a_content_hash_identity(rng):
    x, y = rng.standard_normal((2, 8)).astype(np.float32)
    a = Pointwise(x, [("mul", y), ("add", 1.0), ("relu",), ("tanh",)])
    text = REGISTRY.get("synth_pointwise_fused", "cpu", "pointwise").source_for(a)
    assert "v = v * T(t0[i])  # mul[t]" in text and "v = math.tanh(v)  # tanh" in text
    assert "def kernel(x, out, t0, s0):" in text
    same_structure = Pointwise(x, [("mul", x), ("add", -3.0), ("relu",), ("tanh",)])
    assert pointwise.source(same_structure.ops, "float32") == text  # scalars are arguments, not constants
    kernel = pointwise.kernel(a.ops, "float32")
    assert kernel.hash == content_hash(text) and kernel.path.read_text() == text
    assert pointwise.source(a.ops, "float64") != text
    with pytest.raises(ValueError, match="dtype: float16"):
        pointwise.source(a.ops, "float16")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("chain", CHAINS)
def test_every_candidate_passes_at_odd_sizes(dtype, chain, every_candidate):
    every_candidate(Pointwise.random("cpu", dtype, {"size": 1001}, {"chain": chain}), BOTH)


def test_float16_and_strided_operands_go_to_the_vendor(every_candidate):
    every_candidate(Pointwise.random("cpu", "float16", {"size": 333}, {"chain": CHAINS[0]}), {"numpy_pointwise"})
    strided = Pointwise.random("cpu", "float32", {"size": 333}, {"chain": CHAINS[0]}, layout="RS")
    assert "layout RS" in REGISTRY.get("synth_pointwise_fused", "cpu", "pointwise").applies_to(strided)
    every_candidate(strided, {"numpy_pointwise"})
