"""The ``nvidia`` target: CuPy arrays on an NVIDIA GPU, or PyTorch CUDA tensors where CuPy is absent.

Its array library is CuPy when CuPy imports, sees a device and runs a tiny NVRTC-compiled kernel right. Then
every candidate can run, and a torch caller's tensors are used as they are (views for CuPy kernels). Where
CuPy is missing but PyTorch sees a CUDA device, the library is PyTorch: regions hold torch tensors, the gate's
probes and outputs are torch tensors, timing uses torch's events, and only the torch candidates are available
(the CuPy and NVRTC ones say "needs CuPy"). A PyTorch-only user installs nothing else. The library in use is
part of the environment key (``arrays``), so solutions measured with one are never served under the other.

Neither library is imported at module load, so this module imports on machines without them.
"""
from __future__ import annotations

import contextlib
import functools
import math
import sys
import time

import numpy as np

from arbiter.errors import TargetUnavailable
from arbiter.memo import Memo
from arbiter.targets import Target, Timer

_SQRT3 = math.sqrt(3.0)

# Header-free on purpose: NVRTC must work without the CUDA toolkit's include files.
_PROBE_SOURCE = r"""
extern "C" __global__ void arbiter_probe(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}
"""


def cupy_module():
    """CuPy, imported on first use (ImportError when it is not installed)."""
    import cupy

    return cupy


def _bfloat16_dtype():
    """NumPy's bfloat16 (ml_dtypes) when the array library takes it, else None."""
    try:
        import ml_dtypes

        dt = np.dtype(ml_dtypes.bfloat16)
        if TARGET.arrays == "cupy":
            cupy_module().zeros(1, dtype=dt)  # CuPy < 14 raises here: no bfloat16 support
        return dt
    except Exception:
        return None


def _cupy_reason() -> bool | str:
    """True when CuPy imports, sees a device and runs an NVRTC kernel right; else why not."""
    try:
        cp = cupy_module()
    except Exception as exc:  # ImportError, or a CuPy built for another CUDA failing to load
        return f"CuPy does not import ({type(exc).__name__}: {exc}); install kernel-arbiter[nvidia]"
    try:
        count = cp.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"no CUDA device: {type(exc).__name__}: {exc}"
    if count < 1:
        return "no CUDA device is visible (CUDA_VISIBLE_DEVICES, driver)"
    try:
        kernel = cp.RawKernel(_PROBE_SOURCE, "arbiter_probe")
        x = cp.arange(37, dtype=cp.float32)
        y = cp.empty_like(x)
        kernel((1,), (64,), (x, y, np.int32(x.size)))
        if not bool(cp.allclose(y, 2 * x + 1)):
            return "the NVRTC probe kernel ran but computed a wrong result"
    except Exception as exc:
        return f"an NVRTC-compiled probe kernel failed: {type(exc).__name__}: {exc}"
    return True


@functools.cache
def torch_reason() -> bool | str:
    """True when PyTorch imports, sees a CUDA device and computes on it right; else why not (asked once: the
    target's gate and the torch candidates' availability share the answer)."""
    try:
        import torch
    except Exception as exc:
        return f"PyTorch does not import ({type(exc).__name__})"
    if not torch.cuda.is_available():
        return f"PyTorch {torch.__version__} sees no CUDA device"
    try:
        x = torch.arange(37, dtype=torch.float32, device="cuda")
        if not bool(torch.allclose((2 * x + 1).cpu(), 2 * torch.arange(37, dtype=torch.float32) + 1)):
            return f"PyTorch {torch.__version__} computed a wrong result on the CUDA device"
    except Exception as exc:
        return f"PyTorch's CUDA device failed: {type(exc).__name__}: {exc}"
    return True


class NvidiaTarget(Target):
    name = "nvidia"
    # Verified on the H200 (2026-12-03): the families first found NaN-dropping epilogues and SDPA faulting on a
    # misaligned q (a fault poisons the process's CUDA context); the candidates now propagate NaN or decline.
    special_values_verified = True
    visible_devices = "CUDA_VISIBLE_DEVICES"
    torch_device = "cuda"

    def __init__(self):
        self._available: bool | str | None = None
        self.arrays: str | None = None  # "cupy" or "torch" once the gate has found one
        self._cupy: bool | str = "not probed"  # True, or why the CuPy candidates cannot run
        self._bf16 = "unknown"
        self._empties: dict = {}  # dtype name -> (empty function, its dtype object)
        self._timer: CudaTimer | None = None

    # -- the gate -------------------------------------------------------------
    def available(self):
        if self._available is None:
            self._available = self._probe()
        return self._available

    def _probe(self) -> bool | str:
        self._cupy = _cupy_reason()
        if self._cupy is True:
            self.arrays = "cupy"
            return True
        via_torch = torch_reason()
        if via_torch is True:
            self.arrays = "torch"
            return True
        return f"{self._cupy} (or PyTorch alone, kernel-arbiter[torch]: {via_torch})"

    def cupy_available(self) -> bool | str:
        """True when CuPy is this target's array library (what every non-torch candidate needs); else why not."""
        ok = self.available()
        if ok is not True:
            return ok
        return True if self.arrays == "cupy" else f"needs CuPy, which this machine lacks ({self._cupy})"

    def _require(self):
        ok = self.available()
        if ok is not True:
            raise TargetUnavailable("nvidia", str(ok))
        return cupy_module() if self.arrays == "cupy" else _torch()

    # -- arrays ---------------------------------------------------------------
    def owns(self, array):
        module = type(array).__module__
        if module.startswith("cupy"):
            return True
        if module.startswith("torch"):
            return getattr(array, "is_cuda", False)
        return False

    def adopt(self, array):
        """CuPy arrays as they are, no conversion back. Torch CUDA tensors also as they are: with CuPy, with
        ``torch_view`` (DLPack) to bring a CuPy result back (a region keeps a torch caller's tensors and views
        them, ``cupy_view``, only for a CuPy kernel); without CuPy they are the target's own arrays."""
        if type(array).__module__.startswith("cupy"):
            return array, None
        self._require()
        if self.arrays == "torch":
            return array, None
        return array, torch_view

    def bfloat16(self):
        """NumPy's bfloat16 (ml_dtypes) when the array library takes it, or None (CuPy < 14, no ml_dtypes)."""
        if self._bf16 == "unknown":
            self.available()
            self._bf16 = _bfloat16_dtype()
        return self._bf16

    def native_bfloat16(self) -> bool:
        return self.bfloat16() is not None

    def caller_view(self, array):
        return cupy_view(array)

    def caller_empty(self, shape, dtype, like):
        return torch_empty(shape, dtype, like)

    def caller_stream(self):
        return torch_stream()

    def device_float64(self, array):
        return array.astype(np.float64) if type(array).__module__.split(".", 1)[0] == "cupy" else None

    def device_draw(self, shape, dtype, scale, rng, order="C"):
        """With CuPy, cuRAND's Philox generator seeded from ``rng`` (uniform on [-sqrt(3), sqrt(3)) times
        ``scale``); with torch alone, None: the host draws.

        Philox through cuRAND's host API (CuPy's legacy ``RandomState``), not ``cupy.random.default_rng``: that
        one's XORWOW states are initialised per generator and it draws ~10x slower (CuPy issue 7515: 3.3 ms for
        10^7 uniforms against 0.26 ms), and the gate draws every probe's operands fresh."""
        if self.arrays != "cupy":
            return None
        cp = cupy_module()
        seed = np.uint64(rng.integers(0, 2**63 - 1))  # RandomState.seed casts "safe" to uint64: an int64 fails
        kind = np.float64 if dtype == "float64" else np.float32
        philox = getattr(getattr(cp.cuda, "curand", None), "CURAND_RNG_PSEUDO_PHILOX4_32_10", 161)  # curand.h
        u = cp.random.RandomState(seed, method=philox).random_sample(shape, dtype=kind)
        u *= 2 * _SQRT3 * scale
        u -= _SQRT3 * scale
        drawn = u if dtype in ("float32", "float64") else u.astype(self.np_dtype(dtype))
        return drawn if order == "C" else cp.asfortranarray(drawn)

    @contextlib.contextmanager
    def follow_torch(self, torch, allocate: bool):
        """CuPy's current stream is torch's current one; with ``allocate``, CuPy allocates from torch's caching
        allocator on it (inside ``torch.cuda.graph``: the graph's private pool). No-op without CuPy."""
        if self.available() is not True or self.arrays != "cupy":
            yield
            return
        cp = cupy_module()
        stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
        before = cp.cuda.get_allocator()
        with stream:
            if allocate:
                cp.cuda.set_allocator(_torch_allocator(torch, cp))
            try:
                yield
            finally:
                cp.cuda.set_allocator(before)

    def np_dtype(self, name: str) -> np.dtype:
        if name == "bfloat16":
            dt = self.bfloat16()
            if dt is None:
                raise ValueError("dtype: bfloat16 on the nvidia target needs ml_dtypes (and CuPy >= 14 with CuPy)")
            return dt
        return np.dtype(name)

    def to_host(self, array) -> np.ndarray:
        lib = self._require()
        if self.arrays == "cupy":
            return lib.asnumpy(array)
        host = array.detach().cpu()
        if host.dtype == lib.bfloat16:  # NumPy has no bfloat16: the bits, read as ml_dtypes' (or widened)
            dt = self.bfloat16()
            return host.view(lib.int16).numpy().view(dt) if dt is not None else host.float().numpy()
        return host.numpy()

    def from_host(self, array, dtype, order="C"):
        lib = self._require()
        host = np.asarray(array)
        if self.arrays == "cupy":
            host = host.astype(self.np_dtype(dtype))
            return lib.asarray(np.asfortranarray(host) if order == "F" else np.ascontiguousarray(host))
        wide = lib.from_numpy(np.ascontiguousarray(host.astype(np.float64 if dtype in ("float64", "complex128")
                                                                else np.complex64 if dtype == "complex64"
                                                                else np.float32)))
        flat = wide.to(device="cuda", dtype=_torch_dtype(dtype))
        if order != "F" or flat.ndim < 2:
            return flat
        dims = tuple(reversed(range(flat.ndim)))
        return flat.permute(dims).contiguous().permute(dims)  # same values, column-major storage

    def full(self, shape, value, dtype):
        lib = self._require()
        if self.arrays == "cupy":
            return lib.full(shape, value, dtype=self.np_dtype(dtype))
        return lib.full(tuple(shape), value, dtype=_torch_dtype(dtype), device="cuda")

    def empty(self, shape, dtype):
        # A dispatched call's output: the dtype object cached, so a warm call pays only the allocation.
        found = self._empties.get(dtype)
        if found is None:
            lib = self._require()
            if self.arrays == "cupy":
                found = (lib.empty, self.np_dtype(dtype))
            else:
                torch_dtype = _torch_dtype(dtype)
                found = (lambda shape, dtype: lib.empty(shape, dtype=dtype, device="cuda"), torch_dtype)
            self._empties[dtype] = found
        return found[0](shape, dtype=found[1])

    def synchronize(self):
        lib = self._require()
        if self.arrays == "cupy":
            lib.cuda.get_current_stream().synchronize()
        else:
            lib.cuda.current_stream().synchronize()

    def capturing(self) -> bool:
        """True while torch's or CuPy's current stream is being captured into a CUDA graph. Asked on a miss only
        (never on the hot path); a library not imported yet cannot be capturing."""
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing():
            return True
        cp = sys.modules.get("cupy")
        if cp is None or self.arrays != "cupy":
            return False
        try:
            return bool(cp.cuda.get_current_stream().is_capturing())
        except Exception:  # the legacy stream refuses the query while another stream captures: capturing
            return True

    def timer(self) -> CudaTimer:
        if self._timer is None:
            self._require()
            self._timer = CudaTimer("torch" if self.arrays == "torch" else "cupy")
        return self._timer

    # -- environment key ------------------------------------------------------
    def environment(self):
        ok = self.available()
        if ok is not True:
            return {"available": str(ok)}
        try:
            import torch

            torch_version = torch.__version__
        except ImportError:
            torch_version = "absent"
        if self.arrays == "torch":
            return _torch_environment() | {"numpy": np.__version__, "torch": torch_version,
                                           "bfloat16": "yes" if self.bfloat16() is not None else "no"}
        cp = cupy_module()
        dev = cp.cuda.Device()
        props = cp.cuda.runtime.getDeviceProperties(dev.id)
        name = props["name"]
        return {  # no "arrays" field here: CuPy's keys stayed as they were before PyTorch could be the library
            "device": name.decode() if isinstance(name, bytes) else str(name),
            "arch": f"sm_{props['major']}{props['minor']}",
            "compute_capability": f"{props['major']}.{props['minor']}",
            "sm_count": str(props["multiProcessorCount"]),
            "driver": _version(cp.cuda.runtime.driverGetVersion()),
            "runtime": _version(cp.cuda.runtime.runtimeGetVersion()),
            "cublas": _cublas_version(cp),
            "nvrtc": ".".join(str(v) for v in cp.cuda.nvrtc.getVersion()),
            "cupy": cp.__version__,
            "numpy": np.__version__,
            "bfloat16": "yes" if self.bfloat16() is not None else "no",
            "torch": torch_version,
        }


def _torch():
    import torch

    return torch


def _torch_allocator(torch, cp):
    device = torch.cuda.current_device()

    def allocate(size: int):
        if size == 0:
            return cp.cuda.MemoryPointer(cp.cuda.Memory(0), 0)
        ptr = torch.cuda.caching_allocator_alloc(size, device, torch.cuda.current_stream())
        return cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(ptr, size, _TorchBlock(torch, ptr)), 0)

    return allocate


class _TorchBlock:
    """Owner of one block from torch's caching allocator: given back when the last CuPy array on it dies."""

    __slots__ = ("free", "ptr")

    def __init__(self, torch, ptr: int):
        self.free, self.ptr = torch.cuda.caching_allocator_delete, ptr

    def __del__(self):
        self.free(self.ptr)


def _torch_dtype(name: str):
    return getattr(_torch(), TORCH_DTYPES[name])


def _torch_environment() -> dict[str, str]:
    """The environment fields PyTorch can tell (no CuPy): device, architecture, SMs, its CUDA runtime."""
    torch = _torch()
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {
        "arrays": "torch",
        "device": props.name,
        "arch": f"sm_{props.major}{props.minor}",
        "compute_capability": f"{props.major}.{props.minor}",
        "sm_count": str(props.multi_processor_count),
        "runtime": str(torch.version.cuda),  # torch's wheel ships its CUDA libraries (cuBLAS): its version says which
        "cupy": "absent",
    }


class CudaTimer(Timer):
    """Events on the current stream (CuPy's, or torch's without CuPy); the L2 is flushed by overwriting a
    buffer of twice its size."""

    def __init__(self, arrays: str):
        self.arrays = arrays
        if arrays == "cupy":
            cp = self.lib = cupy_module()
            l2 = int(cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id).get("l2CacheSize", 50 << 20))
            self._scratch = cp.empty(max(2 * l2, 64 << 20) // 4, dtype=cp.float32)
            self._start, self._stop = cp.cuda.Event(), cp.cuda.Event()
        else:
            torch = self.lib = _torch()
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            l2 = int(getattr(props, "L2_cache_size", 0) or (50 << 20))
            self._scratch = torch.empty(max(2 * l2, 64 << 20) // 4, dtype=torch.float32, device="cuda")
            self._start = torch.cuda.Event(enable_timing=True)
            self._stop = torch.cuda.Event(enable_timing=True)
        self.cache_bytes = l2

    def flush_cache(self):
        if self.arrays == "cupy":
            self._scratch.fill(1.0)
        else:
            self._scratch.fill_(1.0)

    def _stream(self):
        lib = self.lib
        return lib.cuda.get_current_stream() if self.arrays == "cupy" else lib.cuda.current_stream()

    def time(self, fn, mode, calls=1):
        stream = self._stream()
        if mode != "latency":  # device: one call between events; stream: `calls` calls back to back
            self._start.record(stream)
            for _ in range(calls):
                fn()
            self._stop.record(stream)
            self._stop.synchronize()
            if self.arrays == "cupy":
                return self.lib.cuda.get_elapsed_time(self._start, self._stop) * 1e-3 / calls
            return self._start.elapsed_time(self._stop) * 1e-3 / calls
        stream.synchronize()
        t0 = time.perf_counter_ns()
        fn()
        stream.synchronize()
        return (time.perf_counter_ns() - t0) * 1e-9


TORCH_DTYPES = {"float16": "float16", "bfloat16": "bfloat16", "float32": "float32", "float64": "float64",
                "complex64": "complex64", "complex128": "complex128"}


# torch dtype -> the NumPy dtype CuPy uses for it, filled as dtypes are seen.
_np_of_torch: Memo = Memo()


def cupy_view(tensor):
    """A zero-copy CuPy view of a torch CUDA tensor.

    Built from the tensor's pointer, shape and strides over ``UnownedMemory`` that keeps the tensor
    alive: measured on an H200, 2.5 us a view against 15.5 us for ``cupy.from_dlpack`` (whose stream
    handshake a view on the caller's own stream does not need). Empty tensors go through DLPack.
    """
    cp = cupy_module()
    dt = tensor.dtype
    npdt = _np_of_torch.get(dt)
    if npdt is None:
        name = str(dt).rsplit(".", 1)[-1]
        if name not in TORCH_DTYPES:
            return cp.from_dlpack(tensor)  # a dtype no region accepts: its own error follows
        npdt = _np_of_torch[dt] = TARGET.np_dtype(name)
    n = tensor.numel()
    if n == 0:
        return cp.from_dlpack(tensor)
    size = npdt.itemsize
    span = (1 + sum((d - 1) * st for d, st in zip(tensor.shape, tensor.stride()))) * size  # bytes reached
    mem = cp.cuda.UnownedMemory(tensor.data_ptr(), span, tensor, tensor.get_device())
    return cp.ndarray(tuple(tensor.shape), npdt, cp.cuda.MemoryPointer(mem, 0),
                      tuple(st * size for st in tensor.stride()))


def torch_view(array):
    """A zero-copy torch tensor of a CuPy array, ordered after the work CuPy's current stream has queued on it.

    What ``torch.from_dlpack(array)`` does, without its Python-level stream lookup (``torch.cuda.current_stream``
    builds a Stream object, 4 µs a call): the consumer stream is torch's current raw stream on the array's
    device (0, the legacy default stream, is passed as 1 as DLPack asks), and CuPy's ``__dlpack__`` makes that
    stream wait for its own when they differ."""
    import torch

    c = torch._C
    if not hasattr(c, "_cuda_getCurrentRawStream"):
        return torch.from_dlpack(array)
    ptr = c._cuda_getCurrentRawStream(array.data.device_id)
    return torch.from_dlpack(array.__dlpack__(stream=ptr or 1))


def torch_empty(shape, dtype: str, like):
    """(CuPy view, torch tensor) of a new output from torch's caching allocator, on ``like``'s device:
    the output of a dispatched call whose caller passed torch tensors."""
    import torch

    tensor = torch.empty(tuple(shape), dtype=getattr(torch, TORCH_DTYPES[dtype]), device=like.device)
    return cupy_view(tensor), tensor


_external_streams: Memo = Memo()


def torch_stream():
    """A CuPy stream wrapping torch's current stream when it is not CuPy's current one, else None.

    A CuPy kernel dispatched for a torch caller must run in order with the caller's torch work.
    (torch's raw-stream query: ``torch.cuda.current_stream()`` builds a Stream object, 4 us a call.)"""
    import torch

    cp = cupy_module()
    c = torch._C
    ptr = c._cuda_getCurrentRawStream(c._cuda_getDevice()) if hasattr(c, "_cuda_getCurrentRawStream") \
        else torch.cuda.current_stream().cuda_stream
    if ptr == cp.cuda.get_current_stream().ptr:
        return None
    stream = _external_streams.get(ptr)
    if stream is None:
        stream = _external_streams[ptr] = cp.cuda.ExternalStream(ptr)
    return stream


def _version(code: int) -> str:
    """CUDA's integer version (12040) as text (12.4)."""
    return f"{code // 1000}.{(code % 1000) // 10}"


def _cublas_version(cp) -> str:
    try:
        from cupy_backends.cuda.libs import cublas

        code = cublas.getVersion(cp.cuda.device.get_cublas_handle())
        return f"{code // 10000}.{(code % 10000) // 100}.{code % 100}" if code >= 10000 else str(code)
    except Exception as exc:
        return f"unknown ({type(exc).__name__})"


TARGET = NvidiaTarget()
