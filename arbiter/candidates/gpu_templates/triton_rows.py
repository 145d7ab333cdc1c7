"""Emitted row ops through Triton (``_triton_kernels.rows``): softmax, RMSNorm and LayerNorm over the last axis,
one kernel for the three (the op a constexpr), float32 accumulation, float16, bfloat16 and float32.

A program takes ROWS rows; a row that fits the tile's cap is held in registers (one read, one write), a longer one
is walked in cap-wide chunks in two passes (online softmax; Chan's merge of chunk means and deviations for
LayerNorm), so every width is served. Rows may be strided (``x[:, :C]`` of a wider buffer: unit column stride, any
row stride), which the CUDA row kernels (``gpu_rows``) decline; the output is C-contiguous, or ``x`` itself in
place. The solution index is ``{"tile": [BLOCK_CAP, ROWS, warps]}``, timed by the arbiter's own measurement.
Priority sits below the CUDA row kernels, which stay the tier default where they apply. Compile and launch:
``candidates.gpu_triton``. Registered by each GPU target (``candidates/nvidia/triton_rows.py``,
``candidates/rocm/triton_emitted.py``).
"""
from __future__ import annotations

from arbiter import layouts
from arbiter.candidates.gpu import next_pow2
from arbiter.candidates.gpu_triton import POINTER_TYPES, LaunchPlan, Spec, TritonCandidate, compile_spec, needs_64bit
from arbiter.memo import Memo

# The ``OP`` constexpr of ``_triton_kernels.rows`` per row op (its SOFTMAX, RMSNORM, LAYERNORM).
ROW_OPS = {"softmax": 0, "rmsnorm": 1, "layernorm": 2}
# (BLOCK_CAP, ROWS, warps): the widest row (a power of two) held in registers, and the tile's element budget
# (ROWS is halved until ROWS x the row's block fits it); rows past the cap loop in cap-wide chunks, one row a
# program. The first is the default: rows to 8192 in registers, 8 warps (32 floats a thread). Then rows to 16384
# in 16 warps; short rows packed 4 and 16 to a program (a row of 768 alone would leave most of a warp group
# idle); and chunks of 2048 and 4096 that loop early, for long rows where fewer registers mean more programs an SM.
TILES = [(8192, 1, 8), (16384, 1, 16), (4096, 4, 4), (8192, 16, 8), (2048, 1, 4), (4096, 1, 8)]


def row_plan(cols: int, tile) -> tuple[int, int, bool]:
    """(BLOCK, ROWS, LOOPED) of rows of ``cols`` under ``tile``: the row's power-of-two block in registers when it
    fits the cap, with as many of the tile's rows as the cap holds; else cap-wide chunks, one row a program."""
    cap, rows, _ = tile
    block = next_pow2(max(cols, 1))
    if block > cap:
        return cap, 1, True
    while rows > 1 and rows * block > cap:
        rows //= 2
    return block, rows, False


def row_stride(x) -> int:
    """Elements between consecutive rows of ``x`` seen as [rows, cols]: the last axis for C-contiguous ``x`` of
    any rank, the first stride of a 2-D ``x`` with strided rows."""
    return x.strides[0] // x.itemsize if x.ndim == 2 else x.shape[-1]


def rows_spec(region, tile, aligned: bool, out):
    """The ``rows`` specialization of ``region`` under ``tile`` writing ``out``, and its grid."""
    from arbiter.candidates import gpu_triton

    x = region.x
    rows, cols = region.dims["rows"], region.dims["cols"]
    block, per, looped = row_plan(cols, tile)
    wide = needs_64bit(x, out)
    ptype = POINTER_TYPES[region.dtype]
    spec = Spec(gpu_triton.kernels().rows)
    for name in ("x_ptr", "w_ptr", "b_ptr", "y_ptr"):
        spec.pointer(name, ptype, aligned)
    spec.runtime("eps", "fp32")
    for name, value in (("R", rows), ("C", cols), ("stride_xm", row_stride(x)), ("stride_ym", row_stride(out))):
        spec.integer(name, value, wide, unit_constexpr=False)
    for name, value in (("OP", ROW_OPS[region.op]), ("BLOCK", block), ("ROWS", per), ("LOOPED", looped),
                        ("HAS_BIAS", getattr(region, "bias", None) is not None)):
        spec.constant(name, value)
    return spec, (-(-rows // per), 1, 1)


class TritonRows(TritonCandidate):
    """One row op (``op``) through the shared ``rows`` kernel; subclasses name the op (``TritonSoftmax``, ...)."""

    priority = 2  # below the CUDA row kernels (softmax_warp 5, softmax_block 4, rmsnorm_rows 5, layernorm_rows 5)
    dtypes = ("float16", "bfloat16", "float32")  # no tensor cores here: float32 is float32
    tiles = TILES

    def applies_to(self, region):
        ok = self.check_dtype(region)
        if ok is not True:
            return ok
        if not region.axis_last:
            return "reduces over the last axis only; the vendor candidates serve an inner axis"
        if region.has_epilogue:
            return f"computes {self.op} alone; a region with a fused epilogue is served by others"
        tokens, _ = layouts.parse(region.attrs)
        x = tokens.get("x", region.layout)
        if region.layout != "R" and not x.startswith("P2"):
            return (f"x layout {x} (arbiter.layouts): needs unit column stride and evenly spaced rows (C-contiguous, "
                    "or a 2-D view with padded rows); the vendor candidates serve others")
        odd = [f"{name} {tok}" for name, tok in tokens.items() if name != "x" and tok[0] != "R"]
        if odd:
            return f"operand layouts {', '.join(odd)} (arbiter.layouts): weight and bias are read as packed vectors"
        return True

    def launch_signature(self, region, params):
        # The tile decides the kernel through ``row_plan`` only: tiles giving the same (BLOCK, ROWS, LOOPED) and
        # warps launch the same code on this shape.
        tile = params["tile"]
        return row_plan(region.dims["cols"], tile) + (tile[2],)

    def plan(self, region, params, out, aligned: bool) -> LaunchPlan | None:
        """The launch plan of this call (None when there is nothing to compute), by key, exact dims, row stride,
        alignment (every pointer 16-byte aligned) and device; made, and its kernel compiled, on first use."""
        tile = params["tile"]
        x = region.x
        key = (tile[0], tile[1], tile[2], region.key.id, x.shape, x.strides, aligned, self.device())
        plan = self.plans.get(key)
        if plan is None:
            if not (region.dims["rows"] and region.dims["cols"]):
                return None
            spec, grid = rows_spec(region, tuple(tile), aligned, out)
            compiled = compile_spec("rows", self.triton_backend, self.device(), spec, tile[2], 1)
            plan = self.plans[key] = LaunchPlan(compiled, grid, spec.values)
        return plan

    def run(self, region, params):
        out = region.alloc_out()
        weight, bias = getattr(region, "weight", None), getattr(region, "bias", None)
        px, py = region.x.data.ptr, out.data.ptr
        pw = weight.data.ptr if weight is not None else 0
        pb = bias.data.ptr if bias is not None else 0
        plan = self.plan(region, params, out, not (px | pw | pb | py) & 15)
        if plan is not None:
            plan.call(self.stream(), px, pw, pb, py, getattr(region, "eps", 0.0))
        return out


class TritonSoftmax(TritonRows):
    name = "triton_softmax"
    op = "softmax"
    plans = Memo()


class TritonRMSNorm(TritonRows):
    name = "triton_rmsnorm"
    op = "rmsnorm"
    plans = Memo()


class TritonLayerNorm(TritonRows):
    name = "triton_layernorm"
    op = "layernorm"
    plans = Memo()
