"""The nvidia target: its availability gate everywhere; arrays, DLPack adoption and environment on a GPU."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from arbiter import targets
from arbiter.candidates import REGISTRY
from arbiter.targets.nvidia import NvidiaTarget
from gpu_support import requires_gpu


def test_unavailable_without_cupy_gives_the_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` raise ImportError
    monkeypatch.setitem(sys.modules, "torch", None)  # (PyTorch with CUDA alone makes the target available)
    reason = NvidiaTarget().available()
    assert isinstance(reason, str) and "CuPy" in reason
    assert NvidiaTarget().environment() == {"available": reason}


def test_every_nvidia_candidate_reports_availability_or_a_reason():
    ok = targets.get("nvidia").available()
    cands = [c for op in ("matmul", "softmax", "rmsnorm") for c in REGISTRY.candidates("nvidia", op)]
    assert {c.tier.name for c in cands} == {"HAND_TUNED", "EMITTED", "SYNTHESIZED", "COMPOSED"}
    for cand in cands:
        got = cand.available()
        assert got is True or (isinstance(got, str) and got), cand
        if ok is not True:
            assert got == ok, cand  # without the target, every candidate says why


def test_composed_cupy_chains_rank_below_every_other_tier():
    """A chain of generic CuPy passes is a composed reference, never the default while a kernel passes."""
    for op in ("softmax", "rmsnorm", "layernorm", "attention", "pointwise"):
        cands = REGISTRY.candidates("nvidia", op)
        composed = REGISTRY.get(f"cupy_{op}", "nvidia", op)
        assert composed.tier.name == "COMPOSED", op
        # tier order puts it after every non-composed candidate (torch_pointwise, composed too, may follow it)
        assert cands.index(composed) > max(i for i, c in enumerate(cands) if c.tier.name != "COMPOSED"), (op, cands)
        assert any(c.tier.name in ("EMITTED", "SYNTHESIZED") for c in cands), op  # a kernel sits above it
    # Vendor library kernels stay HAND_TUNED: cuBLAS (cupy_matmul), cuFFT (cupy_fft), torch's fused ops.
    assert REGISTRY.get("cupy_matmul", "nvidia", "matmul").tier.name == "HAND_TUNED"
    assert REGISTRY.get("cupy_fft", "nvidia", "fft").tier.name == "HAND_TUNED"
    assert REGISTRY.get("torch_softmax", "nvidia", "softmax").tier.name == "HAND_TUNED"


def test_owns_only_device_arrays():
    t = NvidiaTarget()
    assert not t.owns(np.zeros(3))


@pytest.mark.gpu
@requires_gpu
def test_available_and_environment_fields():
    t = targets.get("nvidia")
    assert t.available() is True
    env = t.environment()
    for field in ("device", "compute_capability", "sm_count", "driver", "runtime", "cublas", "nvrtc", "cupy"):
        assert env[field] and "unknown" not in env[field], field
    assert int(env["sm_count"]) > 0


@pytest.mark.gpu
@requires_gpu
def test_cupy_arrays_select_the_target_and_round_trip():
    import cupy as cp

    t = targets.get("nvidia")
    x = cp.arange(6, dtype=cp.float32).reshape(2, 3)
    name, native, back = targets.adopt(x)
    assert (name, back) == ("nvidia", None) and native is x
    dtypes = ["float32", "float16"] + (["bfloat16"] if t.bfloat16() is not None else [])
    host = np.random.default_rng(0).standard_normal((5, 7))
    for dtype in dtypes:
        dev = t.from_host(host, dtype, order="F")
        assert dev.flags.f_contiguous and str(dev.dtype) == dtype
        back_host = np.asarray(t.to_host(dev), dtype=np.float64)
        np.testing.assert_allclose(back_host, host, rtol=1e-2, atol=1e-2)
        full = t.full((3, 4), np.nan, dtype)
        t.synchronize()
        assert np.isnan(np.asarray(t.to_host(full), dtype=np.float64)).all()


@pytest.mark.gpu
@requires_gpu
def test_torch_cuda_tensors_are_adopted_zero_copy_and_results_come_back_as_torch():
    torch = pytest.importorskip("torch")
    import arbiter
    from arbiter.regions import Matmul

    a = torch.randn(33, 17, device="cuda")
    b = torch.randn(17, 9, device="cuda")
    name, native, _ = targets.adopt(a)
    assert name == "nvidia" and native is a  # kept as it is: CuPy views only when a CuPy kernel runs
    from arbiter.targets.nvidia import cupy_view

    assert cupy_view(a).data.ptr == a.data_ptr()  # a view, not a copy
    result = arbiter.run_arbitrated("matmul", Matmul(a, b))
    assert isinstance(result, torch.Tensor) and result.is_cuda
    torch.testing.assert_close(result, a @ b, rtol=1e-4, atol=1e-4)
    assert targets.adopt(torch.zeros(2))[0] == "cpu"  # host tensors stay on the cpu target


@pytest.mark.gpu
@requires_gpu
def test_torch_views_keep_strides_offsets_and_dtypes():
    """The pointer-built CuPy view of a torch tensor (no DLPack) sees exactly the tensor's elements."""
    torch = pytest.importorskip("torch")
    import cupy as cp

    from arbiter.targets.nvidia import cupy_view

    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        base = torch.randn(7, 10, device="cuda").to(dtype)
        for t in (base, base[1:, ::2].T, base[3:5], base[:, 3:4].expand(7, 5), base[2:2]):
            view = cupy_view(t)
            assert tuple(view.shape) == tuple(t.shape)
            got = cp.asnumpy(view.astype(cp.float64))
            np.testing.assert_array_equal(got, t.double().cpu().numpy())
