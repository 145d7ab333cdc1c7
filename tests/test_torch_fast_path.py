"""arbiter.torch's fast path on CPU tensors (issue 39 item 4): a warm signature whose winner is torch's own kernel
runs it on the caller's tensors, counted as a hit; a re-decision, a reset or an armed audit takes it out; a winner
that takes NumPy arrays keeps the full path; concurrent callers get their own results."""
from __future__ import annotations

import threading
from typing import ClassVar

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import arbiter  # noqa: E402
import arbiter.torch as at  # noqa: E402
from arbiter import Candidate, Tier, dispatch  # noqa: E402
from arbiter.regions import Softmax  # noqa: E402
from softmax_support import numpy_only_softmax  # noqa: E402


class TorchNative(Candidate):
    """A right softmax on the torch caller's own tensors (``region.torch_in``), counting what it was given."""

    name, target, op, tier, priority, torch_native = "native_softmax", "cpu", "softmax", Tier.HAND_TUNED, 10, True
    seen: ClassVar[list] = []

    def run(self, region, params):
        x = region.torch_in["x"] if region.torch_in is not None else torch.from_numpy(region.x)
        type(self).seen.append(region.torch_in is not None)
        y = torch.softmax(x, -1)
        if region.out is not None:
            region.out[...] = y.numpy()
            return region.out
        return y if region.torch_in is not None else y.numpy()


def _x(seed=0, shape=(8, 33)):
    return torch.from_numpy(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _entry(x):
    return at._on_tensors.get(("softmax", (-1,), (x.shape, x.stride(), x.dtype)))


def _route(x):
    return dispatch.route(Softmax(x.numpy()).key, torch_caller=True)


def test_a_warm_torch_winner_serves_the_callers_tensors_and_counts_each_hit(only_candidates):
    only_candidates("cpu", "softmax", TorchNative())
    x = _x()
    torch.testing.assert_close(at.softmax(x), torch.softmax(x, -1))  # first call: the full path learns
    assert callable(_entry(x))
    hits = _route(x).hits
    TorchNative.seen.clear()
    for seed in range(3):
        y = _x(seed)
        got = at.softmax(y)
        torch.testing.assert_close(got, torch.softmax(y, -1))
        assert got.data_ptr() != y.data_ptr() and got.is_contiguous()
    assert TorchNative.seen == [True] * 3  # the caller's tensors themselves, no NumPy view in between
    assert _route(x).hits == hits + 3


def test_a_reset_or_a_new_route_takes_the_fast_path_out(only_candidates):
    only_candidates("cpu", "softmax", TorchNative())
    x = _x()
    at.softmax(x)
    learned = _entry(x)
    dispatch.reset()  # the route the entry served is gone: its next call goes the full path and relearns
    torch.testing.assert_close(at.softmax(x), torch.softmax(x, -1))
    assert learned(x) is None  # the stale entry refuses to serve
    assert _entry(x) is not learned and _route(x).hits == 0  # (that call was the new route's miss)
    at.softmax(x)
    assert _route(x).hits == 1  # served by the relearned entry


def test_an_armed_audit_sees_every_call(only_candidates):
    only_candidates("cpu", "softmax", TorchNative())
    arbiter.configure(audit=1.0)
    try:
        x = _x()
        at.softmax(x)
        assert _entry(x) is None  # the sampler wraps the route's run: every call through run_arbitrated
        at.softmax(x)
        assert _route(x).run is not _route(x).candidate.run
    finally:
        arbiter.configure(audit=0.0)


def test_a_winner_on_numpy_keeps_the_full_path(only_candidates):
    only_candidates("cpu", "softmax", numpy_only_softmax())
    x = _x()
    at.softmax(x)
    assert _entry(x) is None
    torch.testing.assert_close(at.softmax(x), torch.softmax(x, -1))


def test_concurrent_callers_get_their_own_results(only_candidates):
    only_candidates("cpu", "softmax", TorchNative())
    at.softmax(_x())
    inputs = [_x(seed) for seed in range(8)]
    got: dict[int, object] = {}

    def call(i):
        for _ in range(50):
            got[i] = at.softmax(inputs[i])

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, x in enumerate(inputs):
        torch.testing.assert_close(got[i], torch.softmax(x, -1))
