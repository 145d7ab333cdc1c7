"""Emitted fused SwiGLU through Triton (``_triton_kernels.gated``): ``silu(x @ w_gate) * (x @ w_up)`` in one kernel.

Each K-slice of ``x`` is read once and feeds both products (two float32 accumulators on tensor cores); the gate
is applied in registers and only the result is stored, where torch runs four kernels (two GEMMs, silu, mul) and
writes both products. The solution index is ``{"tile": [BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, warps, stages]}``.
Any strides; float16 and bfloat16 (float32 would mean TF32). Compile and launch: ``candidates.gpu_triton``.
Registered by each GPU target (``candidates/nvidia/triton_gated.py``, ``candidates/rocm/triton_emitted.py``).
"""
from __future__ import annotations

from arbiter.candidates.gpu_triton import POINTER_TYPES, LaunchPlan, Spec, TritonCandidate, compile_spec, needs_64bit
from arbiter.memo import Memo

# (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, warps, stages). Two accumulators a tile: 128x128 in 8 warps holds as many
# float32 registers as a 128x256 GEMM tile. Shared memory: (x 128x64 + two 64x128 weight slices) x 3 stages of
# fp16 = 144 KiB.
TILES = [(128, 128, 64, 8, 8, 3), (128, 64, 64, 8, 4, 4), (64, 128, 64, 8, 4, 4), (128, 128, 32, 8, 8, 4),
         (64, 64, 64, 8, 4, 3)]


def gated_spec(region, tile, aligned: bool, out):
    """The ``gated`` specialization of ``region`` under ``tile`` writing ``out``, and its grid."""
    from arbiter.candidates import gpu_triton

    bm, bn, bk, group, _, _ = tile
    x, wg, wu = region.x, region.w_gate, region.w_up
    m, n, k = region.dims["m"], region.dims["n"], region.dims["k"]
    wide = needs_64bit(x, wg, wu, out)
    ptype = POINTER_TYPES[region.dtype]
    spec = Spec(gpu_triton.kernels().gated)
    for name in ("x_ptr", "wg_ptr", "wu_ptr", "out_ptr"):
        spec.pointer(name, ptype, aligned)
    for name, value in (("M", m), ("N", n), ("K", k)):
        spec.integer(name, value, wide, unit_constexpr=False)
    item = x.itemsize
    strides = (x.strides[0], x.strides[1], wg.strides[0], wg.strides[1], wu.strides[0], wu.strides[1], out.strides[0])
    names = ("stride_xm", "stride_xk", "stride_gk", "stride_gn", "stride_uk", "stride_un", "stride_om")
    for name, value in zip(names, strides):
        spec.integer(name, value // item, wide)
    for name, value in (("BLOCK_M", bm), ("BLOCK_N", bn), ("BLOCK_K", bk), ("GROUP_M", group),
                        ("EVEN_K", k % bk == 0)):
        spec.constant(name, value)
    return spec, (-(-m // bm) * -(-n // bn), 1, 1)


class TritonGated(TritonCandidate):
    name = "triton_gated"
    op = "gated"
    priority = 8  # ahead of gated_tiled (5) in the tier; measurement decides against the vendor composition
    plans = Memo()

    tiles = TILES
    float32_by = "gated_tiled"

    def plan(self, region, params, out, aligned: bool) -> LaunchPlan | None:
        """The launch plan of this call (None when the output is empty), by key, exact dims, alignment and the
        strides the layout class does not fix (the output is C-contiguous)."""
        x, wg = region.x, region.w_gate
        tile = params["tile"]
        key = (tile[0], tile[1], tile[2], tile[3], tile[4], tile[5], region.key.id, x.shape, wg.shape[1], aligned,
               self.device(), (x.strides, wg.strides, region.w_up.strides) if "S" in region.layout else None)
        plan = self.plans.get(key)
        if plan is None:
            if not out.size:
                return None
            spec, grid = gated_spec(region, tuple(tile), aligned, out)
            compiled = compile_spec("gated", self.triton_backend, self.device(), spec, tile[4], tile[5])
            plan = self.plans[key] = LaunchPlan(compiled, grid, spec.values)
        return plan

    def run(self, region, params):
        out = region.alloc_out()
        px, pg, pu, po = region.x.data.ptr, region.w_gate.data.ptr, region.w_up.data.ptr, out.data.ptr
        plan = self.plan(region, params, out, not (px | pg | pu | po) & 15)
        if plan is not None:
            plan.call(self.stream(), px, pg, pu, po)
        return out

