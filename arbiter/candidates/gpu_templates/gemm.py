"""What the template GEMMs of every GPU target share: their base, the identity epilogue and the GEMM check."""
from __future__ import annotations

from arbiter import layouts
from arbiter.candidates.gpu import GpuCandidate

IDENTITY_EPILOGUE = """\
// No fused epilogue: the root op's value as it is (the candidate composes any epilogue afterwards).
__device__ __forceinline__ float arb_epilogue(float v, int row, int col, const T* __restrict__ bias,
                                              const T* __restrict__ residual, long long ldr) { return v; }
"""


class TemplateGemm(GpuCandidate):
    """Base of the GEMM templates. A fused epilogue is the registering target's: none is composed here (rocm
    declines epilogues in ``applies_to``); nvidia mixes in CuPy's before the template (``_cuda.CupyEpilogue``)."""

    def gemm_output(self, region, out) -> tuple:
        """(buffer the kernel writes, extra #defines): ``out`` itself."""
        return out, ()

    def finish_epilogue(self, region, buffer, out) -> None:
        """Apply ``region``'s fused epilogue to ``buffer`` (which holds a @ b), writing ``out``."""
        if getattr(region, "has_epilogue", False):
            raise NotImplementedError(f"{self.name}: the {self.target} target cannot compose a fused epilogue")


def check_gemm(region, dtypes) -> bool | str:
    """What every emitted/synthesized GEMM needs: a supported dtype and C-contiguous a and b."""
    if region.dtype not in dtypes:
        return f"dtype {region.dtype} is not one of {', '.join(dtypes)}"
    if region.layout[:2] != "RR":
        return f"needs C-contiguous a and b (layout RR), got {region.layout[:2]}; the vendor candidates serve others"
    return layouts.packed_reason(region)  # the fused epilogue reads bias and residual as packed arrays
