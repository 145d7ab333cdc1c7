"""Every NVIDIA solution of the newer op kinds (layernorm, attention, fft, gated, pointwise) passes the
F4 gate at odd shapes, per dtype; candidates that do not apply say why.

Shapes put tails everywhere: rows and columns that are no multiple of any vector width or warp, query
and key lengths that differ and are no multiple of the 32-key tile, head sizes that are no multiple of
32, FFT lengths that are and are not powers of two (with rows long enough for the multi-pass path),
GEMM sizes that are no multiple of any tile, pointwise sizes that leave a tail past the last vector.
"""
from __future__ import annotations

import numpy as np
import pytest

from arbiter import targets
from arbiter.candidates import REGISTRY
from arbiter.regions import FFT, Attention, Gated, LayerNorm, Pointwise
from gpu_support import check_builtin_solution, gpu_available, nvidia_solutions, requires_gpu

pytestmark = [pytest.mark.gpu, requires_gpu]

ROW_SHAPES = [(1, 1), (7, 129), (33, 1000), (5, 2047), (3, 4097), (2, 16385)]
ATTN_SHAPES = [  # (batch, heads, q, k, d)
    (1, 1, 1, 1, 8), (2, 3, 17, 45, 64), (1, 2, 33, 33, 80), (1, 1, 100, 37, 128), (2, 1, 5, 300, 40),
    (1, 1, 70, 70, 256),
]
FFT_CASES = [  # (batch, n, kind, inverse)
    (3, 1, "c2c", False), (5, 8, "c2c", False), (3, 1024, "c2c", True), (2, 4096, "c2c", False),
    (2, 1000, "c2c", False), (7, 64, "r2c", False), (3, 2048, "r2c", False), (2, 8192, "r2c", False),
    (5, 256, "r2c", True), (3, 16384, "r2c", True), (4, 999, "r2c", True), (3, 97, "r2c", False),
]
GATED_SHAPES = [(1, 1, 1), (33, 17, 65), (129, 70, 257), (7, 300, 31)]
CHAINS = ["mul[t]>add[s]>relu>tanh", "sigmoid>mul[s]>sub[t]>abs", "silu>max[t]>min[s]>square",
          "gelu_tanh>neg>exp", "copy"]
POINTWISE_SIZES = [1, 7, 1001, 65537]


def _dtypes():
    if not gpu_available():
        return ["float32"]
    bf16 = targets.get("nvidia").bfloat16() is not None
    return ["float32", "float16"] + (["bfloat16"] if bf16 else [])


def _check(cand, params, region):
    check_builtin_solution(cand, params, region)


def _ids(shape):
    return "x".join(map(str, shape))


@pytest.mark.parametrize("dtype", _dtypes())
@pytest.mark.parametrize("bias", ["1", "0"])
@pytest.mark.parametrize("shape", ROW_SHAPES, ids=_ids)
@pytest.mark.parametrize("cand,params", nvidia_solutions("layernorm"))
def test_layernorm_solution_passes_the_gate(cand, params, shape, bias, dtype):
    rows, cols = shape
    _check(cand, params, LayerNorm.random("nvidia", dtype, {"rows": rows, "cols": cols}, {"bias": bias},
                                          rng=np.random.default_rng(20), eps=1e-3))


@pytest.mark.parametrize("cand,params", nvidia_solutions("layernorm"))
def test_layernorm_strided_rows_pass_or_are_refused(cand, params):
    _check(cand, params, LayerNorm.random("nvidia", "float32", {"rows": 19, "cols": 300}, layout="S",
                                          rng=np.random.default_rng(21)))


@pytest.mark.parametrize("dtype", _dtypes())
@pytest.mark.parametrize("causal", ["0", "1"])
@pytest.mark.parametrize("shape", ATTN_SHAPES, ids=_ids)
@pytest.mark.parametrize("cand,params", nvidia_solutions("attention"))
def test_attention_solution_passes_the_gate(cand, params, shape, causal, dtype):
    dims = dict(zip(("batch", "heads", "q", "k", "d"), shape))
    _check(cand, params, Attention.random("nvidia", dtype, dims, {"causal": causal},
                                          rng=np.random.default_rng(22), scale=0.3))


@pytest.mark.parametrize("layout", ["SRS", "CCR"])
@pytest.mark.parametrize("cand,params", nvidia_solutions("attention"))
def test_attention_other_layouts_pass_or_are_refused(cand, params, layout):
    dims = {"batch": 2, "heads": 2, "q": 19, "k": 41, "d": 48}
    _check(cand, params, Attention.random("nvidia", "float32", dims, {"causal": "1"}, layout,
                                          rng=np.random.default_rng(23)))


@pytest.mark.parametrize("precision", ["single", "double"])
@pytest.mark.parametrize("case", FFT_CASES, ids=lambda c: f"{c[0]}x{c[1]}-{c[2]}{'-inv' if c[3] else ''}")
@pytest.mark.parametrize("cand,params", nvidia_solutions("fft"))
def test_fft_solution_passes_the_gate(cand, params, case, precision):
    batch, n, kind, inverse = case
    dtype = "complex64" if precision == "single" else "complex128"  # mapped to float32/64 for r2c
    _check(cand, params, FFT.random("nvidia", dtype, {"batch": batch, "n": n},
                                    {"kind": kind, "inverse": "1" if inverse else "0"},
                                    rng=np.random.default_rng(24)))


@pytest.mark.parametrize("dtype", _dtypes())
@pytest.mark.parametrize("shape", GATED_SHAPES, ids=_ids)
@pytest.mark.parametrize("cand,params", nvidia_solutions("gated"))
def test_gated_solution_passes_the_gate(cand, params, shape, dtype):
    m, n, k = shape
    _check(cand, params, Gated.random("nvidia", dtype, {"m": m, "n": n, "k": k}, rng=np.random.default_rng(25)))


@pytest.mark.parametrize("cand,params", nvidia_solutions("gated"))
def test_gated_strided_operands_pass_or_are_refused(cand, params):
    _check(cand, params, Gated.random("nvidia", "float32", {"m": 21, "n": 35, "k": 50}, layout="SRC",
                                      rng=np.random.default_rng(26)))


@pytest.mark.parametrize("dtype", _dtypes())
@pytest.mark.parametrize("size", POINTWISE_SIZES)
@pytest.mark.parametrize("chain", CHAINS)
@pytest.mark.parametrize("cand,params", nvidia_solutions("pointwise"))
def test_pointwise_solution_passes_the_gate(cand, params, chain, size, dtype):
    _check(cand, params, Pointwise.random("nvidia", dtype, {"size": size}, {"chain": chain},
                                          rng=np.random.default_rng(27)))


@pytest.mark.parametrize("cand,params", nvidia_solutions("pointwise"))
def test_pointwise_misaligned_and_strided_pass_or_are_refused(cand, params):
    cp = pytest.importorskip("cupy")
    rng = np.random.default_rng(28)
    x = cp.asarray(rng.standard_normal(1003).astype(np.float16))[1:]  # 2-byte offset: no 16-byte vectors
    t = cp.asarray(rng.standard_normal(2004).astype(np.float16))[::2][:1002]  # strided
    _check(cand, params, Pointwise(x, [("add", 0.5), ("mul", cp.ascontiguousarray(x)), ("tanh",)]))
    _check(cand, params, Pointwise(x, [("mul", t), ("relu",)]))


def test_every_new_op_has_two_tiers_on_nvidia():
    for op in ("layernorm", "attention", "fft", "gated", "pointwise"):
        tiers = {c.tier for c in REGISTRY.candidates("nvidia", op) if c.available() is True}
        assert len(tiers) >= 2, f"{op}: tiers {tiers}"


def test_fused_attention_never_allocates_the_score_matrix():
    cp = pytest.importorskip("cupy")
    cand = REGISTRY.get("flash_attention", "nvidia", "attention")
    region = Attention.random("nvidia", "float16", {"batch": 1, "heads": 1, "q": 4096, "k": 4096, "d": 64},
                              rng=np.random.default_rng(29))
    out = region.alloc_out()
    pool = cp.get_default_memory_pool()
    cand.run(region.with_out(out), cand.param_space()[0])  # compile and warm up
    cp.cuda.Device().synchronize()
    before = pool.total_bytes()
    cand.run(region.with_out(out), cand.param_space()[0])
    cp.cuda.Device().synchronize()
    scores = 4096 * 4096 * 2
    assert pool.total_bytes() - before < scores // 64, "the fused kernel allocated device memory"
    composed = REGISTRY.get("cupy_attention", "nvidia", "attention")
    pool.free_all_blocks()
    before = pool.total_bytes()
    composed.run(region.with_out(out), {})
    cp.cuda.Device().synchronize()
    assert pool.total_bytes() - before >= scores  # the measure can see a materialised score matrix
