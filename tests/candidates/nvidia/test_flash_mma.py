"""The tensor-core flash attention (``flash_mma``) passes the F4 gate at real shapes, per dtype, head size and
mask, and declines what it does not serve with a reason.

Shapes: q_len != k_len both ways (more keys than queries; more queries than keys, where causal rows past
k_len see every key), lengths that are no multiple of any tile (16-row warps, 32/64-key tiles, 64/128-row
blocks), a large causal shape whose blocks end at different keys, and every solution (block shape) of the
candidate. Strided and misaligned operands take the kernel's element-load path; a permuted
[batch, seq, heads, d] view (unit-stride rows, 16-byte aligned) keeps the cp.async path.
"""
from __future__ import annotations

import numpy as np
import pytest

from arbiter import targets
from arbiter.candidates import REGISTRY
from arbiter.oracles.budgets import budget_for
from arbiter.regions import Attention
from arbiter.verify import check_output
from gpu_support import check_builtin_solution, gpu_available, requires_gpu

SHAPES = [  # (batch, heads, q, k, d), causal
    ((1, 2, 100, 300, 64), False),
    ((1, 2, 100, 300, 128), True),
    ((2, 4, 1024, 1024, 128), True),
    ((1, 1, 257, 129, 64), True),
    ((2, 3, 333, 77, 128), False),
    ((1, 3, 1, 1000, 64), True),
]


def _cand():
    return REGISTRY.get("flash_mma", "nvidia", "attention")


def _dtypes():
    if not gpu_available():
        return ["float16"]
    return ["float16"] + (["bfloat16"] if targets.get("nvidia").bfloat16() is not None else [])


def _solutions():
    return [pytest.param(p, id="bq{bq}-bk{bk}".format(**p)) for p in _cand().param_space()]


def _dims(shape):
    return dict(zip(("batch", "heads", "q", "k", "d"), shape))


def _region(shape, causal, dtype, layout="RRR", seed=40):
    return Attention.random("nvidia", dtype, _dims(shape), {"causal": "1" if causal else "0"}, layout,
                            rng=np.random.default_rng(seed), scale=0.11)


# --- what it declines (no GPU needed: applies_to reads the region's dtype and dims) ---------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float32_and_float64_are_refused_with_a_reason(dtype):
    region = Attention.random("cpu", dtype, _dims((1, 2, 5, 7, 64)), rng=np.random.default_rng(41))
    reason = _cand().applies_to(region)
    assert isinstance(reason, str)
    assert reason.startswith(f"dtype {dtype} is not one of float16, bfloat16") and "flash_attention" in reason


@pytest.mark.parametrize("d", [32, 80, 256])
def test_other_head_sizes_are_refused_with_a_reason(d):
    region = Attention.random("cpu", "float16", _dims((1, 1, 5, 7, d)), rng=np.random.default_rng(42))
    reason = _cand().applies_to(region)
    assert isinstance(reason, str) and reason.startswith(f"head size {d} is not 64 or 128")


@pytest.mark.parametrize("d", [64, 128])
def test_half_types_at_64_and_128_apply(d):
    region = Attention.random("cpu", "float16", _dims((1, 1, 5, 7, d)), rng=np.random.default_rng(43))
    assert _cand().applies_to(region) is True


def test_it_ranks_ahead_of_the_cuda_core_kernel_and_defaults_to_64_by_64():
    names = [c.name for c in REGISTRY.candidates("nvidia", "attention")]
    assert names.index("flash_mma") < names.index("flash_attention")
    assert _cand().param_space()[0] == {"bq": 64, "bk": 64}


# --- on the GPU: the gate ----------------------------------------------------------------------------------
@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("dtype", _dtypes())
@pytest.mark.parametrize("shape,causal", SHAPES, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple)
                         else ("causal" if v else "full"))
@pytest.mark.parametrize("params", _solutions())
def test_flash_mma_passes_the_gate(params, shape, causal, dtype):
    region = _region(shape, causal, dtype)
    assert _cand().applies_to(region) is True
    check_builtin_solution(_cand(), params, region)


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("layout", ["SRS", "CCR"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_strided_and_column_major_operands_pass_the_gate(layout, causal):
    # every-other-element and Fortran-ordered operands: the STRIDED kernel (the gate draws its probes alike)
    region = _region((2, 2, 67, 45, 64), causal, "float16", layout, seed=44)
    check_builtin_solution(_cand(), _cand().param_space()[0], region)


def _checked(region, params):
    """The candidate's output at ``region`` judged by the gate's own comparison with the float64 oracle."""
    out = targets.get("nvidia").full(region.output_shape(), np.nan, region.dtype)
    y = _cand().run(region.with_out(out), params)
    targets.get("nvidia").synchronize()
    assert y is out
    reason, _, _ = check_output(region, y, budget_for("attention", region.dtype), np.random.default_rng(0), full=True)
    return reason


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("dtype", _dtypes())
def test_a_permuted_heads_view_takes_the_fast_path_and_is_right(dtype):
    from arbiter.candidates.nvidia.flash_mma import rows16
    from arbiter.regions import random_operand

    rng = np.random.default_rng(45)
    b, h, d = 2, 3, 128
    # [batch, seq, heads, d] as a projection writes it, seen as [batch, heads, seq, d]: rows 16-byte aligned
    q, k, v = (random_operand("nvidia", (b, s, h, d), dtype, "R", rng).swapaxes(1, 2) for s in (300, 170, 170))
    assert not q.flags.c_contiguous and rows16(q) and rows16(k) and rows16(v)
    for causal in (False, True):
        assert _checked(Attention(q, k, v, causal=causal), _cand().param_space()[0]) == ""


@pytest.mark.gpu
@requires_gpu
def test_misaligned_contiguous_operands_take_the_element_path_and_are_right():
    cp = pytest.importorskip("cupy")
    from arbiter.candidates.nvidia.flash_mma import rows16

    rng = np.random.default_rng(46)
    shape = (1, 2, 77, 64)
    n = int(np.prod(shape))
    flat = cp.asarray(rng.standard_normal(3 * n + 1).astype(np.float16))
    q, k, v = (flat[1 + i * n: 1 + (i + 1) * n].reshape(shape) for i in range(3))  # 2 bytes past 16-byte alignment
    assert q.flags.c_contiguous and not rows16(q)
    assert _checked(Attention(q, k, v, causal=True), _cand().param_space()[1]) == ""
