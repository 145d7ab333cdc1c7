"""CUDA-graph capture of arbitrated calls (issue 19 item 1): a warm sequence is recorded once and replayed
with new input data; a key first seen during a capture is refused with the key named."""
import numpy as np
import pytest

import arbiter
from arbiter import Candidate, Tier, dispatch, targets
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


class _Softmax(Candidate):
    """A CPU softmax that counts its calls; ``capturable`` as its name says."""

    target, op = "cpu", "softmax"

    def __init__(self, name, tier, capturable):
        self.name, self.tier, self.capturable, self.calls = name, tier, capturable, 0

    def run(self, region, params):
        self.calls += 1
        x = region.x - region.x.max(axis=-1, keepdims=True)
        e = np.exp(x)
        out = region.alloc_out()
        out[...] = e / e.sum(axis=-1, keepdims=True)
        return out


def test_under_capture_a_winner_that_cannot_be_captured_hands_over_to_its_capturable_stand_in(
        monkeypatch, only_candidates):
    """Issue 26 item 1: the eager winner (HAND_TUNED, not capturable) serves outside capture; while capturing,
    the best capturable solution of the key serves in its place, prepared outside the capture and listed as
    a stand-in; never a crash."""
    vendor, kernel = _Softmax("vendor_blas", Tier.HAND_TUNED, False), _Softmax("emitted", Tier.EMITTED, True)
    only_candidates("cpu", "softmax", vendor, kernel)
    monkeypatch.setattr(dispatch, "_may_capture", lambda region: True)  # the CPU target stands in for a GPU
    x = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
    want = arbiter.run_arbitrated("softmax", Softmax(x, -1))
    assert (vendor.calls, kernel.calls) == (1, 0) or vendor.calls >= 1  # the gate may have run both
    v0, k0 = vendor.calls, kernel.calls
    monkeypatch.setattr(targets.get("cpu"), "capturing", lambda: True)
    got = arbiter.run_arbitrated("softmax", Softmax(x, -1))
    assert (vendor.calls, kernel.calls) == (v0, k0 + 1)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    rows = {r["solution"]: r for r in arbiter.stats()}
    assert rows["emitted"]["capture_standin_for"] == "vendor_blas" and rows["emitted"]["hits"] == 1
    assert rows["vendor_blas"]["installed"] and not rows["emitted"]["installed"]
    monkeypatch.setattr(targets.get("cpu"), "capturing", lambda: False)
    arbiter.run_arbitrated("softmax", Softmax(x, -1))
    assert (vendor.calls, kernel.calls) == (v0 + 1, k0 + 1)  # eager again: the winner


def test_without_a_capturable_solution_capture_names_the_key_and_the_winner(monkeypatch, only_candidates):
    vendor = _Softmax("vendor_blas", Tier.HAND_TUNED, False)
    only_candidates("cpu", "softmax", vendor)
    monkeypatch.setattr(dispatch, "_may_capture", lambda region: True)
    region = Softmax(np.ones((3, 4), np.float32) + np.arange(4, dtype=np.float32), -1)
    arbiter.run_arbitrated("softmax", region)
    monkeypatch.setattr(targets.get("cpu"), "capturing", lambda: True)
    with pytest.raises(arbiter.CaptureMissError, match=f"^{region.key.id}: its winner vendor_blas cannot be "
                                                        "captured and no capturable solution"):
        arbiter.run_arbitrated("softmax", region)


def test_the_capturable_claim_is_part_of_every_candidate():
    from arbiter.candidates import REGISTRY

    REGISTRY.load_builtin("nvidia")
    claims = {c.name: c.capturable for c in REGISTRY.all() if c.target == "nvidia"}
    assert claims.get("cupy_gated") is False and claims.get("cupy_matmul") is False
    assert claims.get("torch_gated") is True and claims.get("torch_matmul") is True


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
    hits: dict = {}
    for r in arbiter.stats():  # a winner that cannot be captured and its capture stand-in share the op's hits
        hits[r["op"]] = hits.get(r["op"], 0) + r["hits"]
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


# --- every built-in's capturable claim, checked on a GPU (issue 26 item 1) ---------------------------------
# Per op kind, the regions a candidate is tried on: the first one it applies to is captured.
CLAIM_REGIONS = {
    "matmul": [("float16", {"m": 96, "n": 128, "k": 64}, {}), ("float16", {"m": 96, "n": 128, "k": 64},
                                                                  {"bias": "1", "activation": "relu"}),
               ("float16", {"m": 96, "n": 128, "k": 64}, {"residual": "1"}),
               ("float32", {"m": 128, "n": 1, "k": 256}, {}), ("float32", {"m": 96, "n": 128, "k": 64}, {})],
    "softmax": [("float16", {"rows": 64, "cols": 512}, {}), ("float32", {"rows": 64, "cols": 512}, {})],
    "rmsnorm": [("float16", {"rows": 64, "cols": 512}, {}), ("float32", {"rows": 64, "cols": 512}, {})],
    "layernorm": [("float16", {"rows": 64, "cols": 512}, {}), ("float32", {"rows": 64, "cols": 512}, {})],
    "attention": [("float16", {"batch": 1, "heads": 4, "q": 128, "k": 128, "d": 64}, {"causal": "1"}),
                  ("float32", {"batch": 1, "heads": 4, "q": 128, "k": 128, "d": 64}, {"causal": "1"})],
    "gated": [("float16", {"m": 64, "n": 128, "k": 256}, {}), ("float32", {"m": 64, "n": 128, "k": 256}, {})],
    "fft": [("complex64", {"batch": 16, "n": 256}, {"kind": "c2c"}), ("float32", {"batch": 16, "n": 256},
                                                                        {"kind": "r2c"})],
    "pointwise": [("float16", {"size": 4096}, {"chain": "mul[t]>add[s]>relu"}),
                  ("float32", {"size": 4096}, {"chain": "mul[t]>add[s]>relu"})],
}


def _claim_region(cand, op):
    from arbiter.ops import op_kind

    kind = op_kind(op)
    for dtype, dims, attrs in CLAIM_REGIONS[op]:
        try:
            region = kind.region_type.random("nvidia", dtype, dims, attrs, rng=np.random.default_rng(0))
        except Exception:  # a dimension name this region type spells otherwise: the next form
            continue
        if cand.applies_to(region) is True:
            return region
    return None


def _refill(region, seed):
    """New data into the region's operands, in place (what a replay reads)."""
    fresh = region.fresh(np.random.default_rng(seed))
    for name, array in region.operands().items():
        new = fresh.operands()[name]
        if hasattr(array, "shape") and array.shape == new.shape:
            array[...] = new


@pytest.mark.gpu
@pytest.mark.parametrize("op", sorted(CLAIM_REGIONS))
def test_every_builtin_keeps_its_capturable_claim(op):
    """Each built-in nvidia candidate of ``op`` (default parameters, CuPy caller) is recorded into a CUDA graph
    once: one that claims ``capturable`` must record and replay new data as its eager call computes it; one
    that claims otherwise is tried too, and whether its capture failed is reported."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or targets.get("nvidia").cupy_available() is not True:
        pytest.skip("needs CUDA torch and CuPy")
    import os

    from arbiter.candidates import REGISTRY, serve
    from arbiter.graphs import _cupy_follows_torch

    ran, wrong = [], []
    # Those that claim capturable first: a refused capture is tried last, so it cannot disturb the others.
    for cand in sorted(REGISTRY.candidates("nvidia", op), key=lambda c: not c.capturable):
        if cand.available() is not True:
            ran.append(f"{cand.name}: unavailable")
            continue
        region = _claim_region(cand, op)
        if region is None:
            ran.append(f"{cand.name}: applies to none of the test regions")
            continue
        params = cand.param_space()[0]

        def call(cand=cand, region=region, params=params):
            return serve(cand, params, region)

        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side), _cupy_follows_torch(torch, allocate=False):
                call()
                call()
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph), _cupy_follows_torch(torch, allocate=True):
                out = call()
            _refill(region, 1)
            graph.replay()
            torch.cuda.synchronize()
            want = call()
            torch.cuda.synchronize()
            same = np.allclose(np.asarray(targets.get("nvidia").to_host(out), dtype=np.complex128),
                               np.asarray(targets.get("nvidia").to_host(want), dtype=np.complex128),
                               rtol=1e-2, atol=1e-2, equal_nan=True)
            captured = f"captured, replay {'matches' if same else 'DIFFERS from'} eager"
            if not same and cand.capturable:
                wrong.append(f"{cand.name}: {captured}")
        except Exception as exc:  # the capture (or replay) refused: a claim of capturable is then wrong
            torch.cuda.synchronize()
            captured = f"capture failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
            if cand.capturable:
                wrong.append(f"{cand.name}: {captured}")
        ran.append(f"{cand.name} [{region.key.id}] claims {'capturable' if cand.capturable else 'NOT capturable'}"
                   f": {captured}")
    report = os.environ.get("ARBITER_CAPTURE_REPORT")
    if report:
        with open(report, "a") as f:
            f.write("\n".join(f"{op}: {line}" for line in ran) + "\n")
    print("\n".join(ran))
    assert not wrong, "; ".join(wrong)


def test_a_miss_under_policy_tune_is_timed_in_the_mode_its_caller_runs():
    """Issue 26 item 4: eager GPU callers are timed back to back (stream: host work counts), a sequence being
    recorded by arbiter.capture by device time, the CPU by device time (its modes coincide)."""
    from types import SimpleNamespace

    gpu, cpu = SimpleNamespace(target="nvidia"), SimpleNamespace(target="cpu")
    assert (dispatch.tune_mode(gpu), dispatch.tune_mode(cpu)) == ("stream", "device")
    with dispatch.deciding_for_capture():
        assert dispatch.tune_mode(gpu) == "device"
    assert dispatch.tune_mode(gpu) == "stream"
