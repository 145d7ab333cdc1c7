"""The arbiter's own thread pools on the CPU, chosen without touching anyone else's.

Two pools compete for the cores when arbiter kernels run: numba's (the emitted and synthesized
candidates) and the BLAS library's (NumPy's matmul behind the vendor candidates). Both were measured
stalling each other on the shared 2-core development box (``tests/test_cpu_threads.py`` repeats it):
numba's OpenMP layer with its default *active* wait policy kept threads spinning (a 64x1000 parallel
row sum took 8 ms right after a BLAS call instead of 65-100 us), and an OpenBLAS call right after
numba's OpenMP kernels took 16 ms instead of 57 us.

``configure()`` (called by ``import arbiter``, before numba is loaded) therefore asks numba for its
own **workqueue** threading layer (``NUMBA_THREADING_LAYER_PRIORITY="workqueue omp tbb"``) unless the
user chose a layer (``NUMBA_THREADING_LAYER`` or ``..._PRIORITY``). The workqueue is numba's own
pthread pool: its threads sleep when idle and it loads no OpenMP runtime, so nothing else changes.
Earlier versions set ``OMP_WAIT_POLICY=passive`` process-wide instead; that variable is read by every
OpenMP runtime of the process, torch's included (libgomp is one shared library), and made a torch CPU
MLP 6x slower when arbiter was imported first (issue 29 item 1). No ``OMP_*`` variable is set now.

The workqueue layer refuses concurrent launches (it terminates the process), so arbiter's numba
candidates launch under ``LAUNCH_LOCK`` (a user's own numba code called from several threads at once
wants ``NUMBA_THREADING_LAYER=omp``, which arbiter then respects).

The BLAS pool: ``blas_threads(n)`` limits it for one call and puts it back (threadpoolctl's controller
of NumPy's BLAS, about 3 us), so BLAS-backed candidates offer the thread count as a parameter
(``BLAS_PARAMS``) and the tuner measures it like any other parameter.

**One pool owns the cores** (issue 39 item 1): the caller's framework's. A torch caller (its tensors come back as
tensors, ``region.back``) runs torch's intra-op pool beside arbiter's calls, so for its calls the BLAS-backed and
numba candidates run on one thread (``guest_threads``; numba's pool still serves a call moving 16 MiB or more), and
its tier order puts torch's own kernels first (``select.tier_order``): nothing spins beside torch's pool between a
model's small ops. A NumPy caller's cores belong to
NumPy's BLAS pool and arbiter's own numba pool (which sleeps when idle); their sizes are solution parameters that
the tuner measures. Nothing is changed for longer than one call, and nothing process-wide is left set.

The threading layer, the wait policy and the BLAS pool's size are fields of the cpu environment key
(``fields()``, ``arbiter.targets.cpu.blas_info``): a registry tuned under another choice is stale.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading

LAYER_PRIORITY = "workqueue omp tbb"
# Serialises arbiter's numba launches (the workqueue layer terminates the process on concurrent ones).
LAUNCH_LOCK = threading.RLock()
# The BLAS parameter sets of a BLAS-backed candidate: the library's own thread count (its default), then one
# thread (no worker threads to wake or to leave spinning: on a shared machine often the faster).
BLAS_PARAMS: tuple[dict, ...] = ({}, {"blas_threads": 1})

_set_here: list[str] = []
_late = False


def configure() -> None:
    """Choose numba's threading layer unless the user chose it (idempotent). Sets no OpenMP variable."""
    global _late
    if "numba" in sys.modules:
        parallel = sys.modules.get("numba.np.ufunc.parallel")
        _late = bool(parallel is not None and getattr(parallel, "_is_initialized", False))
    if "NUMBA_THREADING_LAYER" not in os.environ and "NUMBA_THREADING_LAYER_PRIORITY" not in os.environ:
        os.environ["NUMBA_THREADING_LAYER_PRIORITY"] = LAYER_PRIORITY
        _set_here.append("NUMBA_THREADING_LAYER_PRIORITY")


def fields() -> dict[str, str]:
    """Environment-key fields: numba's threading layer in force and the OpenMP wait policy (the user's;
    it matters when the user chose the omp layer).

    Starts numba's thread pool (without compiling anything) so that the layer is the one numba
    really loaded, not the one asked for; needs numba (callers check).
    """
    import numba
    from numba.np.ufunc import parallel

    parallel._launch_threads()
    layer = numba.threading_layer()
    policy = os.environ.get("OMP_WAIT_POLICY", "unset").lower()
    if _late and layer != "workqueue":
        layer += " (numba started before arbiter)"
    return {"numba_threading_layer": layer, "omp_wait_policy": policy}


_blas: list | None = None


def _blas_pools() -> list:
    """threadpoolctl's controllers of the loaded BLAS libraries (found once: finding them costs ~0.5 ms)."""
    global _blas
    if _blas is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:
            _blas = []
        else:
            _blas = [c for c in ThreadpoolController().lib_controllers if c.user_api == "blas"]
    return _blas


_limit_lock = threading.Lock()
_limits: dict[str, list] = {}  # pool name -> [the holders' sizes, its size before the first of them, its size now]
_AS_IT_IS = contextlib.nullcontext()


class _Limited:
    """``put(n)`` for the block; when it leaves, the size the holders still inside asked for last, or the pool's own
    size once the last concurrent holder has left. Pool sizes are the process's: two threads limiting at once (a
    program's, or the gate's concurrent calls) must not leave the first one's limit behind, as saving and restoring
    per holder did (the second saved the first's 1). A class, not a generator: it runs on every call of a
    BLAS-backed candidate for a torch caller (4.5 us, where two generator context managers took 8.5;
    threadpoolctl's get and set are 0.5 and 0.8 of it)."""

    __slots__ = ("name", "get", "put", "n")

    def __init__(self, name: str, get, put, n: int):
        self.name, self.get, self.put, self.n = name, get, put, n

    def __enter__(self):
        with _limit_lock:
            entry = _limits.get(self.name)
            if entry is None or not entry[0]:
                size = self.get()
                entry = _limits[self.name] = [[], size, size]  # holders' sizes, the pool's own, the pool's now
            entry[0].append(self.n)
            self._size(entry, self.n)

    def __exit__(self, *exc):
        with _limit_lock:
            entry = _limits[self.name]
            entry[0].remove(self.n)
            self._size(entry, entry[0][-1] if entry[0] else entry[1])

    def _size(self, entry: list, n) -> None:
        if entry[2] != n:
            self.put(n)
            entry[2] = n


def blas_threads(n: int | None):
    """A context running the block with the BLAS pool limited to ``n`` threads (None: as it is), then put back."""
    pools = _blas_pools() if n else None
    if not pools or not n:
        return _AS_IT_IS
    if len(pools) == 1:
        return _Limited("blas", pools[0].get_num_threads, pools[0].set_num_threads, n)

    def put(sizes):
        for pool, size in zip(pools, sizes if isinstance(sizes, list) else [sizes] * len(pools)):
            pool.set_num_threads(size)

    return _Limited("blas", lambda: [p.get_num_threads() for p in pools], put, n)


def torch_threads(n: int | None):
    """A context running the block with torch's intra-op pool at ``n`` threads (None, or torch not loaded: as it
    is)."""
    torch = sys.modules.get("torch")
    if not n or torch is None:
        return _AS_IT_IS
    return _Limited("torch", torch.get_num_threads, torch.set_num_threads, n)


# A torch caller's call that moves at least this much memory (operands read and output written) runs on the
# arbiter's own pool after all: there the pool's wake-up, and sharing a core with torch's pool while it spins down
# after torch's last op, cost far less than a second core's bandwidth. Measured on the 2-core box, interleaved with
# torch eager's own ops as in a model (/tmp/guest.py of the 2026-12-07 session; issue 43): add_rmsnorm [1, T, 4096]
# float32 through arbiter.torch, one thread against the pool: T = 128 (8 MiB moved) 348 and 346 us, T = 512
# (32 MiB) 2,250 and 1,270 us, T = 2048 (128 MiB) 18,127 and 10,965 us.
GUEST_POOL_BYTES = 16 << 20


def guest_threads(torch_caller: bool, own: int | None = None, moved: int = 0) -> int | None:
    """The thread count of a pool that is not the caller's: one for a torch caller (``Region.torch_caller``: torch's
    pool owns the cores) on a call moving less than ``GUEST_POOL_BYTES`` (``moved``), else ``own`` (None: the pool
    as it is). It takes the flag and the size, not the region: a thread count depends on who called and how much
    memory the call moves, nothing else of the call."""
    return 1 if torch_caller and moved < GUEST_POOL_BYTES else own


@contextlib.contextmanager
def numba_threads(n: int | None):
    """Run the block with numba's parallel launches from this thread on ``n`` threads (None: as they are). numba's
    count is the calling thread's own (``numba.set_num_threads``): no other thread sees the change."""
    numba = sys.modules.get("numba")
    if not n or numba is None:
        yield
        return
    before = numba.get_num_threads()
    if before == n:
        yield
        return
    numba.set_num_threads(n)
    try:
        yield
    finally:
        numba.set_num_threads(before)


def busy(host_cores: bool) -> str | None:
    """A warning when other processes already keep the CPU's cores busy (1-minute load average above
    the core count), else None; ``host_cores``: the target computes on them (``Target.host_cores``). Timing
    then measures the contention too: every parallel kernel (numba's
    or OpenBLAS's) waits whenever one of its threads is descheduled, so margins may not repeat."""
    if not host_cores or not hasattr(os, "getloadavg"):
        return None
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    if load <= cores:
        return None
    return (f"load average {load:.1f} on {cores} cores: other processes compete for the CPU; timings are "
            "slower and noisier than on a quiet machine, and margins may not repeat")
