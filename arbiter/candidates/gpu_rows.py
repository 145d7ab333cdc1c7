"""Row kernels on the GPU targets: one candidate class (``RowKernel``) and a table of specs (``ROW_SPECS``).

A row kernel reduces each row of a C-contiguous [rows, cols] input over its last axis with the row held in
registers (``rows_common.cuh``): read once, reduced in registers, written once. Softmax, RMSNorm and LayerNorm
differ only in data, so each is a ``RowSpec``: its template and entry point, the operands and scalars it takes,
the solution indices it offers, how wide a row it reaches, its dtypes and the targets it is offered on. What a
region must be is read from those fields by one ``applies_to``; the launch (threads a row, rows a block, vector
width, loads a thread) is worked out by one ``plan`` for every spec. Each target registers the specs it serves
with its own kernel backend (``candidates/nvidia/rows.py``: NVRTC; ``candidates/rocm/rows.py``: hiprtc).

Adding a row kernel is a template beside ``rows_common.cuh`` and an entry here; the GPU gate tests pick it up.
"""
from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter

import numpy as np

from arbiter import layouts
from arbiter.candidates import Tier
from arbiter.candidates.gpu import GpuCandidate, aligned16, next_pow2
from arbiter.targets.kernels import VEC16, KernelBackend

MAX_PER_THREAD = 64  # floats of a row held in registers per thread
MAX_THREADS = 1024
ROWS_COMMON = "rows_common.cuh"


@dataclass(frozen=True)
class RowSpec:
    """One row kernel, as data.

    ``params`` are its solution indices (the default first): ``vec`` (16-byte loads, taken when every array and
    every row is 16-byte aligned), ``threads`` (threads a row to start from, 32 when absent: one warp) and
    ``rows_per_block`` (rows a block when a row is one warp; ``rows_per_block`` below when absent).
    """

    name: str  # the candidate's name (on nvidia; another target may prefix it)
    op: str
    template: str  # the kernel's .cu file, compiled after rows_common.cuh
    kernel: str  # its extern "C" entry point
    operands: tuple[str, ...]  # the region's arrays it reads, in argument order; the output comes next
    priority: int
    params: tuple[dict, ...]
    max_cols: int = MAX_THREADS * MAX_PER_THREAD  # the widest row it holds in registers
    # Operands a region may lack: the kernel is told by HAS_<NAME> (0 or 1), and the operand before it is
    # passed in its place (never read), so the argument list keeps one shape.
    optional: tuple[str, ...] = ()
    scalars: tuple[str, ...] = ()  # region values passed as float32 after the sizes
    rows_per_block: int = 4
    dtypes: tuple[str, ...] = ("float32", "float16", "bfloat16")
    targets: tuple[str, ...] = ("nvidia", "rocm")


THREADS = ({"threads": 256, "vec": True}, {"threads": 32, "vec": True}, {"threads": 128, "vec": True},
           {"threads": 1024, "vec": True}, {"threads": 256, "vec": False})

ROW_SPECS: tuple[RowSpec, ...] = (
    # Softmax, one warp a row: short rows, several rows a block. Up to 2048 columns (64 registers a lane);
    # longer rows go to softmax_block.
    RowSpec("softmax_warp", "softmax", "softmax.cu", "softmax_rows", ("x",), priority=5,
            params=({"rows_per_block": 4, "vec": True}, {"rows_per_block": 8, "vec": True},
                    {"rows_per_block": 4, "vec": False}),
            max_cols=32 * MAX_PER_THREAD),
    # Softmax, one block a row: long rows held in registers across the block (grown to 1024 threads when needed).
    RowSpec("softmax_block", "softmax", "softmax.cu", "softmax_rows", ("x",), priority=4,
            params=({"threads": 256, "vec": True}, {"threads": 128, "vec": True}, {"threads": 512, "vec": True},
                    {"threads": 1024, "vec": True}, {"threads": 256, "vec": False}),
            rows_per_block=1),
    # RMSNorm: a warp a row (four rows a block) for short rows, a block a row for long ones.
    RowSpec("rmsnorm_rows", "rmsnorm", "rmsnorm.cu", "rmsnorm_rows", ("x", "weight"), priority=5, params=THREADS,
            scalars=("eps",)),
    # LayerNorm: as RMSNorm, mean and variance in two register passes; the bias is optional. Not offered on rocm
    # yet: that would be a new candidate there, never gated on an AMD GPU.
    RowSpec("layernorm_rows", "layernorm", "layernorm.cu", "layernorm_rows", ("x", "weight", "bias"), priority=5,
            params=THREADS, optional=("bias",), scalars=("eps",), targets=("nvidia",)),
)


def check_rows(region, dtypes, max_cols: int) -> bool | str:
    """What every row kernel needs: last axis, C-contiguous rows, the bucket's columns within reach."""
    if region.dtype not in dtypes:
        return f"dtype {region.dtype} is not one of {', '.join(dtypes)}"
    if region.layout != "R" or not region.axis_last:
        return "needs a C-contiguous x reduced over its last axis; the vendor candidates serve others"
    packed = layouts.packed_reason(region)  # weight and bias are read as packed vectors
    if packed is not True:
        return packed
    cols_bound = dict(region.key.bucket)["cols"]
    if cols_bound > max_cols:
        return f"rows of up to {max_cols} columns (register-resident); this bucket reaches {cols_bound}"
    return True


def plan(cols: int, dtype: str, row_threads: int, vec: bool) -> tuple[int, int, int]:
    """(row threads, vector width, loads per thread) for rows of ``cols``.

    ``vec``: 16-byte loads are allowed (every array 16-byte aligned); they are used when every row is too
    (``cols`` a multiple of the vector width). Row threads grow (up to 1024) when the row would not fit
    ``MAX_PER_THREAD`` registers per thread; loads per thread are rounded up to a power of two so one compiled
    kernel serves a range of widths. The threads reached do not depend on the width (a row needs ``cols / 64``
    threads either way), which ``RowKernel.launch_signature`` relies on.
    """
    v = VEC16[dtype]
    width = v if vec and cols % v == 0 else 1
    chunks = max(1, -(-cols // width))
    while row_threads < MAX_THREADS and chunks > row_threads * (MAX_PER_THREAD // width):
        row_threads *= 2
    iters = next_pow2(-(-chunks // row_threads))
    if iters * width > MAX_PER_THREAD:
        raise ValueError(f"cols: {cols} columns exceed {MAX_THREADS} threads x {MAX_PER_THREAD} registers")
    return row_threads, width, iters


class RowKernel(GpuCandidate):
    """The candidate of one ``RowSpec`` on one target, compiled by that target's kernel backend."""

    tier = Tier.EMITTED

    def __init__(self, spec: RowSpec, backend: KernelBackend, name: str | None = None):
        self.spec, self.backend = spec, backend
        self.name, self.target, self.op, self.priority = name or spec.name, backend.target, spec.op, spec.priority
        self.templates = (ROWS_COMMON, spec.template)
        self.dtypes = tuple(d for d in spec.dtypes if d in backend.dtypes)
        # A dispatched call's arrays and scalars, read in one C call each (this is the warm path).
        self._arrays_of = attrgetter(*spec.operands)
        self._scalars_of = attrgetter(*spec.scalars) if spec.scalars else None

    def param_space(self):
        return [dict(p) for p in self.spec.params]

    def applies_to(self, region):
        ok = check_rows(region, self.dtypes, self.spec.max_cols)
        if ok is True and region.has_epilogue:
            return f"computes {self.op} alone; a region with a fused epilogue is served by others"
        return ok

    def source(self):
        return super().source() + repr(self.spec)

    def defines(self, region, params: dict, vec: bool, present: tuple[bool, ...]) -> tuple:
        """The kernel's #defines for ``region``'s shape: threads a row, rows a block, vector width, loads a thread,
        and HAS_<NAME> for each optional operand. ``vec``: the parameters' vector loads, alignment allowing."""
        threads, width, iters = plan(region.dims["cols"], region.dtype, params.get("threads", 32), vec)
        rpb = params.get("rows_per_block", self.spec.rows_per_block) if threads == 32 else 1
        return ((("ROW_THREADS", threads), ("ROWS_PER_BLOCK", rpb), ("VEC", width), ("ITERS", iters))
                + tuple((f"HAS_{name.upper()}", int(p)) for name, p in zip(self.spec.optional, present)))

    def launch_signature(self, region, params):
        # The defines decide the kernel, the grid and the block. Taken as if every array were 16-byte aligned:
        # two parameter sets equal here then launch alike at any alignment (see ``plan``), so the signature holds
        # for every input set the tuner rotates through, whatever their addresses.
        return self.defines(region, params, params["vec"], self._present(region))

    def _present(self, region) -> tuple[bool, ...]:
        return tuple(getattr(region, name) is not None for name in self.spec.optional)

    def _arguments(self, region) -> tuple[tuple, tuple]:
        """(the arrays, the scalars as float32) passed around the output and the sizes."""
        arrays = self._arrays_of(region)
        if type(arrays) is not tuple:  # attrgetter of one name gives the value itself
            arrays = (arrays,)
        elif self.spec.optional:  # an absent optional operand: the one before it (see RowSpec). Tested with `is`:
            packed: list = []  # `None in arrays` would compare device arrays with ==, elementwise
            for array in arrays:
                packed.append(packed[-1] if array is None else array)
            arrays = tuple(packed)
        if self._scalars_of is None:
            return arrays, ()
        scalars = self._scalars_of(region)
        if isinstance(scalars, tuple):
            return arrays, tuple(map(np.float32, scalars))
        return arrays, (np.float32(scalars),)

    def launch_plan(self, region, params: dict, out) -> tuple:
        """(kernel, grid, block, integer arguments, whether there is work) of ``run(region, params)`` writing
        ``out``: what a caller launching the same kernel bare needs (``benchmarks/user_path.py`` does)."""
        return self._launch(region, params, self._arguments(region)[0], out)

    def _launch(self, region, params: dict, arrays: tuple, out) -> tuple:
        vec = params["vec"] and aligned16(*arrays, out)
        dims = region.dims
        rows, cols = dims["rows"], dims["cols"]
        present = self._present(region) if self.spec.optional else ()
        # What depends only on the solution and the shape is worked out once (kernel, grid, block, integer
        # arguments), so a warm call only checks alignment, packs its arrays and launches.
        launches = self.backend.launches
        key = (self.name, region.dtype, rows, cols, params.get("threads"), params.get("rows_per_block"), vec, present)
        found = launches.get(key)
        if found is None:
            defines = self.defines(region, params, vec, present)
            fn = self.backend.kernel(self.spec.kernel, region.dtype, self.templates, defines)
            threads, rpb = dict(defines)["ROW_THREADS"], dict(defines)["ROWS_PER_BLOCK"]
            if len(launches) >= 65536:  # bounded like the key cache: a shape sweep can't grow it forever
                launches.clear()
            found = launches[key] = (fn, ((rows + rpb - 1) // rpb,), (threads * rpb,),
                                     (np.int32(rows), np.int32(cols), np.int64(cols), np.int64(cols)),
                                     rows > 0 and cols > 0)
        return found

    def run(self, region, params):
        out = region.alloc_out()
        arrays, scalars = self._arguments(region)
        fn, grid, block, ints, nonempty = self._launch(region, params, arrays, out)
        if nonempty:
            fn(grid, block, arrays + (out,) + ints + scalars)
        return out
