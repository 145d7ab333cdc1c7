"""The GPU layernorms on rows that are exactly constant at a non-integer value (issue 38 item 1), CPU-runnable.

A constant row's answer is exactly the bias (exactly 0 without one): ``x - mean`` is 0 when the mean is exactly the
constant, which the float32 sum of 131.325 x 4096 misses by a few ulps unless the row is first shifted by its first
element. ``triton_layernorm``'s kernel under Triton's interpreter (``TRITON_INTERPRET=1``, in a fresh process:
``triton_interpret``), in registers and in the looped path; ``cupy_layernorm``'s passes with NumPy standing in for
CuPy. ``layernorm_rows`` (CUDA) runs only on the GPU: ``test_row_kernels.py`` / the nvidia gate tests.
"""
from __future__ import annotations

import numpy as np
import pytest

from arbiter.candidates.gpu_templates import triton_rows
from arbiter.candidates.nvidia import cupy_layernorm
from arbiter.regions import LayerNorm
from triton_interpret import INTERPRETING, interpreted_kernels, run_interpreted, torch_view

VALUE = 131.325
WIDTHS = (768, 4096)


def _rows(cols, dtype, bias, rows=5):
    rng = np.random.default_rng(cols)
    x = np.full((rows, cols), VALUE, dtype)
    x[-1] = dtype(-2.7183)  # another constant
    w = (rng.standard_normal(cols) + 2.0).astype(dtype)
    b = rng.standard_normal(cols).astype(dtype) if bias else None
    return x, w, b


def _want(x, b):
    return np.broadcast_to(np.zeros(x.shape[-1], x.dtype) if b is None else b, x.shape)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_cupy_layernorm_gives_exactly_the_bias_on_constant_rows(monkeypatch, cols, dtype, bias):
    monkeypatch.setattr(cupy_layernorm, "cupy", lambda: np)  # the same passes, on the host
    x, w, b = _rows(cols, dtype, bias)
    got = cupy_layernorm.CupyLayerNorm().run(LayerNorm(x, w, b), {})
    assert got.dtype == x.dtype and np.array_equal(got, _want(x, b)), np.abs(got - _want(x, b)).max()
    inplace = x.copy()
    got = cupy_layernorm.CupyLayerNorm().run(LayerNorm(inplace, w, b, out=inplace), {})
    assert got is inplace and np.array_equal(got, _want(x, b))


def test_cupy_layernorm_still_normalizes(monkeypatch):
    monkeypatch.setattr(cupy_layernorm, "cupy", lambda: np)
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((6, 300)) * 3 + 1000).astype(np.float32)
    w, b = rng.standard_normal(300).astype(np.float32), rng.standard_normal(300).astype(np.float32)
    got = cupy_layernorm.CupyLayerNorm().run(LayerNorm(x, w, b), {})
    xd = x.astype(np.float64)
    d = xd - xd.mean(1, keepdims=True)
    want = d / np.sqrt((d * d).mean(1, keepdims=True) + 1e-5) * w + b
    assert np.abs(got - want).max() < 1e-3


# --- the Triton kernel, under Triton's interpreter -----------------------------------------------------------------
@pytest.mark.skipif(INTERPRETING, reason="this process is the interpreted run")
def test_the_triton_kernel_under_triton_interpreter():
    run_interpreted(__file__)


@pytest.fixture(scope="module")
def interpreted():
    yield from interpreted_kernels()


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("tile", [triton_rows.TILES[0], (256, 1, 4), (1024, 4, 4)],
                         ids=["registers", "looped", "looped-rows"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_interpreted_triton_layernorm_gives_exactly_the_bias_on_constant_rows(interpreted, dtype, tile, cols, bias):
    x, w, b = _rows(cols, dtype, bias)
    region = LayerNorm(x, w, b)
    out = np.full_like(x, np.nan)
    spec, grid = triton_rows.rows_spec(region, tuple(tile), True, out)
    assert spec.constexprs["LOOPED"] is (tile[0] < cols)
    tx, ty = torch_view(x), torch_view(out)
    interpreted.rows[grid](tx, torch_view(w), torch_view(b) if b is not None else tx, ty, 1e-5,
                           **dict(zip(list(spec.signature)[5:], spec.values)))
    assert np.array_equal(out, _want(x, b)), np.abs(out - _want(x, b)).max()



# --- on the GPU: every nvidia layernorm solution (layernorm_rows, cupy_layernorm, triton_layernorm, ...) ----------
def _gpu_solutions():
    from gpu_support import gpu_available

    if not gpu_available():
        return []
    from arbiter.candidates import REGISTRY

    REGISTRY.load_builtin("nvidia")
    return [pytest.param(c, p, id=f"{c.name}{i}") for c in REGISTRY.candidates("nvidia", "layernorm")
            for i, p in enumerate(c.param_space())]


@pytest.mark.gpu
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("cols", WIDTHS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("cand,params", _gpu_solutions())
def test_gpu_layernorm_gives_exactly_the_bias_on_constant_rows(cand, params, dtype, cols, bias):
    import cupy as cp

    x, w, b = _rows(cols, dtype, bias, rows=9)
    region = LayerNorm(cp.asarray(x), cp.asarray(w), None if b is None else cp.asarray(b))
    ok = cand.applies_to(region)
    if ok is not True:
        pytest.skip(str(ok))
    got = cp.asnumpy(cand.run(region, params))
    assert np.array_equal(got, _want(x, b)), np.abs(got.astype(np.float64) - _want(x, b)).max()
