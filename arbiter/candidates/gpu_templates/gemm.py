"""What the template GEMMs of every GPU target share: the identity epilogue and the GEMM check."""
from __future__ import annotations

from arbiter import layouts

IDENTITY_EPILOGUE = """\
// No fused epilogue: the root op's value as it is (the candidate composes any epilogue afterwards).
__device__ __forceinline__ float arb_epilogue(float v, int row, int col, const T* __restrict__ bias,
                                              const T* __restrict__ residual, long long ldr) { return v; }
"""


def check_gemm(region, dtypes) -> bool | str:
    """What every emitted/synthesized GEMM needs: a supported dtype and C-contiguous a and b."""
    if region.dtype not in dtypes:
        return f"dtype {region.dtype} is not one of {', '.join(dtypes)}"
    if region.layout[:2] != "RR":
        return f"needs C-contiguous a and b (layout RR), got {region.layout[:2]}; the vendor candidates serve others"
    return layouts.packed_reason(region)  # the fused epilogue reads bias and residual as packed arrays
