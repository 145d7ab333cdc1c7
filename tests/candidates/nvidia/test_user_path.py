"""The path a user runs on the GPU: unpoisoned outputs, torch callers served natively, bound handles,
the three timing modes, and the default pick on a fresh key."""
from __future__ import annotations

import numpy as np
import pytest

import arbiter
from arbiter.regions import RMSNorm, Softmax
from arbiter.timing import MODES, measure
from gpu_support import requires_gpu

pytestmark = [pytest.mark.gpu, requires_gpu]


def test_a_dispatched_output_is_plain_empty_not_a_nan_fill():
    import cupy as cp

    region = Softmax.random("nvidia", "float32", {"rows": 64, "cols": 1000}, rng=np.random.default_rng(1))
    pool = cp.get_default_memory_pool()
    marker = cp.full(region.output_shape(), 7.0, dtype=cp.float32)
    ptr = marker.data.ptr
    del marker  # its block goes back to the pool, still holding 7.0
    out = region.alloc_out()
    assert out.data.ptr == ptr, "the pool did not hand the same block back; the check below needs it"
    cp.cuda.Device().synchronize()
    assert float(out[0, 0]) == 7.0  # no fill pass ran over the new output
    assert bool(cp.isnan(region.poisoned_out()).all())  # the gate's buffer is poisoned
    pool.free_all_blocks()


def test_the_default_pick_on_a_fresh_key_is_never_a_composed_chain():
    for op, region in [("softmax", Softmax.random("nvidia", "float16", {"rows": 300, "cols": 777})),
                       ("rmsnorm", RMSNorm.random("nvidia", "bfloat16", {"rows": 300, "cols": 1024}))]:
        arbiter.run_arbitrated(op, region)
        row = next(r for r in arbiter.stats() if r["key"] == region.key.id)
        assert row["tier"] != "COMPOSED", row


@pytest.mark.parametrize("force", ["torch_softmax", "softmax_block"])
def test_a_torch_caller_gets_a_torch_tensor_from_torch_memory(force):
    torch = pytest.importorskip("torch")
    x = torch.randn(129, 1000, device="cuda", dtype=torch.float16)
    region = Softmax(x)
    arbiter.arbitrate("softmax", region, force=force)
    before = torch.cuda.memory_allocated()
    y = arbiter.run_arbitrated("softmax", Softmax(x))
    assert isinstance(y, torch.Tensor) and y.is_cuda and y.dtype == torch.float16
    assert torch.cuda.memory_allocated() >= before + y.numel() * 2  # torch's caching allocator holds it
    torch.testing.assert_close(y.float(), torch.softmax(x.float(), -1), rtol=2e-3, atol=2e-3)


def test_a_cupy_kernel_for_a_torch_caller_runs_on_torch_s_current_stream():
    torch = pytest.importorskip("torch")
    side = torch.cuda.Stream()
    w = torch.randn(4096, device="cuda")
    arbiter.arbitrate("rmsnorm", RMSNorm(torch.randn(8, 4096, device="cuda"), w), force="rmsnorm_rows")
    with torch.cuda.stream(side):
        x = torch.randn(2048, 4096, device="cuda")
        for _ in range(20):  # keep the side stream busy: a kernel on another stream would read x early
            x = x * 1.0001 + 0.0001
        y = arbiter.run_arbitrated("rmsnorm", RMSNorm(x, w))
        want = torch.nn.functional.rms_norm(x, (4096,), w, 1e-6)
    side.synchronize()
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5)


def test_bound_handle_on_the_gpu_serves_the_emitted_row_kernel():
    import cupy as cp

    region = RMSNorm.random("nvidia", "float32", {"rows": 256, "cols": 512}, rng=np.random.default_rng(5))
    arbiter.arbitrate("rmsnorm", region, force="rmsnorm_rows")
    f = arbiter.bind("rmsnorm", region.x, region.weight, eps=region.eps)
    x2 = cp.asarray(np.random.default_rng(6).standard_normal((256, 512)), dtype=cp.float32)
    got = f(x2, region.weight)
    want = arbiter.run_arbitrated("rmsnorm", RMSNorm(x2, region.weight, eps=region.eps))
    cp.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    with pytest.raises(arbiter.RegionError, match="x: device|x: strides|x: shape"):
        f(x2[:, :256], region.weight)


@pytest.mark.parametrize("mode", MODES)
def test_every_timing_mode_on_the_gpu(mode):
    cand = arbiter.candidates.REGISTRY.get("softmax_block", "nvidia", "softmax")
    region = Softmax.random("nvidia", "float32", {"rows": 1024, "cols": 1024})
    m = measure(cand, cand.param_space()[0], region, mode=mode, min_reps=5, max_reps=20, time_cap_s=0.5)
    assert m.mode == mode and 0 < m.median_s < 1e-2


def test_torch_softmax_for_a_torch_caller_costs_what_torch_does():
    """The torch vendor candidate on a torch caller's tensors adds no pass: timed with the same engine,
    it stays within 10% of torch.softmax called directly (events around one call, L2 flushed)."""
    torch = pytest.importorskip("torch")
    from arbiter.timing import measure_calls

    x = torch.randn(512, 50257, device="cuda", dtype=torch.float16)
    region = Softmax(x)
    cand = arbiter.candidates.REGISTRY.get("torch_softmax", "nvidia", "softmax")
    ours = measure(cand, {}, region, mode="device", min_reps=20, max_reps=100)
    bare = measure_calls([lambda: torch.softmax(x, -1)], "nvidia", mode="device", min_reps=20, max_reps=100)
    assert ours.median_s < 1.10 * bare.median_s, (ours, bare)
    assert arbiter.candidates.serve(cand, {}, region).data_ptr() != x.data_ptr()
