"""One pool owns the cores (issue 39 item 1): for a torch caller torch's, so arbiter's BLAS-backed and numba
candidates run on one thread for its calls and its tier order puts torch's kernels first; a NumPy caller's pools
keep their sizes. Nothing is left changed after a call."""
from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest

import arbiter
from arbiter import Tier, cpu_threads, dispatch
from arbiter.candidates import Candidate
from arbiter.candidates.cpu._common import BlasBacked
from arbiter.candidates.cpu._numba import NUMBA_MISSING, SerialLaunches
from arbiter.regions import Matmul, Softmax
from softmax_support import softmax_into_out

torch = pytest.importorskip("torch")


def _blas_size() -> int | None:
    pools = cpu_threads._blas_pools()
    return pools[0].get_num_threads() if pools else None


class SeesBlas(BlasBacked, Candidate):
    """numpy's product, noting the BLAS pool's size while it runs."""

    name, target, op, tier, priority = "sees_blas", "cpu", "matmul", Tier.HAND_TUNED, 100
    seen: ClassVar[list] = []

    def param_space(self):
        return [{}]

    def _compute(self, region):
        type(self).seen.append(_blas_size())
        out = region.alloc_out()
        np.matmul(region.a, region.b, out=out)
        return out


class SeesNumba(SerialLaunches, Candidate):
    """NumPy's softmax, noting numba's thread count for this thread while it runs."""

    name, target, op, tier, priority = "sees_numba", "cpu", "softmax", Tier.HAND_TUNED, 100
    seen: ClassVar[list] = []

    def run(self, region, params):
        import numba

        type(self).seen.append(numba.get_num_threads())
        return softmax_into_out(region)


def test_a_torch_callers_blas_backed_call_runs_on_one_blas_thread(only_candidates):
    if not cpu_threads._blas_pools():
        pytest.skip("threadpoolctl sees no BLAS pool here")
    only_candidates("cpu", "matmul", SeesBlas())
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((32, 16)).astype(np.float32), rng.standard_normal((16, 8)).astype(np.float32)
    before = _blas_size()
    with cpu_threads.blas_threads(2):  # a pool with more than one thread, whatever this box's default
        arbiter.run_arbitrated("matmul", Matmul(a, b))  # the miss: gated (some checks on one BLAS thread)
        arbiter.run_arbitrated("matmul", Matmul(torch.from_numpy(a), torch.from_numpy(b)))
        SeesBlas.seen = []
        arbiter.run_arbitrated("matmul", Matmul(a, b))
        numpy_sizes = set(SeesBlas.seen)
        SeesBlas.seen = []
        y = arbiter.run_arbitrated("matmul", Matmul(torch.from_numpy(a), torch.from_numpy(b)))
        torch_sizes = set(SeesBlas.seen)
        assert _blas_size() == 2  # put back after the call
    assert isinstance(y, torch.Tensor)
    assert numpy_sizes == {2} and torch_sizes == {1}, (numpy_sizes, torch_sizes)
    assert _blas_size() == before


@pytest.mark.skipif(NUMBA_MISSING is not None, reason="needs numba")
def test_a_torch_callers_numba_call_runs_on_one_thread(only_candidates):
    import numba

    only_candidates("cpu", "softmax", SeesNumba())
    x = np.random.default_rng(1).standard_normal((8, 32)).astype(np.float32)
    before = numba.get_num_threads()
    SeesNumba.seen = []
    arbiter.run_arbitrated("softmax", Softmax(x))
    arbiter.run_arbitrated("softmax", Softmax(torch.from_numpy(x)))
    assert SeesNumba.seen[-1] == 1 and (before == 1 or before in SeesNumba.seen), SeesNumba.seen
    assert numba.get_num_threads() == before


@pytest.mark.skipif(NUMBA_MISSING is not None, reason="needs numba")
def test_a_torch_callers_numba_call_moving_much_memory_runs_on_the_pool(only_candidates, monkeypatch):
    # a large memory-bound call is worth the pool's wake-up (cpu_threads.GUEST_POOL_BYTES, measured); a small one
    # stays on one thread (above)
    import numba

    if numba.get_num_threads() == 1:
        pytest.skip("numba has one thread here")
    only_candidates("cpu", "softmax", SeesNumba())
    x = np.random.default_rng(1).standard_normal((64, 32)).astype(np.float32)  # 8 KiB in, 8 KiB out
    monkeypatch.setattr(cpu_threads, "GUEST_POOL_BYTES", 16 << 10)
    SeesNumba.seen = []
    arbiter.run_arbitrated("softmax", Softmax(x))
    arbiter.run_arbitrated("softmax", Softmax(torch.from_numpy(x)))
    assert SeesNumba.seen[-1] == numba.get_num_threads() > 1, SeesNumba.seen
    monkeypatch.setattr(cpu_threads, "GUEST_POOL_BYTES", (16 << 10) + 1)
    arbiter.run_arbitrated("softmax", Softmax(torch.from_numpy(x)))
    assert SeesNumba.seen[-1] == 1, SeesNumba.seen
    assert cpu_threads.guest_threads(False, 3, 0) == 3 and cpu_threads.guest_threads(True, 3, 1 << 40) == 3


def test_a_torch_cpu_caller_defaults_to_torchs_kernel_and_keeps_its_own_route():
    x = np.random.default_rng(2).standard_normal((8, 32)).astype(np.float32)
    plain, from_torch = Softmax(x), Softmax(torch.from_numpy(x))
    assert plain.key == from_torch.key and from_torch.torch_caller and not plain.torch_caller
    arbiter.run_arbitrated("softmax", plain)
    y = arbiter.run_arbitrated("softmax", from_torch)
    assert isinstance(y, torch.Tensor)
    np.testing.assert_allclose(y.numpy(), torch.softmax(torch.from_numpy(x), -1).numpy(), rtol=1e-5, atol=1e-7)
    assert dispatch.route(plain.key).solution.candidate_name == "numpy_softmax"
    assert dispatch.route(plain.key, torch_caller=True).solution.candidate_name == "torch_softmax"


def test_arbiter_torch_on_cpu_tensors_is_a_torch_caller():
    """arbiter.torch hands NumPy views of CPU tensors to the arbiter (the memo serves them) and marks the region
    as a torch caller's: before, the views hid the caller, and a torch model's ops ran NumPy's kernels on BLAS's
    pool beside torch's."""
    import arbiter.torch as at

    x = torch.randn(8, 32)
    y = at.softmax(x, -1)
    torch.testing.assert_close(y, torch.softmax(x, -1))
    key = Softmax(x.numpy()).key
    assert dispatch.route(key, torch_caller=True).solution.candidate_name == "torch_softmax"
    assert dispatch.route(key) is None  # no NumPy caller has called it
