"""The program's state and context in the gate (issue 38 item 3): wrong candidates that a program's calls expose
and the gate's clean-room calls did not, each refused with the reason that names it, and correct alternatives
doing the same things right that must pass.

Each wrong one is right on every fresh probe: only the program's way of calling (the same arrays updated in
place, a kept result, a worker thread, two threads at once, one thread, read-only inputs, the thread's
floating-point environment) tells it apart."""
import ctypes
import hashlib
import platform
import threading
import time

import numpy as np
import pytest

from arbiter import Candidate, Tier, fpenv
from arbiter.regions import Matmul, Softmax
from arbiter.verify import verify
from audit_faults import set_ftz


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


class Ctx(Candidate):
    target, tier, priority = "cpu", Tier.HAND_TUNED, 100


class SoftmaxCtx(Ctx):
    op = "softmax"

    def right(self, region, out):
        out[...] = _softmax(region.x.astype(np.float64), region.axis)
        return out


# --- wrong ---------------------------------------------------------------------------------------------------
class IdCachedPack(Ctx):
    """Packs the weight ``b`` once per array object (``id``), as a kernel pinning its pack to the weights does:
    stale after ``load_state_dict`` or an optimizer step writes new values into the same tensor."""

    name, op = "id_cached_pack", "matmul"

    def __init__(self):
        self.packs = {}

    def run(self, region, params):
        out = region.alloc_out()
        b = region.b
        pack = self.packs.get(id(b))
        if pack is None or pack[0] is not b:
            pack = self.packs[id(b)] = (b, np.ascontiguousarray(b, dtype=np.float64))
        out[...] = region.a.astype(np.float64) @ pack[1]
        return out


class PrefixKeyedCache(SoftmaxCtx):
    """Caches results by a hash of the input's first values (two prompts sharing a prefix collide)."""

    name = "prefix_keyed_cache"

    def __init__(self):
        self.cache = {}

    def run(self, region, params):
        out = region.alloc_out()
        x = region.x
        key = (x.shape, hashlib.sha1(np.ascontiguousarray(x[:1]).tobytes()).hexdigest())
        if key not in self.cache:
            self.cache[key] = _softmax(x.astype(np.float64), region.axis).astype(out.dtype)
        out[...] = self.cache[key]
        return out


class PooledOutput(SoftmaxCtx):
    """Without ``out=``, returns a per-shape pooled buffer: the caller's earlier result changes under it."""

    name = "pooled_output"

    def __init__(self):
        self.pool = {}

    def run(self, region, params):
        out = region.out
        if out is None:
            out = self.pool.setdefault((region.x.shape, region.x.dtype.str), np.empty(region.x.shape, region.x.dtype))
        return self.right(region, out)


class OffMainThread(SoftmaxCtx):
    """Another code path on a worker thread (here a wrong one: no max subtraction, scaled)."""

    name = "off_main_thread"

    def run(self, region, params):
        out = region.alloc_out()
        if threading.current_thread() is threading.main_thread():
            return self.right(region, out)
        out[...] = 1.01 * _softmax(region.x.astype(np.float64), region.axis)
        return out


SCRATCH: dict = {}


class SharedScratch(SoftmaxCtx):
    """A module-level scratch buffer shared by every caller; the GIL is released for 5 ms between writing and
    reading it (a long NumPy operation does the same). The gate's four concurrent callers meet just before the
    candidate runs (``verify._context``), so the window is met however loaded the box: before, they met before the
    gate's own preparation of each call, and on a loaded box the race went unseen (2026-12-07); this kernel then
    waited for a second caller itself."""

    name = "shared_scratch"

    def run(self, region, params):
        out = region.alloc_out()
        buf = SCRATCH.setdefault(region.x.shape, np.empty(region.x.shape, np.float64))
        buf[...] = region.x
        time.sleep(0.005)
        out[...] = _softmax(buf, region.axis)
        return out


class TransposesInPlace(Ctx):
    """Transposes a square ``a`` in place for its fast path and back: invisible after the call, wrong for a
    caller reading ``a`` at the same time (and a write to an input)."""

    name, op = "transposes_in_place", "matmul"

    def run(self, region, params):
        out = region.alloc_out()
        a = region.a
        if a.shape[0] != a.shape[1]:
            out[...] = a.astype(np.float64) @ region.b.astype(np.float64)
            return out
        a[...] = a.T.copy()
        out[...] = a.T.astype(np.float64) @ region.b.astype(np.float64)
        a[...] = a.T.copy()
        return out


class OneThreadPath(SoftmaxCtx):
    """A path taken only when torch runs on one intra-op thread (wrong there)."""

    name = "one_thread_path"

    def run(self, region, params):
        import torch

        out = region.alloc_out()
        if torch.get_num_threads() == 1:
            out[...] = _softmax(region.x.astype(np.float64), region.axis) + 1e-3
            return out
        return self.right(region, out)


x86_glibc = pytest.mark.skipif(platform.machine() != "x86_64" or platform.system() != "Linux" or fpenv._libm() is None,
                               reason="flush-to-zero is set through x86-64 glibc's fenv_t here")


class LeavesFlushToZero(SoftmaxCtx):
    """Turns flush-to-zero on for its thread (a fast path for subnormals) and leaves it on."""

    name = "leaves_flush_to_zero"

    def run(self, region, params):
        set_ftz(True)
        return self.right(region, region.alloc_out())


# --- right ---------------------------------------------------------------------------------------------------
class ContentKeyedCache(Ctx):
    """An ``id()``-free cache: the pack is keyed by a digest of the weight's values, so an update misses it."""

    name, op = "content_keyed_cache", "matmul"

    def __init__(self):
        self.packs = {}

    def run(self, region, params):
        out = region.alloc_out()
        b = np.ascontiguousarray(region.b)
        key = (b.shape, hashlib.sha1(b.tobytes()).hexdigest())
        if key not in self.packs:
            self.packs[key] = b.astype(np.float64)
        out[...] = region.a.astype(np.float64) @ self.packs[key]
        return out


class ThreadLocalWorkspace(SoftmaxCtx):
    """A pooled workspace per thread, never returned to the caller."""

    name = "thread_local_workspace"

    def __init__(self):
        self.local = threading.local()

    def run(self, region, params):
        pool = self.local.__dict__.setdefault("pool", {})
        buf = pool.setdefault(region.x.shape, np.empty(region.x.shape, np.float64))
        buf[...] = region.x
        time.sleep(0.001)
        out = region.alloc_out()
        out[...] = _softmax(buf, region.axis)
        return out


class RestoresFlushToZero(SoftmaxCtx):
    """Sets flush-to-zero for its work and restores the environment before returning."""

    name = "restores_flush_to_zero"

    def run(self, region, params):
        before = fpenv.capture()
        set_ftz(True)
        try:
            return self.right(region, region.alloc_out())
        finally:
            fpenv.changed(before)  # puts it back


class AlignedFastPath(SoftmaxCtx):
    """A different (right) path for 64-byte-aligned rows, as torch's tensors are."""

    name = "aligned_fast_path"

    def run(self, region, params):
        out = region.alloc_out()
        if region.x.ctypes.data % 64 == 0:
            x = region.x.astype(np.float64)
            e = np.exp(x - x.max(axis=region.axis, keepdims=True))
            out[...] = e * (1.0 / e.sum(axis=region.axis, keepdims=True))
            return out
        return self.right(region, out)


def _soft():
    return Softmax.random("cpu", "float32", {"rows": 32, "cols": 200})


def _mm():
    return Matmul.random("cpu", "float32", {"m": 48, "n": 48, "k": 48})


@pytest.mark.parametrize("cls, region, expected", [
    (IdCachedPack, _mm, "updated in place"),
    (PrefixKeyedCache, _soft, "updated in place"),
    (PooledOutput, _soft, "pooled output"),
    (OffMainThread, _soft, "on a worker thread"),
    (SharedScratch, _soft, "concurrent threads"),
    (TransposesInPlace, _mm, "read-only"),
    (OneThreadPath, _soft, "at 1 thread"),
    pytest.param(LeavesFlushToZero, _soft, "flush-to-zero on", marks=x86_glibc),
], ids=lambda v: getattr(v, "name", None) if isinstance(v, type) else None)
def test_each_context_fault_is_refused_with_its_reason(cls, region, expected):
    if cls is OneThreadPath:
        torch = pytest.importorskip("torch")
        if torch.get_num_threads() == 1:
            pytest.skip("torch runs on one thread here already: the path is the only one (the probes catch it)")
    verdict = verify(cls(), {}, region())
    assert not verdict.passed and expected in verdict.reason, verdict.reason
    assert fpenv.state() == fpenv.State(False, False, "nearest")  # whatever it did, the thread is clean again


@pytest.mark.parametrize("cls, region", [
    (ContentKeyedCache, _mm), (ThreadLocalWorkspace, _soft), (AlignedFastPath, _soft),
    pytest.param(RestoresFlushToZero, _soft, marks=x86_glibc),
], ids=lambda v: getattr(v, "name", None) if isinstance(v, type) else None)
def test_the_same_things_done_right_pass(cls, region):
    verdict = verify(cls(), {}, region())
    assert verdict.passed, verdict.reason
    assert {"on a worker thread", "x4 concurrent threads", "at 1 thread", "updated in place",
            "x2 without out="} <= {p.split(" ", 1)[1] for p in verdict.probes if " " in p}


def test_the_environment_is_read_by_what_it_does():
    if fpenv._libm() is None:
        pytest.skip("no libm fegetenv here")
    before = fpenv.capture()
    assert fpenv.state().rounding == "nearest"
    lib = fpenv._libm()
    lib.fesetround.argtypes = [ctypes.c_int]
    lib.fesetround(0x400 if platform.machine() == "x86_64" else 0x800000)  # FE_DOWNWARD
    assert fpenv.state().rounding == "downward"
    assert fpenv.changed(before) == "rounding downward" and fpenv.state().rounding == "nearest"


def test_two_threads_limiting_a_pool_at_once_leave_it_as_they_found_it():
    """The gate's concurrent calls found it: a per-holder save and restore let the second holder save the first's
    limit and put it back last, so BLAS stayed at one thread for the rest of the process (and its environment
    key changed). The last holder to leave now restores the pool's own size."""
    from arbiter import cpu_threads

    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    inside, leave = threading.Barrier(2), threading.Event()

    def hold(n):
        with cpu_threads.torch_threads(n):
            inside.wait(timeout=10)
            leave.wait(timeout=10)

    first = threading.Thread(target=hold, args=(1,))
    first.start()
    second = threading.Thread(target=hold, args=(1,))
    second.start()
    leave.set()
    first.join(10)
    second.join(10)
    assert torch.get_num_threads() == before
