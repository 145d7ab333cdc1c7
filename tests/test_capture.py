"""CUDA-graph capture of arbitrated calls (issue 19 item 1): a warm sequence is recorded once and replayed
with new input data; a key first seen during a capture is refused with the key named."""
import numpy as np
import pytest

import arbiter
from arbiter import dispatch, targets
from arbiter.regions import Matmul, RMSNorm, Softmax


def block(x, w, wt, b):
    """RMSNorm -> matmul with fused bias + GELU -> softmax, all through run_arbitrated."""
    ra = arbiter.run_arbitrated
    h = ra("rmsnorm", RMSNorm(x, w, eps=1e-6))
    h = ra("matmul", Matmul(h, wt, bias=b, activation="gelu"))
    return ra("softmax", Softmax(h, -1))


def test_a_miss_while_capturing_names_the_key_and_a_warm_key_still_serves(monkeypatch):
    """The dispatch rule, on the CPU target with its capture state forced on."""
    rng = np.random.default_rng(0)
    warm = Softmax(rng.standard_normal((5, 7)).astype(np.float32), -1)
    arbiter.run_arbitrated("softmax", warm)  # decided before "capture"
    monkeypatch.setattr(targets.get("cpu"), "capturing", lambda: True)
    arbiter.run_arbitrated("softmax", Softmax(rng.standard_normal((5, 7)).astype(np.float32), -1))
    fresh = Softmax(rng.standard_normal((3, 1000)).astype(np.float32), -1)
    with pytest.raises(arbiter.CaptureMissError, match=f"^{fresh.key.id}: not decided before CUDA-graph capture"):
        arbiter.run_arbitrated("softmax", fresh)


def test_capture_without_a_cuda_torch_says_what_it_needs():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(RuntimeError, match="^capture: PyTorch .* sees no CUDA device"):
        arbiter.capture(lambda: None)
    with pytest.raises(ValueError, match="^warmup: 0"):
        arbiter.capture(lambda: None, warmup=0)


def _operands(lib, dtype, seed):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    dt = getattr(torch, dtype)
    t = [torch.randn(*s, generator=g, device="cuda").to(dt) for s in ((96, 256), (256,), (256, 384), (384,))]
    t[1] += 1
    t[2] *= 256 ** -0.5
    if lib == "cupy":
        import cupy as cp

        return [cp.from_dlpack(v) for v in t]
    return t


@pytest.mark.gpu
@pytest.mark.parametrize("lib", ["torch", "cupy"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_captured_block_replays_new_inputs_as_eager_dispatch_computes_them(lib, dtype):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or (lib == "cupy" and targets.get("nvidia").cupy_available() is not True):
        pytest.skip(f"needs CUDA torch{' and CuPy' if lib == 'cupy' else ''}")
    dispatch.reset()
    x, w, wt, b = _operands(lib, dtype, 0)
    step = arbiter.capture(block, x, w, wt, b)
    for seed in (1, 2):
        fresh = _operands(lib, dtype, seed)[0]
        x[...] = fresh
        got = step.replay()
        torch.cuda.synchronize()
        want = block(fresh, w, wt, b)  # eager dispatch of the same keys
        torch.testing.assert_close(torch.as_tensor(got, device="cuda").float(),
                                   torch.as_tensor(want, device="cuda").float(), rtol=2e-3, atol=2e-3)
    hits = {r["op"]: r["hits"] for r in arbiter.stats()}
    # the first warm-up misses; the second, the capturing call and the two eager checks hit; replays run no Python
    assert hits == {"rmsnorm": 4, "matmul": 4, "softmax": 4}, hits


@pytest.mark.gpu
def test_a_key_first_seen_inside_torch_cuda_graph_is_refused_by_name():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    x = torch.randn(17, 333, device="cuda")
    region = Softmax(x, -1)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(arbiter.CaptureMissError, match=region.key.id), torch.cuda.graph(graph):
        arbiter.run_arbitrated("softmax", Softmax(x, -1))
