"""Torch callers on CUDA are audited (issue 38 item 7): a torch-native candidate wrong at one width inside a bucket
its gate probed elsewhere is demoted on a torch caller's first call at that width (``Route.run_torch`` behind the
first-call check), and under a sampling rate on a later one; the oracle runs in float64 on cloned tensors."""
from __future__ import annotations

import pytest

import arbiter
from arbiter import audit, dispatch
from arbiter.candidates import REGISTRY
from arbiter.candidates.nvidia._torch import TorchCandidate, deliver, tensor
from arbiter.region_memo import Memoized
from gpu_support import requires_gpu

pytestmark = [pytest.mark.gpu, requires_gpu]


class TorchSoftmaxWrongAt777(TorchCandidate):
    name, op, priority = "torch_softmax_wrong_at_777", "softmax", 1

    def run(self, region, params):
        import torch

        y = torch.softmax(tensor(region, "x"), region.axis)
        if region.x.shape[-1] == 777:
            y = y * 1.01
        return deliver(region, y)


def _softmax(x):
    import torch

    import arbiter.torch  # noqa: F401 (torch.ops.arbiter)

    return torch.ops.arbiter.softmax(x, -1)


@pytest.fixture
def wrong_first(only_candidates):
    only_candidates("nvidia", "softmax", TorchSoftmaxWrongAt777(), REGISTRY.get("torch_softmax", "nvidia", "softmax"))
    Memoized.recipes.clear()
    yield
    arbiter.configure(audit=0.0, first_calls="background")
    audit.configure_first_calls(None)


@pytest.mark.parametrize("mode", ["background", "rate"])
def test_a_torch_callers_wrong_call_on_cuda_is_demoted(wrong_first, mode):
    import torch

    if mode == "rate":
        arbiter.configure(audit=1.0, first_calls="off")

    def make(cols, seed=0):
        return torch.randn(8, cols, device="cuda", generator=torch.Generator("cuda").manual_seed(seed))

    _softmax(make(1000))
    key = next(r["key"] for r in arbiter.stats() if r["key"].startswith("nvidia:softmax"))
    route = dispatch.route(key, torch_caller=True)
    assert route is not None and route.label == "torch_softmax_wrong_at_777"
    _softmax(make(777))  # wrong, served; checked on the audit thread
    assert audit.drain(60)
    assert dispatch.route(key, torch_caller=True) is None  # demoted: the next call misses
    x = make(777, seed=1)
    torch.testing.assert_close(_softmax(x), torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
    assert dispatch.route(key, torch_caller=True).label == "torch_softmax"
