"""cupy_fft executes a cached cuFFT plan per (length, kind, dtype, batch, device) and thread, straight into
the output (the gate's, or a new one without out=), on the current stream."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import arbiter
from arbiter.candidates import REGISTRY
from arbiter.candidates.nvidia import cupy_fft
from arbiter.regions import FFT
from gpu_support import requires_gpu

pytestmark = [pytest.mark.gpu, requires_gpu]


def _cand():
    return REGISTRY.get("cupy_fft", "nvidia", "fft")


@pytest.mark.parametrize("kind,inverse,dtype", [("c2c", False, "complex64"), ("c2c", True, "complex128"),
                                                ("r2c", False, "float32"), ("r2c", False, "float64")])
@pytest.mark.parametrize("layout", ["R", "S"])
def test_a_call_without_out_matches_numpy_and_a_warm_one_makes_no_plan(kind, inverse, dtype, layout):
    import cupy as cp

    rng = np.random.default_rng(4)
    shape = (3, 5, 1000)
    host = rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if dtype.startswith("complex") else 0)
    host = host.astype(dtype)
    x = cp.asarray(host) if layout == "R" else cp.asarray(np.repeat(host, 2, axis=-1))[..., ::2]
    y = _cand().run(FFT(x, kind, inverse), {})
    plans = len(cupy_fft._local.plans)
    y2 = _cand().run(FFT(x, kind, inverse), {})
    assert len(cupy_fft._local.plans) == plans
    want = (np.fft.ifft if inverse else np.fft.fft)(host, axis=-1) if kind == "c2c" else np.fft.rfft(host, axis=-1)
    tol = 1e-4 if dtype in ("complex64", "float32") else 1e-10
    for got in (y, y2):
        assert got.flags.c_contiguous and got.shape == want.shape
        np.testing.assert_allclose(cp.asnumpy(got), want, rtol=tol, atol=tol * np.abs(want).max())
    np.testing.assert_array_equal(cp.asnumpy(x), host)  # the input is left as it was


def test_plans_are_per_thread():
    import cupy as cp

    x = cp.ones((4, 64), dtype=cp.complex64)
    _cand().run(FFT(x), {})
    mine = cupy_fft._local.plans
    seen = {}

    def other():
        _cand().run(FFT(x), {})
        seen["plans"] = cupy_fft._local.plans
        cp.cuda.Device().synchronize()

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen["plans"] is not mine and len(seen["plans"]) == 1


def test_dispatch_on_a_torch_caller_s_stream_returns_a_torch_tensor():
    torch = pytest.importorskip("torch")
    x = torch.randn(8, 4096, device="cuda", dtype=torch.complex64)
    arbiter.arbitrate("fft", FFT(x), force="cupy_fft")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        y = arbiter.run_arbitrated("fft", FFT(x))
        want = torch.fft.fft(x, dim=-1)
    torch.cuda.synchronize()
    assert isinstance(y, torch.Tensor)
    torch.testing.assert_close(y, want, rtol=1e-4, atol=1e-3)
