"""Vendor matmul on NVIDIA: cuBLASLt through nvmath-python, the epilogue in the GEMM, the algorithm a solution index.

cuBLASLt computes ``D = epilogue(A @ B + beta * C + bias)`` in column-major terms, and its bias epilogues need a
column-major D whose rows the bias runs along. The row-major ``out [M, N]`` is the column-major ``[N, M]`` matrix
``out.T = b.T @ a.T``, so the GEMM is planned on ``(b.T, a.T)``: the bias of length N runs along its rows, and
``D.T`` is the row-major result, no copy.

Epilogues: bias (BIAS), ReLU (RELU, RELU_BIAS), tanh-GELU (GELU, GELU_BIAS: cuBLASLt's GELU is the tanh form, so
exact ``gelu`` is declined), and a residual as C with beta = 1 when no activation follows it (C is added before
the activation in cuBLASLt; ``act(a @ b + bias) + residual`` is not one cuBLASLt call).

Solution index: ``{"algo": i}``, the i-th of the algorithms cuBLASLt's heuristic returns for the key (0 = its
first choice). The ranking depends on the cuBLASLt version, which is part of this candidate's code identity
(``source``), so a new library re-verifies and re-measures. A key with fewer algorithms than ``ALGORITHMS``
runs its last one for the indices past the end (``launch_signature`` says so; the tuner times it once).

Plans are nvmath ``Matmul`` objects, planned once per (shape, dtype, layout, epilogue, operand alignment) and
cached. nvmath's ``execute()`` does host work on every call (stream lookup, a new result, precondition checks,
event bookkeeping; issue 19 saw about 25 us above ``cupy.matmul``); so a warm call skips it: it sets the bias pointer on
the plan's descriptor and calls ``cublasLtMatmul`` (nvmath's binding) once, with the plan's handle, layouts,
scalars, the chosen algorithm struct and a workspace allocated with the plan, on CuPy's current stream. D is
the output buffer (``alloc_out``, or the given out) in every case: C is the residual with beta = 1, or the
output itself with beta = 0 (then cuBLASLt never reads it, so a poisoned or recycled buffer is fine).
"""
from __future__ import annotations

import contextlib
import functools
import logging
import threading
from importlib import metadata

import numpy as np

from arbiter import layouts
from arbiter.candidates import Tier, register
from arbiter.candidates.nvidia._cuda import NvidiaCandidate, cupy
from arbiter.memo import Memo

ALGORITHMS = 4  # solution indices: the first ALGORITHMS of cuBLASLt's heuristic ranking
DTYPES = ("float32", "float16", "bfloat16")  # compute in float32 (nvmath's default for these; no TF32)
_PLANS_MAX = 64  # each holds a workspace (up to tens of MiB)
_plans: Memo = Memo()  # plan key -> _Plan
_lock = threading.Lock()  # creating and evicting plans
_quiet = logging.getLogger("arbiter.nvmath")  # nvmath logs each phase at INFO to the logger it is given
_quiet.setLevel(logging.WARNING)


@functools.cache
def nvmath_reason() -> bool | str:
    """True when nvmath-python imports and loads cuBLASLt; else why not, with the install hint."""
    try:
        # First: nvmath's CuPy dtype table, built when nvmath is imported, knows bfloat16 only by the name
        # ml_dtypes gives numpy.
        with contextlib.suppress(ImportError):
            import ml_dtypes  # noqa: F401
        import nvmath.linalg.advanced  # noqa: F401
        from nvmath.bindings import cublasLt

        cublasLt.get_version()
    except Exception as exc:  # ImportError, or cuBLASLt not found by nvmath's loader
        return f"nvmath-python does not import or load cuBLASLt ({type(exc).__name__}: {exc}); " \
               "install kernel-arbiter[nvmath]"
    return True


@functools.cache
def cublaslt_version() -> str:
    """The version of the cuBLASLt nvmath loaded and nvmath's own (``13.2.0 (nvmath-python 1.0.0)``), or "absent"."""
    if nvmath_reason() is not True:
        return "absent"
    from nvmath.bindings import cublasLt

    code = int(cublasLt.get_version())
    return f"{code // 10000}.{(code % 10000) // 100}.{code % 100} (nvmath-python {metadata.version('nvmath-python')})"


def epilog_name(region) -> str:
    """The cuBLASLt epilogue for ``region`` ("" for none): BIAS, RELU, RELU_BIAS, GELU, GELU_BIAS. The caller has
    checked ``applies_to``; a residual rides as C, not in the epilogue."""
    act = {"none": "", "relu": "RELU", "gelu_tanh": "GELU"}[region.activation]
    if region.bias is None:
        return act
    return f"{act}_BIAS" if act else "BIAS"


def _aligned(array) -> int:
    """The pointer's alignment in bytes, up to 256 (what nvmath's plan passes cuBLASLt as a minimum)."""
    ptr = array.data.ptr
    return min(256, ptr & -ptr) if ptr else 256


class _Plan:
    """What a warm call needs of one planned nvmath Matmul: the cuBLASLt handle, descriptor, layouts, scalars,
    the algorithm structs of the heuristic's ranking, a workspace for any of them, and a lock (the bias pointer
    is an attribute of the shared descriptor, set right before the call)."""

    __slots__ = ("mm", "algorithms", "algos", "args", "desc", "workspace", "lock")

    def __init__(self, mm, algorithms):
        self.mm, self.algorithms, self.lock = mm, tuple(algorithms), threading.Lock()
        if mm is None:  # a stand-in (tests of the index logic)
            return
        structs = [mm.algorithm_object_to_buffer[a]["algo"] for a in self.algorithms]
        self.algos = [(st, st.ctypes.data) for st in structs]  # the arrays kept alive beside their pointers
        size = int(np.max(mm.algorithms_buffer["workspace_size"]))  # the planned algorithms' largest, as nvmath
        if size > 0 and mm.epilog:
            size += 16  # and its margin for an epilogue (nvmath's plan: "workaround for library issue")
        self.workspace = cupy().empty(max(size, 1), dtype=np.uint8)
        self.desc = mm.mm_desc_ifc
        self.args = (mm.handle, mm.mm_desc, mm.alpha.ctypes.data, mm.a_layout_ptr, mm.b_layout_ptr,
                     mm.beta.ctypes.data, mm.c_layout_ptr, mm.d_layout_ptr, int(self.workspace.data.ptr), size)


def _plan_key(region, c) -> tuple:
    bias = region.bias
    return (region.dims["m"], region.dims["n"], region.dims["k"], region.dtype, region.layout, region.activation,
            bias is not None, region.residual is not None, _aligned(region.a), _aligned(region.b), _aligned(c),
            _aligned(bias) if bias is not None else 0)


def _new_plan(region, c) -> _Plan:
    from nvmath.linalg.advanced import Matmul, MatmulEpilog

    if region.residual is not None:  # C = residual (column-major [N, M]), so D is column-major too
        mm = Matmul(region.b.T, region.a.T, c.T, beta=1.0, options={"logger": _quiet})
    else:  # C = D = the output with beta = 0 (not read): D's layout is the output's, column-major [N, M]
        mm = Matmul(region.b.T, region.a.T, c.T, beta=0.0, options={"inplace": True, "logger": _quiet})
    name = epilog_name(region)
    try:
        algorithms = mm.plan(preferences={"limit": ALGORITHMS}, epilog=getattr(MatmulEpilog, name) if name else None,
                             epilog_inputs={"bias": region.bias} if region.bias is not None else None)
        plan = _Plan(mm, algorithms)
        mm.release_operands()  # the plan keeps no caller's arrays alive; every call passes its own pointers
        return plan
    except Exception:
        mm.free()
        raise


def plan_for(region, c) -> _Plan:
    """The cached plan of ``region``'s key with C = ``c`` (the residual, or the output), made on first use."""
    key = _plan_key(region, c)
    found = _plans.get(key)
    if found is None:
        with _lock:
            found = _plans.get(key)
            if found is None:
                if len(_plans) >= _PLANS_MAX:
                    for old in list(_plans.values()):
                        old.mm.free()
                    _plans.clear()
                found = _plans[key] = _new_plan(region, c)
    return found


class CublasLtMatmul(NvidiaCandidate):
    name = "cublaslt_matmul"
    op = "matmul"
    tier = Tier.HAND_TUNED
    # Behind the CuPy (10) and torch (11, 12) GEMMs in the tier: nvmath's execute() costs host time per call
    # that cupy.matmul and torch.addmm do not, so it should win by measurement (large GEMMs whose epilogue it
    # fuses), not by default.
    priority = 8

    def available(self):
        ok = super().available()  # CuPy and the device
        return nvmath_reason() if ok is True else ok

    def applies_to(self, region):
        if region.dtype not in DTYPES:
            return f"dtype {region.dtype} is not one of {', '.join(DTYPES)}"
        if "S" in region.layout:
            return f"layout {region.layout}: cuBLASLt takes row- or column-contiguous a, b and residual"
        packed = layouts.packed_reason(region)  # the bias goes to cuBLASLt as a bare pointer
        if packed is not True and region.bias is not None and layouts.token(region.bias)[0] != "R":
            return packed
        if region.activation not in ("none", "relu", "gelu_tanh"):
            return (f"activation {region.activation}: cuBLASLt's epilogues are ReLU and GELU in its tanh form "
                    "(gelu_tanh); exact gelu and silu are not among them")
        if region.activation == "relu" and region.dtype in ("float16", "bfloat16"):
            # The same cuBLASLt ReLU epilogue torch_addmm_act reaches turned NaN into 0 in float16 and bfloat16 on an
            # H200 (2026-12-03: the gate's nonfinite probe); the oracle keeps NaN. torch_matmul and cupy_matmul
            # serve it.
            return f"relu in {region.dtype}: cuBLASLt's ReLU epilogue drops NaN in half precision"
        if region.activation == "gelu_tanh" and region.dtype == "float32":
            # Its GELU epilogue in float32 missed the float32 budget on an H200 (relative error 1.1e-05 to
            # 2.7e-05 against 1e-05 at 65x1x257..300, every algorithm).
            return "gelu_tanh in float32: cuBLASLt's GELU epilogue misses the float32 budget"
        if region.residual is not None and region.activation != "none":
            return ("residual after an activation: cuBLASLt adds C before its epilogue's activation, so "
                    "act(a @ b + bias) + residual is not one cuBLASLt call")
        return True

    def param_space(self):
        return [{"algo": i} for i in range(ALGORITHMS)]

    def launch_signature(self, region, params):
        if region.torch_in is not None:  # a torch caller's region: this candidate runs on CuPy views of it
            region = region.cupy_views()
        plan = plan_for(region, region.residual if region.residual is not None else region.alloc_out())
        return ("algo", min(params.get("algo", 0), len(plan.algorithms) - 1))

    def source(self):
        # The heuristic's ranking (what an index means) and the kernels are the loaded cuBLASLt's.
        return super().source() + f"\ncuBLASLt {cublaslt_version()}"

    def run(self, region, params):
        from nvmath.bindings import cublasLt

        cp = cupy()
        out = region.alloc_out()
        residual = region.residual
        plan = plan_for(region, residual if residual is not None else out)
        algo = plan.algos[min(params.get("algo", 0), len(plan.algos) - 1)][1]
        # cuBLASLt assumes a 256-byte-aligned D (nvmath's plan states no other); a given out that is a view at an
        # offset gets an aligned buffer, copied into it after.
        d = out if out.data.ptr % 256 == 0 else cp.empty_like(out)
        c = residual if residual is not None else d
        handle, desc, alpha, a_layout, b_layout, beta, c_layout, d_layout, ws, ws_size = plan.args
        bias = region.bias
        if bias is not None and bias.data.ptr % 16:
            # cuBLASLt's alignment preferences cover A, B, C and D, not the epilogue's bias: an algorithm may load
            # it 16 bytes at a time, and a bias off a 16-byte boundary (a slice of a wider buffer) faults with a
            # misaligned address, which poisons the process's CUDA context. A fresh copy (N elements) is aligned.
            bias = bias.copy()
        with plan.lock:
            if bias is not None:
                plan.desc.bias_pointer = bias.data.ptr
            # The plan's A is b.T and its B is a.T (views: the same pointers); D = out.T, column-major [N, M].
            cublasLt.matmul(handle, desc, alpha, region.b.data.ptr, a_layout, region.a.data.ptr, b_layout, beta,
                            c.data.ptr, c_layout, d.data.ptr, d_layout, algo, ws, ws_size,
                            cp.cuda.get_current_stream().ptr)
        if d is not out:
            out[...] = d
        return out


register(CublasLtMatmul())
