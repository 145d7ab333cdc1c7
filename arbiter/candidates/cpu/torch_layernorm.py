"""Vendor LayerNorm (``torch.layer_norm``) on the CPU through PyTorch: the nvidia ``torch_layernorm``'s code on
zero-copy ``torch.from_numpy`` views (see ``arbiter/candidates/cpu/_torch.py``).

float16 is normalised in float32 and rounded once, as ``numpy_layernorm`` does: torch's float16 CPU kernel misses an
exactly constant row (131.375 comes back 7.6e-4 where the answer is 0 at eps 1e-5, 1000 comes back 2.0e-3, at every
width; torch 2.13), up to 26x the float16 budget at the gate's constant rows (issue 38); its float32 kernel is exact
there. The conversions are torch's: 57-68 ms at 4096 x 4096 against its float16 kernel's 16 ms, NumPy's 148 ms.
"""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.cpu._torch import TorchOnCpu
from arbiter.candidates.nvidia.torch_layernorm import TorchLayerNorm


class _HalfInFloat32(TorchLayerNorm):
    """The nvidia candidate's ``run``, float16 taken through torch's float32 kernel (below ``TorchOnCpu`` in the MRO,
    so its thread count covers the conversions too)."""

    def run(self, region, params):
        if region.dtype != "float16":
            return super().run(region, params)
        import torch

        def wide(a):  # a float32 copy by torch (NumPy's float16 casts are 2.5x slower)
            return (a if isinstance(a, torch.Tensor) else torch.from_numpy(a)).float()

        b = wide(region.bias) if region.bias is not None else None
        y = torch.layer_norm(wide(region.x), (region.dims["cols"],), wide(region.weight), b, region.eps)
        if region.out is None:
            return y.half().numpy()
        out = region.out if isinstance(region.out, torch.Tensor) else torch.from_numpy(region.out)
        out.copy_(y)  # rounded once into out
        return region.out


class TorchLayerNormCpu(TorchOnCpu, _HalfInFloat32):
    name = "torch_layernorm"


register(TorchLayerNormCpu())
