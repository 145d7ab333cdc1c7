"""cublaslt_matmul: cuBLASLt through nvmath-python, epilogues in the GEMM, heuristic algorithms as solution indices.

CPU tests: which regions it takes (and why not), the epilogue names, the install hint without nvmath, the
algorithm index past the end of a key's list. GPU tests (nvmath installed; skipped otherwise): every
epilogue it serves and every algorithm index through the F4 gate, and a warm call executes a cached plan.
"""
from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from arbiter.candidates import REGISTRY
from arbiter.candidates.nvidia import cublaslt_matmul as lt
from arbiter.regions import Matmul
from gpu_support import check_builtin_solution, gpu_available, requires_gpu


def _cand():
    REGISTRY.load_builtin("nvidia")
    return REGISTRY.get("cublaslt_matmul", "nvidia", "matmul")


def _region(attrs, dtype="float16", layout="RR"):
    return Matmul.random("cpu", dtype, {"m": 6, "n": 5, "k": 4}, attrs, layout)


@pytest.mark.parametrize("attrs,name", [
    ({}, ""), ({"bias": "1"}, "BIAS"), ({"activation": "relu"}, "RELU"),
    ({"bias": "1", "activation": "relu"}, "RELU_BIAS"),
    ({"activation": "gelu_tanh"}, "GELU"), ({"bias": "1", "activation": "gelu_tanh"}, "GELU_BIAS"),
    ({"residual": "1"}, ""), ({"bias": "1", "residual": "1"}, "BIAS"),
])
def test_each_served_epilogue_maps_to_its_cublaslt_epilogue(attrs, name):
    region = _region(attrs, "float32" if attrs.get("activation") == "relu" else "float16")  # half relu: declined
    assert _cand().applies_to(region) is True
    assert lt.epilog_name(region) == name


@pytest.mark.parametrize("attrs,dtype,layout,lead", [
    ({"bias": "1", "activation": "gelu"}, "float32", "RR", "activation gelu"),
    ({"activation": "silu"}, "float32", "RR", "activation silu"),
    ({"bias": "1", "activation": "relu", "residual": "1"}, "float32", "RR", "residual after an activation"),
    ({}, "float64", "RR", "dtype float64"),
    ({"residual": "1"}, "float32", "RRS", "layout RRS"),
    ({"bias": "1", "activation": "gelu_tanh"}, "float32", "RR", "gelu_tanh in float32"),
    ({"bias": "1", "activation": "relu"}, "float16", "RR", "relu in float16"),
    ({"activation": "relu"}, "float16", "RR", "relu in float16"),
])
def test_what_cublaslt_cannot_do_in_one_call_is_declined_with_the_reason(attrs, dtype, layout, lead):
    why = _cand().applies_to(_region(attrs, dtype, layout))
    assert isinstance(why, str) and why.startswith(lead)


def test_without_nvmath_the_reason_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "nvmath", None)  # `import nvmath...` raises ImportError
    lt.nvmath_reason.cache_clear()
    try:
        why = lt.nvmath_reason()
        assert isinstance(why, str) and "nvmath-python" in why and "kernel-arbiter[nvmath]" in why
    finally:
        lt.nvmath_reason.cache_clear()


def test_the_algorithm_is_a_solution_index_and_indices_past_a_key_s_list_run_its_last(monkeypatch):
    cand = _cand()
    assert cand.param_space() == [{"algo": i} for i in range(lt.ALGORITHMS)]
    monkeypatch.setattr(lt, "plan_for", lambda region, c: lt._Plan(None, ["first", "second"]))
    region = _region({"bias": "1"})
    sigs = [cand.launch_signature(region, p) for p in cand.param_space()]
    assert sigs == [("algo", 0), ("algo", 1)] + [("algo", 1)] * (lt.ALGORITHMS - 2)


def test_the_loaded_cublaslt_version_is_part_of_the_code_identity():
    assert f"cuBLASLt {lt.cublaslt_version()}" in _cand().source()


# --- on the GPU, with nvmath --------------------------------------------------------
needs_nvmath = pytest.mark.skipif(importlib.util.find_spec("nvmath") is None, reason="nvmath-python not installed")
SERVED = [{}, {"bias": "1"}, {"bias": "1", "activation": "relu"}, {"bias": "1", "activation": "gelu_tanh"},
          {"activation": "relu"}, {"activation": "gelu_tanh"}, {"residual": "1"}, {"bias": "1", "residual": "1"}]
SHAPES = [(1, 1, 1), (37, 29, 53), (65, 1, 300), (3, 40, 1100), (129, 70, 257), (256, 512, 128)]


def _dtypes():
    from arbiter import targets

    if not gpu_available():
        return ["float32"]
    return ["float32", "float16"] + (["bfloat16"] if targets.get("nvidia").bfloat16() is not None else [])


def _ids(attrs):
    return "+".join(k if v == "1" else v for k, v in attrs.items()) or "plain"


@pytest.mark.gpu
@requires_gpu
@needs_nvmath
@pytest.mark.parametrize("dtype", _dtypes())
@pytest.mark.parametrize("attrs", SERVED, ids=_ids)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_every_epilogue_passes_the_gate(shape, attrs, dtype):
    m, n, k = shape
    check_builtin_solution(_cand(), {"algo": 0}, Matmul.random("nvidia", dtype, {"m": m, "n": n, "k": k}, attrs,
                                                               rng=np.random.default_rng(31)))


@pytest.mark.gpu
@requires_gpu
@needs_nvmath
@pytest.mark.parametrize("algo", range(lt.ALGORITHMS))
@pytest.mark.parametrize("layout", ["RR", "CR"])
def test_every_algorithm_index_passes_the_gate(algo, layout):
    attrs = {"bias": "1", "activation": "gelu_tanh"}
    check_builtin_solution(_cand(), {"algo": algo}, Matmul.random("nvidia", "float16", {"m": 515, "n": 384, "k": 1000},
                                                                  attrs, layout, rng=np.random.default_rng(32)))


@pytest.mark.gpu
@requires_gpu
@needs_nvmath
def test_a_warm_call_executes_the_cached_plan_into_a_new_output():
    import cupy as cp

    region = Matmul.random("nvidia", "float16", {"m": 300, "n": 200, "k": 100}, {"bias": "1", "activation": "relu"})
    first = _cand().run(region, {"algo": 0})
    plans = len(lt._plans)
    fresh = Matmul.random("nvidia", "float16", {"m": 300, "n": 200, "k": 100}, {"bias": "1", "activation": "relu"},
                          rng=np.random.default_rng(5))
    second = _cand().run(fresh, {"algo": 0})
    assert len(lt._plans) == plans  # same key and alignment: no new plan
    assert second is not first and second.flags.c_contiguous and second.shape == (300, 200)
    want = cp.maximum(fresh.a.astype(cp.float32) @ fresh.b.astype(cp.float32) + fresh.bias.astype(cp.float32), 0)
    cp.testing.assert_allclose(second.astype(cp.float32), want, rtol=2e-2, atol=2e-2)
