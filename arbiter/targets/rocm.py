"""The ``rocm`` target: AMD GPUs through hip-python (HIP runtime, hiprtc, hipBLAS, hipBLASLt).

Availability gate: hip-python imports without ROCm (it dlopens the libraries on the first call),
so the target is available only when that first call works: ``hipGetDeviceCount`` succeeds with a
count above zero, and a tiny kernel compiled by hiprtc for the device's architecture runs and
computes the right answer. Otherwise ``available()`` returns the real reason (e.g. "failed to
dlopen libamdhip64.so") and nothing else is affected.

hip-python has no array type, so this target brings a small one: ``RocmArray``, a device buffer
with NumPy's metadata (shape, dtype, strides, flags, basic slicing). Every call across the
hip-python boundary goes through the module-level handles ``hip``, ``hiprtc``, ``hipblas`` and
``hipblaslt`` (bound by ``bindings()`` on first use) and through ``check``, which turns a status
that is not success into a ``HipError`` naming the call.
"""
from __future__ import annotations

import ctypes
import re
import time
from typing import Any, Literal, NamedTuple

import numpy as np

from arbiter import targets
from arbiter.errors import TargetUnavailable
from arbiter.memo import Memo
from arbiter.targets import Target, Timer

# The hip-python boundary: bound on first use by bindings(); tests inject fakes here.
# Typed Any: a hip-python module once bound (or a test's fake), None before; callers bind first.
hip: Any = None
hiprtc: Any = None
hipblas: Any = None  # None when hip-python's libraries part (hipBLAS) is not installed
hipblaslt: Any = None
hip_python_version = "absent"

# Header-free: hiprtc supplies the HIP device runtime itself.
_PROBE_SOURCE = r"""
extern "C" __global__ void arbiter_probe(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}
"""


class HipError(RuntimeError):
    """A HIP, hiprtc or hipBLAS call returned a status other than success."""

    def __init__(self, call: str, status, detail: str = ""):
        self.call, self.status = call, status
        name = getattr(status, "name", str(status))
        super().__init__(f"{call} failed: {name}" + (f" ({detail})" if detail else ""))


def bindings():
    """Bind the hip-python modules (ImportError when hip-python is not installed).

    ``from hip import ...`` works for hip-python 6.x (submodules) and 10.x (aliases of rocm.bindings).
    """
    global hip, hiprtc, hipblas, hipblaslt, hip_python_version
    if hip is None:
        import hip as package
        from hip import hip as runtime
        from hip import hiprtc as rtc

        try:
            from hip import hipblas as blas
        except ImportError:  # hip-python without its libraries part
            blas = None
        try:
            from hip import hipblaslt as blaslt
        except ImportError:
            blaslt = None
        hipblas, hipblaslt = blas, blaslt
        hip_python_version = str(getattr(package, "__version__", "unknown"))
        hiprtc, hip = rtc, runtime
    return hip


def check(result, call: str):
    """The values after the status in a hip-python result tuple; HipError when the status is not success.

    hip-python returns ``(status, *outputs)`` for every call; one output is returned bare, none as None.
    """
    status, *values = result if isinstance(result, tuple) else (result,)
    if int(status) != 0:
        raise HipError(call, status, _error_text(status, call))
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def _error_text(status, call: str) -> str:
    try:
        if call.startswith("hiprtc"):
            text = hiprtc.hiprtcGetErrorString(status)
        elif call.startswith("hip") and not call.startswith("hipblas"):
            text = hip.hipGetErrorString(status)
        else:
            return ""
        text = text[-1] if isinstance(text, tuple) else text
        return text.decode() if isinstance(text, bytes) else str(text)
    except Exception:  # the error text is a courtesy; the status name is already in the message
        return ""


def _tidy(exc: Exception) -> str:
    """An exception's text without hip-python's bytes reprs: failed to dlopen 'libamdhip64.so': ..."""
    return re.sub(r"b'([^']*)'", r"\1", str(exc)).replace("''", "'")


def base_arch(gcn_arch: str) -> str:
    """The architecture without target features, as rocFFT keys its cache: ``gfx90a:sramecc+:xnack-`` -> ``gfx90a``."""
    return gcn_arch.split(":", 1)[0].strip()


def _text(value) -> str:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).split(b"\0", 1)[0].decode(errors="replace")
    return str(value)


def address(pointer) -> int:
    """The integer address of a hip-python pointer object (or an int)."""
    return pointer if isinstance(pointer, int) else int(pointer)


# -- device memory --------------------------------------------------------------------------------
class Allocation:
    """One hipMalloc'd buffer, freed when the last array viewing it goes away."""

    __slots__ = ("ptr", "nbytes", "__weakref__")

    def __init__(self, nbytes: int):
        self.nbytes = nbytes
        self.ptr = address(check(hip.hipMalloc(max(nbytes, 4)), "hipMalloc"))

    def __del__(self):
        try:
            if self.ptr and hip is not None:
                hip.hipFree(ctypes.c_void_p(self.ptr))
        except Exception:  # at interpreter exit the runtime may be gone already
            pass


class DevicePointer(NamedTuple):
    ptr: int


class RocmArray:
    """A device array: an ``Allocation`` plus NumPy metadata (shape, dtype, strides, byte offset).

    The metadata is a NumPy view over a one-element anchor (never read), so basic slicing follows
    NumPy's rules exactly and ``flags``/``strides`` mean what they mean for NumPy.
    """

    __slots__ = ("allocation", "_anchor", "_meta")

    def __init__(self, allocation: Allocation, anchor: np.ndarray, meta: np.ndarray):
        self.allocation, self._anchor, self._meta = allocation, anchor, meta

    @classmethod
    def empty(cls, shape, dtype, order: Literal["C", "F"] = "C") -> RocmArray:
        dtype = np.dtype(dtype)
        shape = tuple(int(s) for s in shape)
        layout = np.empty(shape, dtype=np.uint8, order=order)  # strides in elements of one byte...
        strides = tuple(s * dtype.itemsize for s in layout.strides)  # ...scaled to the element size
        anchor = np.zeros(1, dtype=dtype)
        meta = np.lib.stride_tricks.as_strided(anchor, shape=shape, strides=strides, writeable=False)
        return cls(Allocation(int(np.prod(shape)) * dtype.itemsize), anchor, meta)

    shape = property(lambda self: self._meta.shape)
    dtype = property(lambda self: self._meta.dtype)
    strides = property(lambda self: self._meta.strides)
    ndim = property(lambda self: self._meta.ndim)
    size = property(lambda self: self._meta.size)
    itemsize = property(lambda self: self._meta.itemsize)
    flags = property(lambda self: self._meta.flags)
    nbytes = property(lambda self: self._meta.size * self._meta.itemsize)

    @property
    def offset(self) -> int:
        """Bytes from the allocation's start to element [0, ..., 0]."""
        return self._meta.__array_interface__["data"][0] - self._anchor.__array_interface__["data"][0]

    @property
    def ptr(self) -> int:
        return self.allocation.ptr + self.offset

    @property
    def data(self) -> DevicePointer:
        """CuPy's spelling of the address (``a.data.ptr``), so launch planning shared with the nvidia
        target (alignment checks) reads a RocmArray as it reads a CuPy array."""
        return DevicePointer(self.ptr)

    def __getitem__(self, index) -> RocmArray:
        view = self._meta[index]
        if not isinstance(view, np.ndarray):
            raise IndexError("RocmArray: index with slices (a view); an element read needs to_host()")
        return RocmArray(self.allocation, self._anchor, view)

    def __repr__(self):
        return f"RocmArray(shape={self.shape}, dtype={self.dtype}, ptr=0x{self.ptr:x})"


def upload(host: np.ndarray) -> RocmArray:
    """A device copy of a C- or F-contiguous host array, in the same order (no gate: the probe uses it)."""
    out = RocmArray.empty(host.shape, host.dtype, order="F" if not host.flags.c_contiguous else "C")
    if host.nbytes:
        check(hip.hipMemcpy(ctypes.c_void_p(out.ptr), ctypes.c_void_p(host.ctypes.data), host.nbytes,
                            hip.hipMemcpyKind.hipMemcpyHostToDevice), "hipMemcpy (host to device)")
    return out


def download(array: RocmArray) -> np.ndarray:
    """A host copy of a device array, any strides (synchronizes the device first)."""
    check(hip.hipDeviceSynchronize(), "hipDeviceSynchronize")
    alloc = array.allocation
    raw = np.empty(alloc.nbytes, dtype=np.uint8)
    if alloc.nbytes:
        check(hip.hipMemcpy(ctypes.c_void_p(raw.ctypes.data), ctypes.c_void_p(alloc.ptr), alloc.nbytes,
                            hip.hipMemcpyKind.hipMemcpyDeviceToHost), "hipMemcpy (device to host)")
    view = np.ndarray(array.shape, dtype=array.dtype, buffer=raw, offset=array.offset, strides=array.strides)
    return view.copy()


# -- kernels: hiprtc compile, module load, launch -------------------------------------------------
def kernel_args(args) -> tuple:
    """Kernel arguments as the ctypes values hip-python packs into ``hipModuleLaunchKernel``'s ``extra``.

    Device arrays pass their address; NumPy scalars pass their exact C type (np.int32 -> int,
    np.int64 -> long long, np.float32 -> float). Anything else is refused: a Python int or float
    has no fixed C width, and guessing one would shift every argument after it.
    """
    packed: list = []  # ctypes values of several C types
    for i, arg in enumerate(args):
        if isinstance(arg, RocmArray):
            packed.append(ctypes.c_void_p(arg.ptr))
        elif arg is None:
            packed.append(ctypes.c_void_p(0))
        elif isinstance(arg, np.int32):
            packed.append(ctypes.c_int32(int(arg)))
        elif isinstance(arg, np.int64):
            packed.append(ctypes.c_int64(int(arg)))
        elif isinstance(arg, np.float32):
            packed.append(ctypes.c_float(float(arg)))
        else:
            raise TypeError(f"args[{i}]: {type(arg).__name__} is not a kernel argument; pass a RocmArray, "
                            "None, np.int32, np.int64 or np.float32")
    return tuple(packed)


class CompileError(RuntimeError):
    """hiprtc rejected a source; the message carries hiprtc's log."""


def compile_source(source: str, name: str, arch: str, options: tuple[str, ...] = ()) -> bytes:
    """The code object of ``source`` compiled by hiprtc for ``arch`` (the full gcnArchName, features included)."""
    prog = check(hiprtc.hiprtcCreateProgram(source.encode(), f"{name}.hip".encode(), 0, [], []),
                 "hiprtcCreateProgram")
    try:
        opts = [f"--offload-arch={arch}".encode(), b"-std=c++17", b"-O3"] + [o.encode() for o in options]
        status = hiprtc.hiprtcCompileProgram(prog, len(opts), opts)
        if int(status[0] if isinstance(status, tuple) else status) != 0:
            raise CompileError(f"hiprtc could not compile {name!r} for {arch}:\n{_program_log(prog)}")
        size = check(hiprtc.hiprtcGetCodeSize(prog), "hiprtcGetCodeSize")
        code = bytearray(size)
        check(hiprtc.hiprtcGetCode(prog, code), "hiprtcGetCode")
        return bytes(code)
    finally:
        hiprtc.hiprtcDestroyProgram(prog)


def _program_log(prog) -> str:
    try:
        size = check(hiprtc.hiprtcGetProgramLogSize(prog), "hiprtcGetProgramLogSize")
        log = bytearray(size)
        check(hiprtc.hiprtcGetProgramLog(prog, log), "hiprtcGetProgramLog")
        return _text(log)
    except HipError as exc:
        return f"(no log: {exc})"


class Kernel:
    """A loaded kernel: ``kernel(grid, block, args)`` launches it on the null stream, like ``cupy.RawKernel``."""

    __slots__ = ("name", "module", "function")

    def __init__(self, code: bytes, name: str):
        self.name = name
        self.module = check(hip.hipModuleLoadData(code), "hipModuleLoadData")
        self.function = check(hip.hipModuleGetFunction(self.module, name.encode()), "hipModuleGetFunction")

    def __call__(self, grid, block, args):
        gx, gy, gz = (tuple(grid) + (1, 1))[:3]
        bx, by, bz = (tuple(block) + (1, 1))[:3]
        check(hip.hipModuleLaunchKernel(self.function, gx, gy, gz, bx, by, bz, 0, None, None, kernel_args(args)),
              f"hipModuleLaunchKernel({self.name})")


# -- the target -----------------------------------------------------------------------------------
class RocmTarget(Target):
    name = "rocm"
    # Not verified on an AMD GPU yet (it shares nvidia's kernel templates): the special-value families are not
    # drawn for its keys (``Target.special_values_verified``).
    special_values_verified = False
    visible_devices = "HIP_VISIBLE_DEVICES"

    def __init__(self):
        self._available: bool | str | None = None
        self._props = None
        self._timer: HipTimer | None = None

    # -- the gate ---------------------------------------------------------------------------------
    def available(self):
        if self._available is None:
            self._available = self._probe()
        return self._available

    def timer(self) -> HipTimer:
        if self._timer is None:
            ok = self.available()
            if ok is not True:
                raise TargetUnavailable("rocm", str(ok))
            self._timer = HipTimer()
        return self._timer

    def reset(self) -> None:
        """Forget the gate's answer and the device properties (the next call probes again)."""
        self._available, self._props = None, None

    def _probe(self) -> bool | str:
        try:
            bindings()
        except Exception as exc:
            return f"hip-python does not import ({type(exc).__name__}: {exc}); install kernel-arbiter[rocm]"
        try:
            count = check(hip.hipGetDeviceCount(), "hipGetDeviceCount")
        except Exception as exc:  # hip-python raises RuntimeError("failed to dlopen ...") without ROCm
            return f"no HIP runtime: {_tidy(exc)}"
        if count < 1:
            return "no AMD GPU is visible (hipGetDeviceCount returned 0; HIP_VISIBLE_DEVICES, driver)"
        try:
            kernel = Kernel(compile_source(_PROBE_SOURCE, "arbiter_probe", self.gcn_arch()), "arbiter_probe")
            x = np.arange(37, dtype=np.float32)
            dx, dy = upload(x), RocmArray.empty(x.shape, np.float32)
            kernel((1,), (64,), (dx, dy, np.int32(x.size)))
            if not np.allclose(download(dy), 2 * x + 1):
                return "the hiprtc probe kernel ran but computed a wrong result"
        except Exception as exc:
            return f"a hiprtc-compiled probe kernel failed: {type(exc).__name__}: {exc}"
        return True

    def _require(self):
        ok = self.available()
        if ok is not True:
            raise TargetUnavailable("rocm", str(ok))

    def properties(self):
        """hipDeviceProp_t of the current device (read once)."""
        if self._props is None:
            device = check(hip.hipGetDevice(), "hipGetDevice")
            self._props = check(hip.hipGetDeviceProperties(device), "hipGetDeviceProperties")
        return self._props

    def gcn_arch(self) -> str:
        """The device's full architecture string, features included (``gfx90a:sramecc+:xnack-``)."""
        return _text(self.properties().gcnArchName)

    # -- arrays -----------------------------------------------------------------------------------
    def owns(self, array):
        return isinstance(array, RocmArray)

    def to_host(self, array) -> np.ndarray:
        self._require()
        return download(array)

    def from_host(self, array, dtype, order="C"):
        self._require()
        host = np.asarray(array).astype(_np_dtype(dtype))
        return upload(np.asfortranarray(host) if order == "F" else np.ascontiguousarray(host))

    def full(self, shape, value, dtype):
        return self.from_host(np.full(shape, value, dtype=_np_dtype(dtype)), dtype)

    def empty(self, shape, dtype):
        self._require()
        return RocmArray.empty(shape, _np_dtype(dtype))

    def synchronize(self):
        check(hip.hipDeviceSynchronize(), "hipDeviceSynchronize")

    # -- environment key --------------------------------------------------------------------------
    def environment(self):
        ok = self.available()
        if ok is not True:
            return {"available": str(ok)}
        props = self.properties()
        arch = self.gcn_arch()
        runtime = check(hip.hipRuntimeGetVersion(), "hipRuntimeGetVersion")
        return {
            "device": _text(props.name),
            "arch": base_arch(arch),
            "gcn_arch": arch,
            "cu_count": str(props.multiProcessorCount),
            "runtime": hip_version_text(runtime),
            "driver": hip_version_text(check(hip.hipDriverGetVersion(), "hipDriverGetVersion")),
            "hiprtc": ".".join(str(v) for v in check(hiprtc.hiprtcVersion(), "hiprtcVersion")),
            "hipblas": hipblas_version(),
            "hipblaslt": hipblaslt_version(),
            "hip_python": hip_python_version,
            "numpy": np.__version__,
        }


def _np_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        raise ValueError("dtype: bfloat16 is not served on the rocm target yet (float32 and float16 are)")
    return np.dtype(name)


def hip_version_text(code: int) -> str:
    """HIP's integer version (major * 10,000,000 + minor * 100,000 + patch) as text: 60342134 -> 6.3.42134."""
    code = int(code)
    return f"{code // 10_000_000}.{(code // 100_000) % 100}.{code % 100_000}"


_handles: Memo = Memo()


def blas_handle():
    """The process's hipBLAS handle (created on first use, on the null stream)."""
    handle = _handles.get("hipblas")
    if handle is None:
        handle = _handles["hipblas"] = check(hipblas.hipblasCreate(), "hipblasCreate")
    return handle


def blaslt_handle():
    """The process's hipBLASLt handle (created on first use)."""
    handle = _handles.get("hipblaslt")
    if handle is None:
        handle = _handles["hipblaslt"] = check(hipblaslt.hipblasLtCreate(), "hipblasLtCreate")
    return handle


def hipblas_version() -> str:
    """hipBLAS's version from the library itself (hipblasGetVersion on a handle), or why it is unknown."""
    if hipblas is None:
        return "absent (install hip-python[libraries])"
    try:
        version = ctypes.c_int(0)
        check(hipblas.hipblasGetVersion(blas_handle(), version), "hipblasGetVersion")
        return _blas_version_text(version.value)
    except Exception as exc:
        return f"unknown ({type(exc).__name__}: {exc})"


def hipblaslt_version() -> str:
    """hipBLASLt's version (hipblasLtGetVersion on a handle), or why it is unknown."""
    if hipblaslt is None:
        return "absent (install hip-python[libraries])"
    try:
        return _blas_version_text(check(hipblaslt.hipblasLtGetVersion(blaslt_handle()), "hipblasLtGetVersion"))
    except Exception as exc:
        return f"unknown ({type(exc).__name__}: {exc})"


def _blas_version_text(code: int) -> str:
    """hipBLAS/hipBLASLt integer versions are major * 10,000 + minor * 100 + patch."""
    code = int(code)
    return f"{code // 10_000}.{(code // 100) % 100}.{code % 100}"


class HipTimer(Timer):
    """HIP events through hip-python (ROCm target); built only when that target is available.

    Every call goes through this module's ``hip`` handle and ``check``, so a failed
    event call raises ``HipError`` naming it instead of timing garbage. The L2 is flushed by
    overwriting a device buffer of twice its size (HIP reports l2CacheSize as 0 on some devices; then
    256 MiB, above the largest AMD last-level cache, is used).
    """

    def __init__(self):
        hip = bindings()
        l2 = int(getattr(TARGET.properties(), "l2CacheSize", 0) or 0)
        self.cache_bytes = l2 or (128 << 20)
        self._scratch = RocmArray.empty((max(2 * l2, 256 << 20) // 4,), np.float32)
        self._start = check(hip.hipEventCreate(), "hipEventCreate")
        self._stop = check(hip.hipEventCreate(), "hipEventCreate")

    def flush_cache(self):
        check(hip.hipMemsetD32(ctypes.c_void_p(self._scratch.ptr), 0x3F800000, self._scratch.size), "hipMemsetD32")

    def time(self, fn, mode, calls=1):
        if mode != "latency":  # device: one call between events; stream: `calls` calls back to back
            check(hip.hipEventRecord(self._start, None), "hipEventRecord")
            for _ in range(calls):
                fn()
            check(hip.hipEventRecord(self._stop, None), "hipEventRecord")
            check(hip.hipEventSynchronize(self._stop), "hipEventSynchronize")
            return check(hip.hipEventElapsedTime(self._start, self._stop), "hipEventElapsedTime") * 1e-3 / calls
        check(hip.hipDeviceSynchronize(), "hipDeviceSynchronize")
        t0 = time.perf_counter_ns()
        fn()
        check(hip.hipDeviceSynchronize(), "hipDeviceSynchronize")
        return (time.perf_counter_ns() - t0) * 1e-9


TARGET = RocmTarget()
# Region construction finds a target by array type (one dict lookup); RocmArray exists only once this
# module is imported, so it announces itself here.
targets.register_array_type(RocmArray, "rocm", TARGET.adopt)
