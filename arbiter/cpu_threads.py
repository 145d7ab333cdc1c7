"""How numba's parallel kernels share the CPU with BLAS: chosen deliberately, before either starts.

On a machine with few (or shared) cores, numba's default OpenMP layer keeps its threads spinning
(``OMP_WAIT_POLICY`` unset means *active* in libgomp): each parallel kernel then stalls 8-12 ms
behind the spinning pool and behind OpenBLAS's own spinning threads right after a BLAS call, so a
NumPy candidate "wins" by 100x and identical tuning runs choose different winners. Measured on the
2-core development box (``tests/test_cpu_threads.py`` repeats it): a 64x1000 parallel row sum took
8.0 ms with the active policy, 65 us with ``OMP_WAIT_POLICY=passive``, 98 us on the workqueue layer.

``configure()`` (called by ``import arbiter``, before numba or an OpenMP runtime is loaded) therefore
sets, unless the user set them already:

* ``OMP_WAIT_POLICY=passive``: idle OpenMP threads sleep instead of spinning;
* ``NUMBA_THREADING_LAYER_PRIORITY="omp workqueue tbb"``: the OpenMP layer (thread safe, passive
  now), else the workqueue; TBB, which spins too, last.

The threading layer and wait policy actually in force are fields of the cpu environment key
(``fields()``): a registry tuned under another choice is stale here, never served.
"""
from __future__ import annotations

import os
import sys

WAIT_POLICY = "passive"
LAYER_PRIORITY = "omp workqueue tbb"

# What configure() found: names of the variables it set, and whether numba had started its threads
# before it ran (then the choice came too late for this process and fields() says so).
_set_here: list[str] = []
_late = False


def configure() -> None:
    """Set the wait policy and layer priority unless the user chose them (idempotent)."""
    global _late
    if "numba" in sys.modules:
        parallel = sys.modules.get("numba.np.ufunc.parallel")
        _late = bool(parallel is not None and getattr(parallel, "_is_initialized", False))
    for name, value in (("OMP_WAIT_POLICY", WAIT_POLICY), ("NUMBA_THREADING_LAYER_PRIORITY", LAYER_PRIORITY)):
        if name not in os.environ:
            os.environ[name] = value
            _set_here.append(name)


def fields() -> dict[str, str]:
    """Environment-key fields: numba's threading layer in force and the OpenMP wait policy.

    Starts numba's thread pool (without compiling anything) so that the layer is the one numba
    really loaded, not the one asked for; needs numba (callers check).
    """
    import numba
    from numba.np.ufunc import parallel

    parallel._launch_threads()
    layer = numba.threading_layer()
    if _late and "OMP_WAIT_POLICY" in _set_here:  # numba's OpenMP started before the variable was set
        policy = "unset (numba started before arbiter)"
    else:
        policy = os.environ.get("OMP_WAIT_POLICY", "unset").lower()
    return {"numba_threading_layer": layer, "omp_wait_policy": policy}


def busy(target: str) -> str | None:
    """A warning when other processes already keep the CPU's cores busy (1-minute load average above
    the core count), else None. Timing then measures the contention too: every parallel kernel (numba's
    or OpenBLAS's) waits whenever one of its threads is descheduled, so margins may not repeat."""
    if target != "cpu" or not hasattr(os, "getloadavg"):
        return None
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    if load <= cores:
        return None
    return (f"load average {load:.1f} on {cores} cores: other processes compete for the CPU; timings are "
            "slower and noisier than on a quiet machine, and margins may not repeat")
