"""Emitted Triton kernels on AMD GPUs: the shared Triton GEMM (epilogues fused), fused SwiGLU and row ops (softmax,
RMSNorm, LayerNorm), the same templates (``candidates/_triton_kernels.py``) compiled by Triton's HIP backend.

Available where the rocm target is and Triton's active driver is HIP (a ROCm build of PyTorch beside Triton:
Triton picks its driver through PyTorch); otherwise each says why, with the install hint. Unlike the hiprtc
kernels, the epilogue is the kernel's own, so these serve fused epilogues and half precision (the row ops too:
float16, bfloat16 and float32, where the hiprtc row kernels take float32 only). Launches go to the
null stream, as the rocm target's other kernels do, through the compiled kernel's launcher (``gpu_triton``).
"""
from __future__ import annotations

from arbiter import targets
from arbiter.candidates import register
from arbiter.candidates.gpu_templates.triton_gated import TritonGated
from arbiter.candidates.gpu_templates.triton_matmul import TritonMatmul
from arbiter.candidates.gpu_templates.triton_rows import TritonLayerNorm, TritonRMSNorm, TritonSoftmax
from arbiter.memo import Memo


class RocmTriton:
    """The rocm side of a Triton candidate: target, Triton backend ``hip``, the null stream, HIP's device."""

    target = "rocm"
    triton_backend = "hip"

    def target_reason(self) -> bool | str:
        return targets.get("rocm").available()

    def stream(self) -> int:
        return 0

    def device(self) -> int:
        from arbiter.targets import rocm

        return int(rocm.check(rocm.hip.hipGetDevice(), "hipGetDevice"))


class RocmTritonMatmul(RocmTriton, TritonMatmul):
    name = "rocm_triton_matmul"
    plans = Memo()


class RocmTritonGated(RocmTriton, TritonGated):
    name = "rocm_triton_gated"
    plans = Memo()


class RocmTritonSoftmax(RocmTriton, TritonSoftmax):
    name = "rocm_triton_softmax"
    plans = Memo()


class RocmTritonRMSNorm(RocmTriton, TritonRMSNorm):
    name = "rocm_triton_rmsnorm"
    plans = Memo()


class RocmTritonLayerNorm(RocmTriton, TritonLayerNorm):
    name = "rocm_triton_layernorm"
    plans = Memo()


register(RocmTritonMatmul())
register(RocmTritonGated())
register(RocmTritonSoftmax())
register(RocmTritonRMSNorm())
register(RocmTritonLayerNorm())
