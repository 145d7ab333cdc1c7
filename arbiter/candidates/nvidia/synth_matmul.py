"""Synthesized matmul on NVIDIA: the region's epilogue chain generated into the GEMM's store.

``arbiter.synth.cuda.gemm_kernel`` renders bias -> activation -> residual as the ``arb_epilogue``
function of the GEMM template (CUDA cores for float32, tensor cores for float16/bfloat16), so the
epilogue costs no pass over C. Only regions with an epilogue apply: without one there is nothing
to fuse and the emitted GEMMs are the same kernel. The solution index is the tile size.
"""
from __future__ import annotations

import inspect

from arbiter import synth
from arbiter.candidates import Tier, register
from arbiter.candidates.gpu_templates.gemm_tiled import launch_tiled
from arbiter.candidates.nvidia._cuda import NvidiaCandidate, check_gemm
from arbiter.candidates.nvidia.gemm_mma import cp_async_path, fit_ring, launch_mma, shared_limit, with_shared_memory
from arbiter.synth import cuda as synth_cuda

TILES = {  # per size: (float32 gemm_tiled tile, half-precision gemm_mma tile: BM, BN, BK, WM, WN, STAGES)
    "medium": ((64, 64, 16, 4, 4), (128, 64, 32, 2, 2, 4)),
    "small": ((32, 32, 32, 2, 2), (64, 64, 32, 2, 2, 4)),
    "large": ((128, 64, 16, 8, 4), (128, 128, 32, 2, 4, 4)),
    "wide": ((128, 128, 8, 8, 8), (128, 256, 32, 2, 4, 4)),
}


class SynthMatmul(NvidiaCandidate):
    name = "synth_matmul"
    op = "matmul"
    tier = Tier.SYNTHESIZED
    templates = ("gemm_tiled.cu", "gemm_mma.cu")

    def __init__(self):
        self._kernels: dict[tuple, tuple] = {}  # -> (kernel, the tile it was compiled for)

    def param_space(self):
        return [{"tile": size} for size in TILES]

    def applies_to(self, region):
        ok = check_gemm(region, self.dtypes)
        if ok is not True:
            return ok
        if not region.has_epilogue:
            return "no epilogue to fuse (the emitted GEMMs are this kernel without one)"
        res = region.residual
        if res is None:
            return True
        if hasattr(res, "strides"):
            strides, size = res.strides, res.itemsize
        else:  # a torch caller's residual (strides in elements)
            size = res.element_size()
            strides = tuple(st * size for st in res.stride())
        if strides[0] % size or strides[1] % size or min(strides) <= 0:
            return f"residual strides {strides} are not positive whole elements"
        return True

    def source(self):
        return super().source() + inspect.getsource(synth) + inspect.getsource(synth_cuda)

    def run(self, region, params):
        out = region.alloc_out()
        res = region.residual
        res_cs = res.strides[1] // res.itemsize if res is not None else 1
        ldr = res.strides[0] // res.itemsize if res is not None else 0
        half = region.dtype != "float32"
        tile = TILES[params["tile"]][1 if half else 0]
        cp_async = half and cp_async_path(region, out)
        key = (region.dtype, region.key.attrs, res_cs, tile, cp_async)
        plan = self._kernels.get(key)
        if plan is None:
            if half:
                tile = fit_ring(tile, shared_limit())  # the ring the device holds
            kernel = synth_cuda.gemm_kernel(synth.epilogue_chain(region), region.dtype, tile, res_cs, cp_async)
            fn = synth_cuda.compile_kernel(kernel)
            plan = self._kernels[key] = (with_shared_memory(fn, tile) if half else fn, tile)
        fn, tile = plan
        if region.dims["m"] and region.dims["n"]:
            bias = region.bias if region.bias is not None else out  # out stands in for an unused pointer
            residual = res if res is not None else out
            launch = launch_mma if half else launch_tiled
            launch(fn, tile, region, out, bias, residual, ldr)
        return out


register(SynthMatmul())
