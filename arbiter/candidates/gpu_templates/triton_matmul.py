"""Emitted GEMM through Triton (``_triton_kernels.gemm``): tensor cores (wgmma on Hopper), float32 accumulation, and
the whole epilogue (bias, ReLU, exact-erf or tanh GELU, SiLU, residual) applied to the accumulator before its one
store, so ``act(a @ b + bias) + residual`` is one kernel and no intermediate ever reaches memory.

The solution index is the launch configuration ``{"tile": [BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, warps, stages]}``,
timed by the arbiter's own measurement (no ``triton.autotune``); the split-K tiles (``{"tile": [...], "split_k":
True}``) serve products with few output tiles and a deep K: K is cut into ``split_of`` slices computed by separate
programs into a float32 workspace, and ``splitk_reduce`` sums them in a fixed order (deterministic, no atomics) and
applies the epilogue. Any strides are taken as they come (row- or
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
# Split-K tiles: small tiles, so few output tiles still make several programs each; the K slices fill the GPU.
SPLIT_TILES = [(64, 64, 64, 8, 4, 3), (128, 64, 64, 8, 4, 3), (64, 128, 64, 8, 4, 4)]
FEW_TILES = 66  # fewer output tiles than half the SMs of an H100/H200 (132): a plain launch leaves SMs idle
SPLIT_MIN_K = 512  # each K slice at least this deep (but the last), so the partials' traffic stays small
SPLIT_PROGRAMS = 264  # the programs the splits aim at: two per SM of an H200
MAX_SPLITS = 16
REDUCE_TILE = (32, 128, 4)  # splitk_reduce's BLOCK_M, BLOCK_N, warps: an elementwise pass over the partials
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
    _residual_strides(spec, res, item, wide)
    for name, value in (("BLOCK_M", bm), ("BLOCK_N", bn), ("BLOCK_K", bk), ("GROUP_M", group),
                        ("ACTIVATION", ACTIVATION_CODES[region.activation]), ("HAS_BIAS", bias is not None),
                        ("HAS_RESIDUAL", res is not None), ("EVEN_K", k % bk == 0)):
        spec.constant(name, value)
    return spec, (-(-m // bm) * -(-n // bn), 1, 1)


def _kernel(name="gemm"):
    from arbiter.candidates import gpu_triton

    return getattr(gpu_triton.kernels(), name)


def _residual_strides(spec, res, item: int, wide: bool) -> None:
    """The residual's row and column strides in elements (0 as constants without a residual): ``gemm``'s and
    ``splitk_reduce``'s ``stride_rm``, ``stride_rn``."""
    if res is not None:
        spec.integer("stride_rm", res.strides[0] // item, wide)
        spec.integer("stride_rn", res.strides[1] // item, wide)
    else:
        spec.constant("stride_rm", 0)
        spec.constant("stride_rn", 0)


def _strides_key(region):
    """What a launch plan's key adds for a strided (``S``) layout, whose class does not fix the strides: a's, b's
    and the residual's; None otherwise."""
    if "S" not in region.layout:
        return None
    return region.a.strides, region.b.strides, getattr(region.residual, "strides", None)


def split_of(m: int, n: int, k: int, tile) -> tuple[int, int]:
    """(splits, K_PER) for an ``m x n x k`` product under ``tile``: (1, k) where split-K does not apply (the output
    has ``FEW_TILES`` tiles or more, or K is under two slices of ``SPLIT_MIN_K``); else enough slices to bring the
    programs near ``SPLIT_PROGRAMS`` (at most ``MAX_SPLITS``, each ``SPLIT_MIN_K`` deep or more but the last),
    K_PER a multiple of BLOCK_K."""
    bm, bn, bk = tile[0], tile[1], tile[2]
    tiles = -(-m // bm) * -(-n // bn)
    if not tiles or tiles >= FEW_TILES:
        return 1, k
    splits = min(k // SPLIT_MIN_K, -(-SPLIT_PROGRAMS // tiles), MAX_SPLITS)
    if splits < 2:
        return 1, k
    per = -(-k // splits)
    per = -(-per // bk) * bk  # whole BLOCK_K slices
    return -(-k // per), per


def splitk_specs(region, tile, aligned: bool, out, ws, splits: int, per: int):
    """The ``gemm_splitk`` and ``splitk_reduce`` specializations of ``region`` (workspace ``ws``, [splits, m, n]
    float32), and their grids."""
    bm, bn, bk, group, _, _ = tile
    a, b, bias, res = region.a, region.b, region.bias, region.residual
    m, n, k = region.dims["m"], region.dims["n"], region.dims["k"]
    wide = needs_64bit(a, b, res, out, ws)
    ptype = POINTER_TYPES[region.dtype]
    item = a.itemsize
    gemm = Spec(_kernel("gemm_splitk"))
    gemm.pointer("a_ptr", ptype, aligned)
    gemm.pointer("b_ptr", ptype, aligned)
    gemm.pointer("ws_ptr", "*fp32", aligned)
    for name, value in (("M", m), ("N", n), ("K", k), ("K_PER", per)):
        gemm.integer(name, value, wide, unit_constexpr=False)
    strides = (a.strides[0] // item, a.strides[1] // item, b.strides[0] // item, b.strides[1] // item)
    for name, value in zip(("stride_am", "stride_ak", "stride_bk", "stride_bn"), strides):
        gemm.integer(name, value, wide)
    for name, value in (("BLOCK_M", bm), ("BLOCK_N", bn), ("BLOCK_K", bk), ("GROUP_M", group),
                        ("EVEN_K", k % per == 0)):
        gemm.constant(name, value)
    rbm, rbn, _ = REDUCE_TILE
    reduce = Spec(_kernel("splitk_reduce"))
    reduce.pointer("ws_ptr", "*fp32", aligned)
    for name in ("bias_ptr", "res_ptr", "c_ptr"):
        reduce.pointer(name, ptype, aligned)
    for name, value in (("M", m), ("N", n), ("SPLITS", splits)):
        reduce.integer(name, value, wide, unit_constexpr=False)
    reduce.integer("stride_cm", out.strides[0] // item, wide)
    _residual_strides(reduce, res, item, wide)
    for name, value in (("BLOCK_M", rbm), ("BLOCK_N", rbn), ("ACTIVATION", ACTIVATION_CODES[region.activation]),
                        ("HAS_BIAS", bias is not None), ("HAS_RESIDUAL", res is not None)):
        reduce.constant(name, value)
    tiles = -(-m // bm) * -(-n // bn)
    return gemm, (tiles, splits, 1), reduce, (-(-m // rbm) * -(-n // rbn), 1, 1)


class SplitPlan:
    """A split-K call's two launches and its workspace's shape: ``call(stream, a, b, ws, bias, res, c)``."""

    __slots__ = ("gemm", "reduce", "ws_shape")

    def __init__(self, gemm: LaunchPlan, reduce: LaunchPlan, ws_shape: tuple[int, int, int]):
        self.gemm, self.reduce, self.ws_shape = gemm, reduce, ws_shape

    def call(self, stream: int, pa, pb, pws, pbias, pres, pc) -> None:
        self.gemm.call(stream, pa, pb, pws)
        self.reduce.call(stream, pws, pbias, pres, pc)


class TritonMatmul(TritonCandidate):
    name = "triton_matmul"
    op = "matmul"
    priority = 12  # ahead of gemm_mma (10) in the tier: the fused epilogue and wgmma tiles; measurement decides
    plans = Memo()

    tiles = TILES
    float32_by = "gemm_tiled"

    def param_space(self):
        return super().param_space() + [{"tile": list(t), "split_k": True} for t in SPLIT_TILES]

    def split_plan(self, region, params, out, aligned: bool) -> SplitPlan | None:
        """The split-K launches of this call, by the same key as ``plan``; None where ``split_of`` gives one split
        (the caller then runs the plain tile)."""
        tile = params["tile"]
        a, b = region.a, region.b
        key = ("split", *tile, region.key.id, a.shape, b.shape[1], aligned, self.device(), _strides_key(region))
        found = self.plans.get(key)
        if found is None:
            m, n, k = region.dims["m"], region.dims["n"], region.dims["k"]
            splits, per = split_of(m, n, k, tile)
            if splits < 2:
                return None
            ws = self.workspace((splits, m, n))
            gemm, grid, reduce, rgrid = splitk_specs(region, tuple(tile), aligned, out, ws, splits, per)
            device = self.device()
            compiled = compile_spec("gemm_splitk", self.triton_backend, device, gemm, tile[4], tile[5])
            reduced = compile_spec("splitk_reduce", self.triton_backend, device, reduce, REDUCE_TILE[2], 1)
            found = self.plans[key] = SplitPlan(LaunchPlan(compiled, grid, gemm.values),
                                                LaunchPlan(reduced, rgrid, reduce.values), (splits, m, n))
        return found

    def workspace(self, shape):
        """The float32 partials of one split-K call (the target's allocator: CuPy's pool on nvidia)."""
        from arbiter import targets

        return targets.get(self.target).empty(shape, "float32")

    def plan(self, region, params, out, aligned: bool) -> LaunchPlan | None:
        """The launch plan of this call (None when the output is empty): looked up by key, exact dims, alignment
        (``aligned``: every pointer 16-byte aligned) and strides where the layout class does not fix them (S);
        made, and its kernel compiled, on first use. The output is C-contiguous (``alloc_out``, or an ``out=``
        the region checked)."""
        tile = params["tile"]
        a, b = region.a, region.b
        key = (tile[0], tile[1], tile[2], tile[3], tile[4], tile[5], region.key.id, a.shape, b.shape[1], aligned,
               self.device(), _strides_key(region))
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
        aligned = not (pa | pb | pc | pbias | pres) & 15
        if "split_k" in params:
            return self.run_split(region, params, out, aligned, (pa, pb, pbias, pres, pc))
        plan = self.plan(region, params, out, aligned)
        if plan is not None:
            plan.call(self.stream(), pa, pb, pc, pbias, pres)
        return out

    def run_split(self, region, params, out, aligned: bool, pointers):
        """A split-K tile's call; where ``split_of`` gives one split (the gate's smaller probes, a key's other
        sizes) it is the plain tile's kernel, at the cost of ``split_of``'s arithmetic, so the solution is right at
        every size of its key."""
        if not out.size:
            return out
        plan = self.split_plan(region, params, out, aligned)
        if plan is None:
            return self.run(region, {"tile": params["tile"]})
        ws = self.workspace(plan.ws_shape)
        pa, pb, pbias, pres, pc = pointers
        # The workspace comes from the pool: its alignment is the pool's (256 bytes), so it never changes the plan.
        plan.call(self.stream(), pa, pb, ws.data.ptr, pbias, pres, pc)
        return out
