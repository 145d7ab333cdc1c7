"""The emitted numba kernels: F4 gate at odd shapes for every parameter set, forced selection, refusals."""
from __future__ import annotations

import numpy as np
import pytest

import arbiter
from arbiter.candidates import REGISTRY, Tier
from arbiter.regions import Matmul, RMSNorm, Softmax
from arbiter.verify import verify

# (candidate, op, region type, dims): odd sizes that are no multiple of any tile or chunk.
CASES = [
    ("numba_matmul_blocked", "matmul", Matmul, {"m": 67, "n": 45, "k": 33}),
    ("numba_gemv", "matmul", Matmul, {"m": 1, "n": 257, "k": 129}),
    ("numba_gemv", "matmul", Matmul, {"m": 129, "n": 1, "k": 65}),
    ("numba_softmax_fused", "softmax", Softmax, {"rows": 33, "cols": 1027}),
    ("numba_rmsnorm_fused", "rmsnorm", RMSNorm, {"rows": 33, "cols": 1027}),
]
IDS = [f"{name}-{'x'.join(map(str, dims.values()))}" for name, _, _, dims in CASES]


def _get(name, op):
    cand = REGISTRY.get(name, "cpu", op)
    assert cand is not None, f"{name} is not registered for cpu/{op}"
    return cand


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,op,kind,dims", CASES, ids=IDS)
def test_every_parameter_set_passes_the_gate(name, op, kind, dims, dtype, rng):
    cand = _get(name, op)
    assert cand.tier is Tier.EMITTED
    region = kind.random("cpu", dtype, dims, rng=rng)
    assert cand.applies_to(region) is True
    for params in cand.param_space():
        verdict = verify(cand, params, region)
        assert verdict.passed, f"{name}{params}: {verdict.reason}"
        assert len(verdict.probes) >= 2  # the real shape and the bucket's edges were all probed


@pytest.mark.parametrize("name,op,kind,dims", CASES, ids=IDS)
def test_forced_selection_serves_it(name, op, kind, dims, rng):
    region = kind.random("cpu", "float32", dims, rng=rng)
    decision = arbiter.arbitrate(op, region, force=name)
    assert decision.winner.candidate.name == name and decision.winner.status == "passed"
    direct = _get(name, op).run(region.with_out(None), decision.winner.params).copy()
    served = arbiter.run_arbitrated(op, region)
    np.testing.assert_array_equal(served, direct)
    assert any(s["solution"].startswith(name) and s["hits"] == 1 for s in arbiter.stats())


def test_compile_time_is_recorded_once_per_dtype(rng):
    cand = _get("numba_rmsnorm_fused", "rmsnorm")
    region = RMSNorm.random("cpu", "float64", {"rows": 5, "cols": 7}, rng=rng)
    cand.run(region, {})
    first = dict(cand.compile_log.seconds)
    assert first["float64"] > 0 and cand.last_compile_s == first["float64"]
    cand.run(region.fresh(rng), {})
    assert cand.compile_log.seconds == first  # a second call compiles nothing


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_refusals_name_the_reason(dtype, rng):
    mm = _get("numba_matmul_blocked", "matmul")
    gemv = _get("numba_gemv", "matmul")
    sm = _get("numba_softmax_fused", "softmax")
    rms = _get("numba_rmsnorm_fused", "rmsnorm")
    if dtype == "float16":
        for cand, region in [(mm, Matmul.random("cpu", dtype, {"m": 3, "n": 4, "k": 5}, rng=rng)),
                             (sm, Softmax.random("cpu", dtype, {"rows": 3, "cols": 4}, rng=rng)),
                             (rms, RMSNorm.random("cpu", dtype, {"rows": 3, "cols": 4}, rng=rng))]:
            assert "dtype float16" in cand.applies_to(region)
        return
    strided = Matmul.random("cpu", dtype, {"m": 3, "n": 4, "k": 5}, layout="SR", rng=rng)
    assert "layout SR" in mm.applies_to(strided)
    epilogue = Matmul.random("cpu", dtype, {"m": 3, "n": 4, "k": 5}, attrs={"bias": 1}, rng=rng)
    assert "epilogue" in mm.applies_to(epilogue) and "epilogue" in gemv.applies_to(epilogue.resized(
        {"m": 1, "n": 4, "k": 5}, rng))
    assert "M == 1 or N == 1" in gemv.applies_to(Matmul.random("cpu", dtype, {"m": 2, "n": 3, "k": 4}, rng=rng))
    assert "axis inner" in sm.applies_to(Softmax.random("cpu", dtype, {"rows": 3, "cols": 4},
                                                        attrs={"axis": "inner"}, rng=rng))
    assert "layout S" in sm.applies_to(Softmax.random("cpu", dtype, {"rows": 3, "cols": 4}, layout="S", rng=rng))
    assert "layout S" in rms.applies_to(RMSNorm.random("cpu", dtype, {"rows": 3, "cols": 4}, layout="S", rng=rng))


def test_softmax_handles_large_and_minus_inf_inputs():
    # The running max starts at -inf and grows: rows whose max comes late, and -inf entries.
    x = np.array([[-1e4, -5.0, 80.0, 88.0, 3.0], [-np.inf, 0.0, 1.0, -np.inf, 2.0]], dtype=np.float32)
    region = Softmax(x)
    out = _get("numba_softmax_fused", "softmax").run(region, {"chunk": 2})
    x64 = x.astype(np.float64)
    ref = np.exp(x64 - x64.max(-1, keepdims=True))
    ref /= ref.sum(-1, keepdims=True)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-30)
