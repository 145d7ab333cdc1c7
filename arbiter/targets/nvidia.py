"""The ``nvidia`` target: CuPy arrays on an NVIDIA GPU (PyTorch CUDA tensors through DLPack).

Availability gate: the target is available only when CuPy imports, a CUDA device
is present, and a tiny kernel compiled with NVRTC runs and gives the right
answer; otherwise ``available()`` returns the reason and nothing else breaks.
CuPy is imported lazily, so this module imports on machines without it.
"""
from __future__ import annotations

import numpy as np

from arbiter.errors import TargetUnavailable
from arbiter.memo import Memo
from arbiter.targets import Target

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
    """NumPy's bfloat16 (ml_dtypes) when CuPy accepts it, else None."""
    try:
        import ml_dtypes

        cp = cupy_module()
        dt = np.dtype(ml_dtypes.bfloat16)
        cp.zeros(1, dtype=dt)  # CuPy < 14 raises here: no bfloat16 support
        return dt
    except Exception:
        return None


class NvidiaTarget(Target):
    name = "nvidia"

    def __init__(self):
        self._available: bool | str | None = None
        self._bf16 = "unknown"
        self._empties: dict = {}  # dtype name -> (cupy.empty, NumPy dtype)

    # -- the gate -------------------------------------------------------------
    def available(self):
        if self._available is None:
            self._available = self._probe()
        return self._available

    @staticmethod
    def _probe() -> bool | str:
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

    def _require(self):
        ok = self.available()
        if ok is not True:
            raise TargetUnavailable("nvidia", str(ok))
        return cupy_module()

    # -- arrays ---------------------------------------------------------------
    def owns(self, array):
        module = type(array).__module__
        if module.startswith("cupy"):
            return True
        if module.startswith("torch"):
            return getattr(array, "is_cuda", False)
        return False

    def adopt(self, array):
        """CuPy arrays as they are, no conversion back. Torch CUDA tensors also as they are, with
        ``torch.from_dlpack`` to bring a CuPy result back: a region keeps a torch caller's tensors and
        views them (``cupy_view``) only for a CuPy kernel."""
        if type(array).__module__.startswith("cupy"):
            return array, None
        self._require()
        import torch

        return array, torch.from_dlpack

    def bfloat16(self):
        """The bfloat16 dtype CuPy takes, or None when this CuPy has no bfloat16 (CuPy < 14)."""
        if self._bf16 == "unknown":
            self._bf16 = _bfloat16_dtype()
        return self._bf16

    def np_dtype(self, name: str) -> np.dtype:
        if name == "bfloat16":
            dt = self.bfloat16()
            if dt is None:
                raise ValueError("dtype: bfloat16 on the nvidia target needs CuPy >= 14 and ml_dtypes")
            return dt
        return np.dtype(name)

    def to_host(self, array) -> np.ndarray:
        return self._require().asnumpy(array)

    def from_host(self, array, dtype, order="C"):
        cp = self._require()
        host = np.asarray(array).astype(self.np_dtype(dtype))
        return cp.asarray(np.asfortranarray(host) if order == "F" else np.ascontiguousarray(host))

    def full(self, shape, value, dtype):
        return self._require().full(shape, value, dtype=self.np_dtype(dtype))

    def empty(self, shape, dtype):
        # A dispatched call's output: the dtype object cached, so a warm call pays only cupy.empty.
        found = self._empties.get(dtype)
        if found is None:
            found = self._empties[dtype] = (self._require().empty, self.np_dtype(dtype))
        return found[0](shape, dtype=found[1])

    def synchronize(self):
        self._require().cuda.get_current_stream().synchronize()

    # -- environment key ------------------------------------------------------
    def environment(self):
        ok = self.available()
        if ok is not True:
            return {"available": str(ok)}
        cp = cupy_module()
        dev = cp.cuda.Device()
        props = cp.cuda.runtime.getDeviceProperties(dev.id)
        name = props["name"]
        env = {
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
        }
        try:
            import torch

            env["torch"] = torch.__version__
        except ImportError:
            env["torch"] = "absent"
        return env


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
