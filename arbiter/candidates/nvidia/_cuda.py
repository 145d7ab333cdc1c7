"""Helpers shared by the NVIDIA candidates: lazy CuPy, epilogues composed with CuPy, the GEMM check, the base class.

Compile and kernel cache are the target's (``arbiter.targets.nvrtc``); what the GPU targets share (launch
arithmetic, the base of every GPU candidate) is ``arbiter.candidates.gpu``. Nothing here imports CuPy at module
load: candidates register (and list their reasons) on machines without it.
"""
from __future__ import annotations

import numpy as np

from arbiter.candidates.gpu import GpuCandidate
from arbiter.candidates.gpu_templates.gemm import IDENTITY_EPILOGUE, check_gemm
from arbiter.memo import Memo
from arbiter.synth import ACTIVATIONS
from arbiter.synth.cuda import NAN_MAX, cuda_expression
from arbiter.targets import nvrtc
from arbiter.targets.nvidia import cupy_module as cupy

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
                                                        f"arbiter_epilogue_{activation}_{int(bias)}{int(residual)}",
                                                        preamble=NAN_MAX)  # relu's nan_max
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


class NvidiaCandidate(GpuCandidate):
    """Base of the NVIDIA candidates: the nvidia target, its NVRTC backend."""

    target = "nvidia"
    backend = nvrtc.BACKEND


class CupyEpilogue:
    """Mixed into the nvidia registration of a GEMM template (before it): the fused epilogue composed with CuPy."""

    def gemm_output(self, region, out) -> tuple:
        return gemm_output(region, out)

    def finish_epilogue(self, region, buffer, out) -> None:
        finish_epilogue(region, buffer, out)


__all__ = ["IDENTITY_EPILOGUE", "CupyEpilogue", "NvidiaCandidate", "check_gemm", "compose_epilogue", "cupy",
           "finish_epilogue", "gemm_output"]
