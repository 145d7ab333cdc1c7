"""The Triton-emitted candidates on an NVIDIA GPU with Triton (skipped elsewhere; CPU tests: ``test_triton.py``).

Every matmul tile through the F4 gate at shapes that are no multiple of any tile (M or N of 1, odd K), every
fused epilogue in row-major and column-major/strided layouts, the default tile at 4096^3 with the whole epilogue,
every SwiGLU tile (odd and strided) and the fused SwiGLU at a llama shape; a warm call takes the thin launch and
Triton's compiled kernels land in the private cache folder. Every split-K tile where it splits (deterministic run to
run), and every row-op tile (softmax, RMSNorm, LayerNorm) at odd, strided, looped and large widths in float32,
float16 and bfloat16.
"""
from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

from arbiter.candidates import REGISTRY
from arbiter.candidates.gpu_templates import triton_gated, triton_matmul, triton_rows
from arbiter.regions import Gated, LayerNorm, Matmul, RMSNorm, Softmax
from gpu_support import check_builtin_solution, gpu_available, requires_gpu

requires_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
pytestmark = [pytest.mark.gpu, requires_gpu, requires_triton]


def _cand(name="triton_matmul", op="matmul"):
    REGISTRY.load_builtin("nvidia")
    return REGISTRY.get(name, "nvidia", op)


AWKWARD = [(1, 8, 8), (129, 136, 72), (300, 1, 200)]
EPILOGUES = {"bias+gelu+residual": {"bias": "1", "activation": "gelu", "residual": "1"},
             "bias+gelu_tanh": {"bias": "1", "activation": "gelu_tanh"}, "relu": {"activation": "relu"},
             "silu+residual": {"activation": "silu", "residual": "1"}}


def _dtypes():
    if not gpu_available():
        return ["float16"]
    from arbiter import targets

    return ["float16"] + (["bfloat16"] if targets.get("nvidia").bfloat16() is not None else [])


def _id(s):
    return "x".join(map(str, s))


MATMUL_SOLUTIONS = [{"tile": list(t)} for t in triton_matmul.TILES]


def _params_id(p):
    return _id(p["tile"])


@pytest.mark.parametrize("params", MATMUL_SOLUTIONS, ids=_params_id)
@pytest.mark.parametrize("shape", AWKWARD, ids=_id)
def test_every_matmul_solution_passes_the_gate_at_awkward_shapes(params, shape):
    m, n, k = shape
    region = Matmul.random("nvidia", "float16", {"m": m, "n": n, "k": k}, rng=np.random.default_rng(31))
    check_builtin_solution(_cand(), params, region)


@pytest.mark.parametrize("dtype", _dtypes())
@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("layout", ["RR", "CS"])
def test_every_epilogue_and_layout_passes_the_gate_fused(epilogue, layout, dtype):
    region = Matmul.random("nvidia", dtype, {"m": 200, "n": 136, "k": 100}, EPILOGUES[epilogue], layout,
                           rng=np.random.default_rng(32))
    check_builtin_solution(_cand(), {"tile": list(triton_matmul.TILES[2])}, region)


@pytest.mark.parametrize("dtype", _dtypes())
def test_the_default_tile_passes_the_gate_at_4096_with_gelu(dtype):
    region = Matmul.random("nvidia", dtype, {"m": 4096, "n": 4096, "k": 4096}, EPILOGUES["bias+gelu+residual"],
                           rng=np.random.default_rng(33))
    check_builtin_solution(_cand(), {"tile": list(triton_matmul.TILES[0])}, region)


@pytest.mark.parametrize("tile", triton_gated.TILES, ids=_id)
@pytest.mark.parametrize("shape,layout", [((129, 136, 72), "RRR"), ((33, 70, 129), "RCS")], ids=["odd", "strided"])
def test_every_gated_tile_passes_the_gate(tile, shape, layout):
    m, n, k = shape
    region = Gated.random("nvidia", "float16", {"m": m, "n": n, "k": k}, layout=layout, rng=np.random.default_rng(34))
    check_builtin_solution(_cand("triton_gated", "gated"), {"tile": list(tile)}, region)


@pytest.mark.parametrize("dtype", _dtypes())
def test_the_fused_swiglu_passes_the_gate_at_a_llama_shape(dtype):
    region = Gated.random("nvidia", dtype, {"m": 512, "n": 5504, "k": 2048}, rng=np.random.default_rng(35))
    check_builtin_solution(_cand("triton_gated", "gated"), {"tile": list(triton_gated.TILES[0])}, region)


def test_a_warm_call_takes_the_thin_launch_and_the_cache_is_the_private_folder():
    from arbiter.cachedir import private_dir

    cand = _cand()
    region = Matmul.random("nvidia", "float16", {"m": 256, "n": 256, "k": 256}, {"bias": "1", "activation": "gelu"},
                           rng=np.random.default_rng(36))
    params = {"tile": list(triton_matmul.TILES[-1])}
    first = cand.run(region, params)
    out = region.alloc_out()
    ptrs = [region.a.data.ptr, region.b.data.ptr, out.data.ptr, region.bias.data.ptr, 0]
    plan = cand.plan(region, params, out, not (ptrs[0] | ptrs[1] | ptrs[2] | ptrs[3]) & 15)
    assert plan is not None and plan.thin  # CUDA's launcher called directly
    assert any(private_dir("triton", "cuda").rglob("*.cubin"))
    import triton

    assert triton.knobs.cache.dir == str(private_dir("triton", "cuda"))
    from arbiter import targets

    nv = targets.get("nvidia")
    a, b, bias = (nv.to_host(x).astype(np.float64) for x in (region.a, region.b, region.bias))
    want = a @ b + bias
    want = 0.5 * want * (1 + np.vectorize(math.erf)(want / np.sqrt(2)))
    assert np.abs(nv.to_host(first).astype(np.float64) - want).max() < 0.05


SPLIT_SOLUTIONS = [{"tile": list(t), "split_k": True} for t in triton_matmul.SPLIT_TILES]


@pytest.mark.parametrize("params", SPLIT_SOLUTIONS, ids=_params_id)
@pytest.mark.parametrize("shape,epilogue", [((512, 512, 8192), "bias+gelu+residual"), ((129, 136, 4100), "relu"),
                                            ((64, 8, 70000), "silu+residual")], ids=["square", "odd", "deep"])
def test_every_split_k_solution_passes_the_gate_where_it_splits(params, shape, epilogue):
    m, n, k = shape
    assert triton_matmul.split_of(m, n, k, params["tile"])[0] >= 2
    region = Matmul.random("nvidia", "float16", {"m": m, "n": n, "k": k}, EPILOGUES[epilogue],
                           rng=np.random.default_rng(37))
    check_builtin_solution(_cand(), params, region)


def test_a_split_k_call_is_deterministic():
    cand = _cand()
    region = Matmul.random("nvidia", "bfloat16" if "bfloat16" in _dtypes() else "float16",
                           {"m": 256, "n": 256, "k": 8192}, EPILOGUES["bias+gelu_tanh"], rng=np.random.default_rng(38))
    params = SPLIT_SOLUTIONS[0]
    from arbiter import targets

    nv = targets.get("nvidia")
    first, second = (nv.to_host(cand.run(region, params)).copy() for _ in range(2))
    assert np.array_equal(first.view(np.uint16), second.view(np.uint16))


ROW_REGIONS = {"softmax": Softmax, "rmsnorm": RMSNorm, "layernorm": LayerNorm}
ROW_SOLUTIONS = [{"tile": list(t)} for t in triton_rows.TILES]


@pytest.mark.parametrize("params", ROW_SOLUTIONS, ids=_params_id)
@pytest.mark.parametrize("op", ROW_REGIONS)
@pytest.mark.parametrize("dims,layout", [({"rows": 129, "cols": 768}, "R"), ({"rows": 33, "cols": 1000}, "P"),
                                         ({"rows": 9, "cols": 20000}, "R"), ({"rows": 4096, "cols": 2048}, "R")],
                         ids=["768", "strided-1000", "looped-20000", "4096x2048"])
def test_every_row_solution_passes_the_gate(params, op, dims, layout):
    for dtype in ["float32"] + _dtypes():
        region = ROW_REGIONS[op].random("nvidia", dtype, dims, layout=layout, rng=np.random.default_rng(39))
        check_builtin_solution(_cand(f"triton_{op}", op), params, region)


@pytest.mark.parametrize("op", ROW_REGIONS)
def test_the_default_row_tile_passes_the_gate_at_8192_square(op):
    region = ROW_REGIONS[op].random("nvidia", _dtypes()[-1], {"rows": 8192, "cols": 8192},
                                    rng=np.random.default_rng(40))
    check_builtin_solution(_cand(f"triton_{op}", op), ROW_SOLUTIONS[0], region)
