"""Vendor matmul on AMD GPUs: hipBLAS ``hipblasGemmEx`` (float32, and float16 with float32 accumulation).

hipBLAS is column-major; a row-major C = A @ B is computed as the column-major C^T = B^T A^T, which
reads the row-major buffers as they are. A column-major (Fortran-order) operand is passed with its
transpose flag instead of being copied. Strided operands and fused epilogues are declined with the
reason (the rocm target has no array library to compose an epilogue).
"""
from __future__ import annotations

import ctypes

from arbiter.candidates import Tier, register
from arbiter.candidates.rocm._hip import RocmCandidate, no_epilogue
from arbiter.targets import rocm

DTYPES = ("float32", "float16")


def gemm_operand(array, rows: int) -> tuple[str, int]:
    """(``"N"`` or ``"T"``, leading dimension) for passing the row-major view of ``array`` to hipBLAS.

    A C-contiguous [r, c] array is the column-major [c, r] transpose with ld = row stride ("N" for
    C^T = B^T A^T); an F-contiguous one is the column-major [r, c] itself, so it needs "T", ld = ``rows``.
    """
    if array.flags.c_contiguous:
        return "N", max(1, array.strides[0] // array.itemsize)
    return "T", max(1, rows)


def gemm_arguments(region, out) -> tuple:
    """The hipblasGemmEx arguments after the handle, for ``out = a @ b`` (row-major ``out``)."""
    hb = rocm.hipblas
    ops = {"N": hb.hipblasOperation_t.HIPBLAS_OP_N, "T": hb.hipblasOperation_t.HIPBLAS_OP_T}
    data_type = {"float32": rocm.hip.hipDataType.HIP_R_32F, "float16": rocm.hip.hipDataType.HIP_R_16F}[region.dtype]
    m, n, k = region.dims["m"], region.dims["n"], region.dims["k"]
    op_b, ldb = gemm_operand(region.b, k)
    op_a, lda = gemm_operand(region.a, m)
    alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
    return (ops[op_b], ops[op_a], n, m, k, alpha,
            ctypes.c_void_p(region.b.ptr), data_type, ldb,
            ctypes.c_void_p(region.a.ptr), data_type, lda, beta,
            ctypes.c_void_p(out.ptr), data_type, max(1, n),
            hb.hipblasComputeType_t.HIPBLAS_COMPUTE_32F, hb.hipblasGemmAlgo_t.HIPBLAS_GEMM_DEFAULT)


class HipblasMatmul(RocmCandidate):
    name = "hipblas_matmul"
    op = "matmul"
    tier = Tier.HAND_TUNED
    priority = 10  # the lead-safe default: hipBLAS
    dtypes = DTYPES

    def available(self):
        ok = super().available()
        if ok is True and rocm.hipblas is None:
            return "hipBLAS bindings are not installed: install hip-python[libraries]"
        return ok

    def applies_to(self, region):
        if region.dtype not in self.dtypes:
            return f"dtype {region.dtype} is not one of {', '.join(self.dtypes)}"
        if "S" in region.layout[:2]:
            return f"needs contiguous a and b (C or Fortran order), got layout {region.layout[:2]}"
        return no_epilogue(region)

    def run(self, region, params):
        out = region.alloc_out()
        if out.size and region.dims["k"]:
            rocm.check(rocm.hipblas.hipblasGemmEx(rocm.blas_handle(), *gemm_arguments(region, out)), "hipblasGemmEx")
        elif out.size:  # K == 0: the product is zeros
            rocm.check(rocm.hip.hipMemset(ctypes.c_void_p(out.ptr), 0, out.nbytes), "hipMemset")
        return out


register(HipblasMatmul())
