"""A fake of the hip-python boundary (``hip``, ``hiprtc``, ``hipblas`` handles of arbiter.targets.rocm).

Device memory is host memory (hipMalloc hands out NumPy buffers' addresses), so copies and hipBLAS
really move and compute data; kernels are not compiled: hiprtc records the source and options, and a
launch records its decoded arguments (through hip-python's own HipModuleLaunchKernel_extra packing
when hip-python is installed) and runs a Python stand-in only for the gate's probe kernel.
Status codes are plain ints (0 = success) with the enum members hip-python's callers use.
"""
from __future__ import annotations

import ctypes
import enum
import types

import numpy as np


class Status(enum.IntEnum):
    hipSuccess = 0
    hipErrorInvalidValue = 1
    hipErrorNoDevice = 100


class FakeHip(types.SimpleNamespace):
    def __init__(self, devices=1, arch="gfx90a:sramecc+:xnack-"):
        super().__init__()
        self.devices, self.arch = devices, arch
        self.buffers: dict[int, np.ndarray] = {}
        self.launches: list[tuple] = []
        self.fail: dict[str, int] = {}  # call name -> status to return instead of success
        self.hipMemcpyKind = types.SimpleNamespace(hipMemcpyHostToDevice=1, hipMemcpyDeviceToHost=2)
        self.hipDataType = types.SimpleNamespace(HIP_R_32F=0, HIP_R_16F=2, HIP_R_16BF=14)

    def _status(self, call):
        return self.fail.get(call, 0)

    def hipGetDeviceCount(self):
        return (Status.hipErrorNoDevice, 0) if self.devices == 0 else (self._status("hipGetDeviceCount"), self.devices)

    def hipGetDevice(self):
        return 0, 0

    def hipGetDeviceProperties(self, device):
        props = types.SimpleNamespace(name=b"AMD Instinct MI250X\0\0", gcnArchName=self.arch.encode() + b"\0",
                                      multiProcessorCount=110, l2CacheSize=8 << 20)
        return self._status("hipGetDeviceProperties"), props

    def hipRuntimeGetVersion(self):
        return 0, 60342134

    def hipDriverGetVersion(self):
        return 0, 60342134

    def hipGetErrorString(self, status):
        return 0, f"fake error {int(status)}".encode()

    def hipMalloc(self, nbytes):
        if self.fail.get("hipMalloc"):
            return Status(self.fail["hipMalloc"]), None
        buf = np.zeros(nbytes, dtype=np.uint8)
        self.buffers[buf.ctypes.data] = buf
        return 0, buf.ctypes.data

    def hipFree(self, ptr):
        self.buffers.pop(ptr.value, None)
        return (0,)

    def hipMemcpy(self, dst, src, nbytes, kind):
        ctypes.memmove(dst.value, src.value, nbytes)
        return (self._status("hipMemcpy"),)

    def hipMemset(self, dst, value, nbytes):
        ctypes.memset(dst.value, value, nbytes)
        return (0,)

    def hipDeviceSynchronize(self):
        return (0,)

    def hipModuleLoadData(self, code):
        return 0, ("module", bytes(code))

    def hipModuleGetFunction(self, module, name):
        return self._status("hipModuleGetFunction"), ("function", name.decode())

    def hipModuleLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        self.launches.append((f[1], (gx, gy, gz), (bx, by, bz), shared, stream, params, extra))
        if f[1] == "arbiter_probe":  # the gate's kernel: y = 2x + 1
            x, y, n = extra[0].value, extra[1].value, extra[2].value
            xs = np.ctypeslib.as_array((ctypes.c_float * n).from_address(x))
            ys = np.ctypeslib.as_array((ctypes.c_float * n).from_address(y))
            ys[:] = 2 * xs + 1
        return (self._status("hipModuleLaunchKernel"),)


class FakeHiprtc(types.SimpleNamespace):
    def __init__(self, log: str | None = None):
        super().__init__()
        self.programs: list[dict] = []
        self.log = log  # a compile log makes hiprtcCompileProgram fail with it

    def hiprtcCreateProgram(self, src, name, n_headers, headers, include_names):
        prog = {"source": src.decode(), "name": name.decode(), "destroyed": False}
        self.programs.append(prog)
        return 0, prog

    def hiprtcCompileProgram(self, prog, n, options):
        prog["options"] = [o.decode() for o in options][:n]
        return (6 if self.log else 0,)  # 6 = HIPRTC_ERROR_COMPILATION

    def hiprtcGetCodeSize(self, prog):
        return 0, 8

    def hiprtcGetCode(self, prog, code):
        code[:] = b"\x7fELFcode"
        return (0,)

    def hiprtcGetProgramLogSize(self, prog):
        return 0, len(self.log or "") + 1

    def hiprtcGetProgramLog(self, prog, log):
        log[:] = (self.log or "").encode() + b"\0"
        return (0,)

    def hiprtcDestroyProgram(self, prog):
        prog["destroyed"] = True
        return (0,)

    def hiprtcVersion(self):
        return 0, 6, 3

    def hiprtcGetErrorString(self, status):
        return 0, b"HIPRTC_ERROR_COMPILATION"


class FakeHipblas(types.SimpleNamespace):
    """hipblasGemmEx computed on the host exactly as BLAS defines it: column-major, op(A) m x k."""

    def __init__(self):
        super().__init__()
        self.hipblasOperation_t = types.SimpleNamespace(HIPBLAS_OP_N=111, HIPBLAS_OP_T=112)
        self.hipblasComputeType_t = types.SimpleNamespace(HIPBLAS_COMPUTE_32F=2)
        self.hipblasGemmAlgo_t = types.SimpleNamespace(HIPBLAS_GEMM_DEFAULT=160)
        self.calls: list[tuple] = []

    def hipblasCreate(self):
        return 0, "handle"

    def hipblasGetVersion(self, handle, version):
        version.value = 20300
        return (0,)

    def hipblasGemmEx(self, handle, op_a, op_b, m, n, k, alpha, a, a_type, lda, b, b_type, ldb, beta, c, c_type,
                      ldc, compute, algo):
        self.calls.append((op_a, op_b, m, n, k, lda, ldb, ldc, a_type, compute))
        dt = {0: np.float32, 2: np.float16}[a_type]

        def colmajor(ptr, rows, cols, ld):  # a column-major rows x cols matrix with leading dimension ld
            flat = np.ctypeslib.as_array((ctypes.c_byte * ((ld * (cols - 1) + rows) * np.dtype(dt).itemsize))
                                         .from_address(ptr.value)).view(dt)
            size = np.dtype(dt).itemsize
            return np.lib.stride_tricks.as_strided(flat, (rows, cols), (size, ld * size))

        A = colmajor(a, *((m, k) if op_a == 111 else (k, m)), lda)
        B = colmajor(b, *((k, n) if op_b == 111 else (n, k)), ldb)
        A = A if op_a == 111 else A.T
        B = B if op_b == 111 else B.T
        C = colmajor(c, m, n, ldc)
        C[...] = (alpha.value * (A.astype(np.float64) @ B.astype(np.float64))).astype(dt)
        return (0,)


def install(monkeypatch, rocm_module, hip=None, hiprtc=None, hipblas=None):
    """Inject the fakes at rocm's module level and reset the target's cached answers."""
    hip, hiprtc = hip or FakeHip(), hiprtc or FakeHiprtc()
    hipblas = hipblas if hipblas is not None else FakeHipblas()
    monkeypatch.setattr(rocm_module, "hip", hip)
    monkeypatch.setattr(rocm_module, "hiprtc", hiprtc)
    monkeypatch.setattr(rocm_module, "hipblas", hipblas)
    monkeypatch.setattr(rocm_module, "hip_python_version", "fake")
    rocm_module.TARGET.reset()
    return hip, hiprtc, hipblas
