"""The ``cpu`` target: NumPy arrays on the host."""
from __future__ import annotations

import os
import platform

import numpy as np

from arbiter import aligned
from arbiter.targets import Target, Timer


def _bfloat16():
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


BFLOAT16 = _bfloat16()


def np_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        if BFLOAT16 is None:
            raise ValueError("dtype: bfloat16 on the cpu target needs the ml_dtypes package")
        return BFLOAT16
    return np.dtype(name)


def blas_info() -> dict[str, str]:
    """BLAS vendor, version and thread count as threadpoolctl reports them."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return {"blas": "unknown", "blas_version": "unknown", "blas_threads": "unknown"}
    # NumPy's own BLAS first: which other BLAS libraries are loaded (SciPy's) depends on import order,
    # and the environment key must not.
    libs = sorted((lib for lib in threadpool_info() if lib.get("user_api") == "blas"),
                  key=lambda lib: "numpy" not in str(lib.get("filepath", "")))
    if not libs:
        return {"blas": "none", "blas_version": "none", "blas_threads": "0"}
    return {
        "blas": f"{libs[0].get('internal_api')}",
        "blas_version": f"{libs[0].get('version')}",
        "blas_threads": str(libs[0].get("num_threads")),
    }


def cpu_model() -> tuple[str, str]:
    """(model name, a digest of the ISA flags that matter to kernels)."""
    model, flags = platform.processor() or platform.machine(), ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and ":" in line:
                    model = line.split(":", 1)[1].strip()
                elif line.startswith(("flags", "Features")) and ":" in line:
                    flags = line.split(":", 1)[1]
                if model and flags:
                    break
    except OSError:
        pass
    wanted = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "avx512_fp16",
              "amx_tile", "amx_bf16", "sve", "asimd", "neon")
    present = sorted(set(flags.split()) & set(wanted))
    return model, " ".join(present)


class CpuTarget(Target):
    name = "cpu"
    host_clock = True  # the CPU is the device: the host clock times it, all modes alike
    host_cores = True
    captures_graphs = False
    special_values_verified = True
    torch_device = "cpu"

    def available(self):
        return True

    def owns(self, array):
        if isinstance(array, np.ndarray):
            return True
        return type(array).__module__.startswith("torch") and array.device.type == "cpu"

    def adopt(self, array):
        if isinstance(array, np.ndarray):
            return array, None
        import torch  # only reached for a torch tensor, so torch is present

        return array.numpy(), torch.from_numpy  # zero-copy both ways on the host

    def to_host(self, array):
        return np.asarray(array)

    def from_host(self, array, dtype, order="C"):
        # No copy when the dtype, order and 64-byte alignment already match: callers hand over fresh host data
        # (probes, families; ``regions._normal`` draws it aligned, as torch's allocator aligns a caller's tensors).
        array = np.asarray(array)
        want = np_dtype(dtype)
        if (array.dtype == want and (array.flags.f_contiguous if order == "F" else array.flags.c_contiguous)
                and aligned.is_aligned(array)):
            return array
        out = aligned.empty(array.shape, want, order)
        out[...] = array
        return out

    def full(self, shape, value, dtype):  # 64-byte aligned: the gate's outputs (``arbiter.aligned``)
        out = aligned.empty(shape, np_dtype(dtype))
        out.fill(value)
        return out

    def empty(self, shape, dtype):
        return np.empty(shape, dtype=np_dtype(dtype))

    def timer(self) -> Timer:
        return _TIMER

    def environment(self):
        model, flags = cpu_model()
        env = {
            "device": model,
            "arch": f"{platform.machine()} {flags}".strip(),
            "os": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(),
            "numpy": np.__version__,
            "cpu_count": str(os.cpu_count()),
        }
        env.update(blas_info())
        try:
            import numba
        except ImportError:
            env["numba"] = "absent"
        else:
            from arbiter import cpu_threads

            env["numba"] = numba.__version__
            env["numba_threads"] = str(numba.config.NUMBA_NUM_THREADS)
            env.update(cpu_threads.fields())  # threading layer and wait policy: they decide CPU timings
        return env


_TIMER = Timer()
_TIMER.cache_bytes = 64 << 20  # the last-level cache of common server CPUs' per-core share, and more
TARGET = CpuTarget()
