"""Emitted GEMM through Triton (``_triton_kernels.gemm``): tensor cores (wgmma on Hopper), float32 accumulation, and
the whole epilogue (bias, ReLU, exact-erf or tanh GELU, SiLU, residual) applied to the accumulator before its one
store, so ``act(a @ b + bias) + residual`` is one kernel and no intermediate ever reaches memory.

The solution index is the launch configuration ``{"tile": [BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, warps, stages]}``,
timed by the arbiter's own measurement (no ``triton.autotune``). Any strides are taken as they come (row- or
column-major, strided views); the output is C-contiguous. float16 and bfloat16 only: float32 on tensor cores would
mean TF32, over the float32 budget (``gemm_tiled`` serves float32). Compile and launch: ``candidates.gpu_triton``.
Registered by each GPU target (``candidates/nvidia/triton_matmul.py``, ``candidates/rocm/triton_emitted.py``).
"""
from __future__ import annotations

from arbiter.candidates.gpu_triton import (
    ACTIVATION_CODES,
    POINTER_TYPES,
    LaunchPlan,
    Spec,
    TritonCandidate,
    compile_spec,
    needs_64bit,
)
from arbiter.memo import Memo

# (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, warps, stages). The first is the default: the 128x256 tile of two warp
# groups that feeds Hopper's wgmma best on large products; then its transpose, 128x128 in 8 and 4 warps, and the
# smaller tiles that keep every SM busy on small ones; the last, 96 KiB of ring, puts two blocks on an SM, so one's
# epilogue runs beside the other's products. Shared memory of the deepest ring: 128x256x64 x 3 stages of
# fp16 = 144 KiB (H100/H200 opt-in: 227 KiB).
TILES = [(128, 256, 64, 8, 8, 3), (256, 128, 64, 8, 8, 3), (128, 128, 64, 8, 8, 4), (128, 128, 64, 8, 4, 4),
         (128, 64, 64, 8, 4, 4), (64, 128, 64, 8, 4, 4), (64, 64, 64, 8, 4, 3), (128, 128, 64, 8, 4, 3)]
# (A persistent variant, one program an SM walking the tiles with the tile loop flattened, passed the gate and
# lost everywhere it was timed on the H200: 400-750 us against 222-232 us for the best tile here at 8192x8192x512
# and 4096^3 with bias + GELU; it was removed. See docs/gpu_results.md.)


def gemm_spec(region, tile, aligned: bool, out):
    """The ``gemm`` specialization of ``region`` under ``tile`` writing ``out``, and its grid."""
    bm, bn, bk, group, _, _ = tile
    a, b, bias, res = region.a, region.b, region.bias, region.residual
    m, n, k = region.dims["m"], region.dims["n"], region.dims["k"]
    wide = needs_64bit(a, b, res, out)
    ptype = POINTER_TYPES[region.dtype]
    spec = Spec(_kernel())
    for name in ("a_ptr", "b_ptr", "c_ptr", "bias_ptr", "res_ptr"):
        spec.pointer(name, ptype, aligned)
    item = a.itemsize
    for name, value in (("M", m), ("N", n), ("K", k)):
        spec.integer(name, value, wide, unit_constexpr=False)
    strides = (a.strides[0] // item, a.strides[1] // item, b.strides[0] // item, b.strides[1] // item,
               out.strides[0] // item)
    for name, value in zip(("stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm"), strides):
        spec.integer(name, value, wide)
    if res is not None:
        spec.integer("stride_rm", res.strides[0] // item, wide)
        spec.integer("stride_rn", res.strides[1] // item, wide)
    else:
        spec.constant("stride_rm", 0)
        spec.constant("stride_rn", 0)
    for name, value in (("BLOCK_M", bm), ("BLOCK_N", bn), ("BLOCK_K", bk), ("GROUP_M", group),
                        ("ACTIVATION", ACTIVATION_CODES[region.activation]), ("HAS_BIAS", bias is not None),
                        ("HAS_RESIDUAL", res is not None), ("EVEN_K", k % bk == 0)):
        spec.constant(name, value)
    return spec, (-(-m // bm) * -(-n // bn), 1, 1)


def _kernel():
    from arbiter.candidates import gpu_triton

    return gpu_triton.kernels().gemm


class TritonMatmul(TritonCandidate):
    name = "triton_matmul"
    op = "matmul"
    priority = 12  # ahead of gemm_mma (10) in the tier: the fused epilogue and wgmma tiles; measurement decides
    plans = Memo()

    tiles = TILES
    float32_by = "gemm_tiled"

    def plan(self, region, params, out, aligned: bool) -> LaunchPlan | None:
        """The launch plan of this call (None when the output is empty): looked up by key, exact dims, alignment
        (``aligned``: every pointer 16-byte aligned) and strides where the layout class does not fix them (S);
        made, and its kernel compiled, on first use. The output is C-contiguous (``alloc_out``, or an ``out=``
        the region checked)."""
        tile = params["tile"]
        a, b = region.a, region.b
        layout = region.layout
        key = (tile[0], tile[1], tile[2], tile[3], tile[4], tile[5], region.key.id, a.shape, b.shape[1], aligned,
               self.device(),
               (a.strides, b.strides, region.residual.strides) if "S" in layout else None)
        plan = self.plans.get(key)
        if plan is None:
            m, n = region.dims["m"], region.dims["n"]
            if not (m and n):
                return None
            spec, grid = gemm_spec(region, tuple(tile), aligned, out)
            compiled = compile_spec("gemm", self.triton_backend, self.device(), spec, tile[4], tile[5])
            plan = self.plans[key] = LaunchPlan(compiled, grid, spec.values)
        return plan

    def run(self, region, params):
        out = region.alloc_out()
        bias, res = region.bias, region.residual
        pa, pb, pc = region.a.data.ptr, region.b.data.ptr, out.data.ptr
        pbias = bias.data.ptr if bias is not None else 0
        pres = res.data.ptr if res is not None else 0
        plan = self.plan(region, params, out, not (pa | pb | pc | pbias | pres) & 15)
        if plan is not None:
            plan.call(self.stream(), pa, pb, pc, pbias, pres)
        return out

