"""Helpers shared by the NVIDIA candidates: lazy CuPy, epilogues, launch checks, the candidates' base class.

Kernel text and the NVRTC compile cache are the target's (``arbiter.targets.nvrtc``). Nothing here imports
CuPy at module load: candidates register (and list their reasons) on machines without it.
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from arbiter import targets
from arbiter.candidates import Candidate
from arbiter.memo import Memo
from arbiter.synth import ACTIVATIONS
from arbiter.synth.cuda import cuda_expression
from arbiter.targets.nvidia import cupy_module as cupy
from arbiter.targets.nvrtc import kernel, template

IDENTITY_EPILOGUE = """\
// No fused epilogue: the root op's value as it is (the candidate composes any epilogue afterwards).
__device__ __forceinline__ float arb_epilogue(float v, int row, int col, const T* __restrict__ bias,
                                              const T* __restrict__ residual, long long ldr) { return v; }
"""


def row_stride(array) -> int:
    """Elements between consecutive rows of a 2-D array."""
    return array.strides[0] // array.itemsize


def aligned16(*arrays) -> bool:
    return all(a.data.ptr % 16 == 0 for a in arrays)


_epilogues: Memo = Memo()


def _epilogue_kernel(activation: str, bias: bool, residual: bool):
    """One CuPy elementwise kernel for bias -> activation -> residual, computing in float."""
    key = (activation, bias, residual)
    fn = _epilogues.get(key)
    if fn is None:
        params = "Z z" + (", T bias" if bias else "") + (", T res" if residual else "")
        body = ["float v = (float)z;"]
        if bias:
            body.append("v += (float)bias;")
        if activation != "none":
            body.append(f"v = {cuda_expression(ACTIVATIONS[activation])};")
        if residual:
            body.append("v += (float)res;")
        body.append("out = (T)v;")
        fn = _epilogues[key] = cupy().ElementwiseKernel(params, "T out", " ".join(body),
                                                        f"arbiter_epilogue_{activation}_{int(bias)}{int(residual)}")
    return fn


def compose_epilogue(region, z, out) -> None:
    """``out = activation(z + bias) + residual`` with one CuPy elementwise kernel (``z`` holds a @ b;
    it may be ``out`` itself, or a float32 buffer so half types are rounded once)."""
    args = [z] + ([region.bias] if region.bias is not None else []) + \
        ([region.residual] if region.residual is not None else [])
    _epilogue_kernel(region.activation, region.bias is not None, region.residual is not None)(*args, out)


def gemm_output(region, out) -> tuple:
    """(buffer the GEMM kernel writes, extra #defines): ``out`` itself, or a float32 buffer
    (``ARB_OUT_F32``) when a half-precision region has an epilogue still to apply."""
    if region.has_epilogue and region.dtype != "float32":
        return cupy().empty(out.shape, dtype=np.float32), (("ARB_OUT_F32", 1),)
    return out, ()


def finish_epilogue(region, buffer, out) -> None:
    """Apply a region's epilogue to ``buffer`` (which holds a @ b), writing ``out``."""
    if region.has_epilogue:
        compose_epilogue(region, buffer, out)


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


class NvidiaCandidate(Candidate):
    """Base of the NVIDIA candidates: availability from the target, templates in the code identity."""

    target = "nvidia"
    templates: ClassVar[tuple[str, ...]] = ()  # .cu files whose text is part of this candidate's identity
    dtypes: ClassVar[tuple[str, ...]] = ("float32", "float16", "bfloat16")
    # (name, dtype, files, defines, prelude) -> launchable kernel. A target that compiles these templates
    # another way (rocm: hiprtc) subclasses the candidate and replaces only this.
    load_kernel = staticmethod(kernel)

    def available(self):
        return targets.get("nvidia").cupy_available()  # type: ignore[attr-defined]  # the nvidia target's

    def check_dtype(self, region) -> bool | str:
        if region.dtype not in self.dtypes:
            return f"dtype {region.dtype} is not one of {', '.join(self.dtypes)}"
        return True

    def source(self):
        texts = [template("common.cuh")] + [template(f) for f in self.templates] if self.templates else []
        return super().source() + "".join(texts)


def check_gemm(region, dtypes) -> bool | str:
    """What every emitted/synthesized GEMM needs: a supported dtype and C-contiguous a and b."""
    if region.dtype not in dtypes:
        return f"dtype {region.dtype} is not one of {', '.join(dtypes)}"
    if region.layout[:2] != "RR":
        return f"needs C-contiguous a and b (layout RR), got {region.layout[:2]}; the vendor candidates serve others"
    return True


def check_rows(region, dtypes, max_cols: int) -> bool | str:
    """What every row kernel needs: last axis, C-contiguous rows, the bucket's columns within reach."""
    if region.dtype not in dtypes:
        return f"dtype {region.dtype} is not one of {', '.join(dtypes)}"
    if region.layout != "R" or not region.axis_last:
        return "needs a C-contiguous x reduced over its last axis; the vendor candidates serve others"
    cols_bound = dict(region.key.bucket)["cols"]
    if cols_bound > max_cols:
        return f"rows of up to {max_cols} columns (register-resident); this bucket reaches {cols_bound}"
    return True
