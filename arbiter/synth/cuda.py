"""The synthesized tier's CUDA backend: kernels generated from a region's description.

* ``gemm_kernel(chain, dtype, tile, residual_col_stride)``: a matmul whose epilogue chain
  (``arbiter.synth.epilogue_chain``: bias, activation, residual) is rendered into the
  ``arb_epilogue`` function that the GEMM template's store calls. The chain runs on the float
  accumulator in registers, before the one rounding to the output type: no extra pass over C.
  The template is ``gemm_tiled.cu`` (CUDA cores) for float32 and ``gemm_mma.cu`` (tensor cores)
  for float16/bfloat16, both in ``arbiter/candidates/gpu_templates/``.
* ``row_kernel(op, dtype, cols, vec)``: a fused row kernel generated from the op's row program
  (reductions and maps over a register-resident row, ``ROW_PROGRAMS``), specialised on the exact
  column count, so the thread shape and trip counts are compile-time constants.

Each returns a ``Kernel``: entry name, the full readable source, and its content hash as its
identity. ``compile_kernel`` compiles through the nvidia target's kernel backend (``arbiter.targets.nvrtc``:
NVRTC through CuPy, imported only then), which caches by the source's hash in the process; CuPy's own kernel
cache keeps the binary across processes.
"""
from __future__ import annotations

from dataclasses import dataclass

from arbiter.synth import ACTIVATIONS, Chain, content_hash, render_expression
from arbiter.targets.nvrtc import BACKEND

DTYPES = ("float32", "float16", "bfloat16")
# max is nan_max (common.cuh defines it for the templates; NAN_MAX for kernels without common.cuh): relu(NaN)
# stays NaN, as in the oracle (fmaxf would give 0)
_FUNCTIONS = {"erf": "erff", "tanh": "tanhf", "exp": "expf", "max": "nan_max"}
NAN_MAX = ("__device__ __forceinline__ float nan_max(float a, float b) "
           "{ return (a != a || b != b) ? a + b : fmaxf(a, b); }\n")
_SIGN = {"add": "+", "sub": "-", "mul": "*"}


@dataclass(frozen=True)
class Kernel:
    name: str  # the extern "C" entry point
    source: str  # the complete CUDA C text that is compiled

    @property
    def identity(self) -> str:
        return content_hash(self.source)


def _float_literal(text: str) -> str:
    return f"{text}f" if ("." in text or "e" in text) else f"{text}.0f"


def cuda_expression(expr: str) -> str:
    """A neutral-syntax expression (``arbiter.synth``) in CUDA C single precision."""
    return render_expression(expr, literal=_float_literal, functions=_FUNCTIONS)


def epilogue_source(chain: Chain, residual_col_stride: int = 1) -> str:
    """The ``arb_epilogue`` device function computing ``chain`` on one accumulator value.

    A chain may use one ``row`` operand (read through the ``bias`` pointer) and one ``full``
    operand (the ``residual`` pointer, ``ldr`` elements between rows, ``residual_col_stride``
    between columns); raises ValueError naming the operand otherwise.
    """
    slots = {"row": "bias", "full": "residual"}
    used: dict[str, str] = {}
    lines = [f"    // chain: {chain.text()}"]
    for step in chain.steps:
        if step.op == "act":
            lines.append(f"    v = {cuda_expression(ACTIVATIONS[step.arg])};  // {step.arg}")
            continue
        operand = chain.operand(step.arg)
        if operand.kind not in slots or used.get(operand.kind, operand.name) != operand.name:
            raise ValueError(f"chain: operand {operand.name!r} ({operand.kind}) has no slot in the CUDA GEMM "
                             "epilogue (one row operand and one full operand)")
        used[operand.kind] = operand.name
        read = "bias[col]" if operand.kind == "row" else f"residual[row * ldr + col * {residual_col_stride}LL]"
        lines.append(f"    v = v {_SIGN[step.op]} to_f({read});  // {step.op} {operand.name} ({operand.kind})")
    body = "\n".join(lines)
    return ("// Synthesized by arbiter.synth.cuda from the region's epilogue chain; regenerated, never edited.\n"
            "__device__ __forceinline__ float arb_epilogue(float v, int row, int col, const T* __restrict__ bias,\n"
            "                                              const T* __restrict__ residual, long long ldr) {\n"
            f"{body}\n    return v;\n}}\n")


def gemm_kernel(chain: Chain, dtype: str, tile: tuple, residual_col_stride: int = 1,
                cp_async: bool = False) -> Kernel:
    """A GEMM with ``chain`` fused into its store; ``tile`` is the template's tile tuple
    (gemm_tiled: BM, BN, BK, TM, TN for float32; gemm_mma: BM, BN, BK, WM, WN, STAGES for half types).
    ``cp_async`` picks gemm_mma's 16-byte asynchronous copies, which only operands with K and N multiples
    of 8 and 16-byte aligned pointers may use (the caller checks); the default loads element by element."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype: {dtype} is not one of {', '.join(DTYPES)}")
    epilogue = epilogue_source(chain, residual_col_stride)
    if dtype == "float32":
        bm, bn, bk, tm, tn = tile
        defines = {"BM": bm, "BN": bn, "BK": bk, "TM": tm, "TN": tn}
        return Kernel("gemm_tiled", BACKEND.source(dtype, defines, ("gemm_tiled.cu",), prelude=epilogue))
    bm, bn, bk, wm, wn, stages = tile
    mma = '"f16"' if dtype == "float16" else '"bf16"'
    defines = {"BM": bm, "BN": bn, "BK": bk, "WM": wm, "WN": wn, "STAGES": stages, "MMA_TYPE": mma,
               "CP_ASYNC": int(cp_async)}
    return Kernel("gemm_mma", BACKEND.source(dtype, defines, ("gemm_mma.cu",), prelude=epilogue))


# --- fused row kernels --------------------------------------------------------------------------
@dataclass(frozen=True)
class RowProgram:
    """What one row kernel computes, as steps over a register-resident row.

    ``fill``: the value of padding positions past the row's end (neutral for the first reduction).
    ``weights``: whether a per-column weight ``w`` is loaded beside ``x``.
    ``steps``: ``("max" | "sum", name, expr)`` reduces ``expr`` over the row into ``name``;
    ``("map", stmt)`` rewrites every element ``v`` (``w`` and earlier names in scope).
    Expressions are CUDA C; ``COLS`` is the column count and ``eps`` a kernel argument.
    """

    fill: str
    weights: bool
    steps: tuple


ROW_PROGRAMS: dict[str, RowProgram] = {
    "softmax": RowProgram("NEG_INF", False, (
        ("max", "m", "v"),
        ("map", "v = expf(v - m);"),  # padding: exp(-inf) = 0, neutral for the sum
        ("sum", "s", "v"),
        ("map", "v = v * (1.0f / s);"),
    )),
    "rmsnorm": RowProgram("0.0f", True, (
        ("sum", "ss", "v * v"),
        ("map", "v = v * rsqrtf(ss * (1.0f / COLS) + eps) * w;"),
    )),
}

_ROW_KERNEL = """\
// Synthesized by arbiter.synth.cuda: fused {op} row kernel, {dtype}, exactly {cols} columns.
// Row threads {threads} x {rpb} rows a block, {vec}-element loads, {iters} loads a thread: the row
// is read once into registers, reduced and written once.
extern "C" __global__ void __launch_bounds__(BLOCK)
{name}(const T* __restrict__ X, {w_param}T* __restrict__ Y, int rows, long long ldx, long long ldy, float eps)
{{
    __shared__ float scratch[ROWS_PER_BLOCK * WARPS_PER_ROW];
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / ROW_THREADS;
    const bool active = row < rows;
    const long long r = active ? row : 0;
    float vals[ITERS][VEC];
    load_row(X + r * ldx, COLS, active, {fill}, vals);
{w_load}{body}
    store_row(Y + r * ldy, COLS, active, vals);
}}
"""


def _each(statement: str, weights: bool) -> str:
    w = " const float w = wts[it][e];" if weights else ""
    return ("    #pragma unroll\n    for (int it = 0; it < ITERS; ++it)\n        #pragma unroll\n"
            f"        for (int e = 0; e < VEC; ++e) {{ float v = vals[it][e];{w} {statement} }}\n")


def row_shape(cols: int, vec: int) -> tuple[int, int, int]:
    """(row threads, rows per block, loads per thread) for a row of ``cols`` with ``vec``-wide loads:
    about four loads a thread, a warp per row for short rows (8 rows a block), up to 1024 threads."""
    chunks = max(1, -(-cols // vec))
    threads = 32
    while threads < 1024 and chunks > 4 * threads:
        threads *= 2
    iters = -(-chunks // threads)
    if iters * vec > 64:
        raise ValueError(f"cols: {cols} columns exceed 1024 threads x 64 registers")
    return threads, (8 if threads == 32 else 1), iters


def row_kernel(op: str, dtype: str, cols: int, vec: int) -> Kernel:
    """The fused row kernel for ``op`` (a key of ROW_PROGRAMS) over rows of exactly ``cols``."""
    program = ROW_PROGRAMS.get(op)
    if program is None:
        raise ValueError(f"op: no row program for {op!r}; known: {', '.join(ROW_PROGRAMS)}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype: {dtype} is not one of {', '.join(DTYPES)}")
    threads, rpb, iters = row_shape(cols, vec)
    body = []
    for step in program.steps:
        if step[0] == "map":
            body.append(f"    // map: {step[1]}\n" + _each(f"{step[1]} vals[it][e] = v;", program.weights))
        else:
            kind, var, expr = step
            init, combine = ("NEG_INF", f"{var} = fmaxf({var}, {expr});") if kind == "max" else \
                ("0.0f", f"{var} += {expr};")
            body.append(f"    // reduce: {var} = {kind} over the row of ({expr})\n    float {var} = {init};\n"
                        + _each(combine, program.weights)
                        + f"    {var} = row_reduce({var}, {'true' if kind == 'max' else 'false'}, scratch);\n")
    name = f"synth_{op}_rows"
    w_load = ("    float wts[ITERS][VEC];\n    load_row(W, COLS, true, 0.0f, wts);\n" if program.weights else "")
    text = _ROW_KERNEL.format(op=op, dtype=dtype, cols=cols, threads=threads, rpb=rpb, vec=vec, iters=iters,
                              name=name, w_param="const T* __restrict__ W, " if program.weights else "",
                              fill=program.fill, w_load=w_load, body="".join(body))
    defines = {"COLS": cols, "ROW_THREADS": threads, "ROWS_PER_BLOCK": rpb, "VEC": vec, "ITERS": iters}
    return Kernel(name, BACKEND.source(dtype, defines, ("rows_common.cuh",), prelude="") + "\n" + text)


def compile_kernel(kernel: Kernel):
    """The CuPy function for ``kernel``: compiled by the nvidia backend once per process (by source hash)."""
    return BACKEND.compiled(kernel.source, kernel.name)
