"""PyTorch as a vendor library on the CPU: the nvidia target's torch candidates, reused on NumPy arrays.

Each ``torch_*.py`` module here is one line of inheritance, as the ROCm target reuses NVIDIA kernels:
``class TorchSoftmaxCpu(TorchOnCpu, TorchSoftmax)``. The op's code is the nvidia class's ``run``; its
helpers (``arbiter.candidates.nvidia._torch``) see a NumPy array through ``torch.from_numpy`` and give the
result back through ``Tensor.numpy()``, both zero-copy, so what is timed is torch's CPU kernel and the
view. torch stays optional: without it every torch candidate is unavailable, with the install hint.
Gated and timed like every other candidate: torch's kernels compete, never win by decree.

torch's intra-op pool is a solution parameter, as the BLAS pool is for NumPy's candidates: ``{}`` (torch's own
thread count) or ``{"torch_threads": 1}`` (set for the call and put back, 0.3 us), which on shared cores is often
the faster: a parallel region waits for every one of its threads, and a loaded box deschedules some.
"""
from __future__ import annotations

from arbiter import cpu_threads
from arbiter.candidates import Tier

INSTALL_HINT = "needs PyTorch: pip install 'kernel-arbiter[torch]'"


def torch_cpu_available() -> bool | str:
    """True when PyTorch imports, else why not (with the install hint)."""
    try:
        import torch  # noqa: F401
    except Exception as exc:  # absent, or broken
        return f"{INSTALL_HINT} ({type(exc).__name__}: {exc})"
    return True


def views_reason(region) -> bool | str:
    """True when every operand can be seen by torch without a copy, else why not."""
    if region.dtype == "bfloat16":
        return "dtype bfloat16: torch.from_numpy takes no ml_dtypes bfloat16 array; the NumPy candidate serves it"
    for name, array in region.operands().items():
        if any(s < 0 for s in array.strides):
            return f"{name}: negative strides; torch.from_numpy views only non-negative ones"
    return True


class TorchOnCpu:
    """First base of a cpu torch candidate (the second is the nvidia torch candidate whose ``run`` it reuses).

    HAND_TUNED, as NumPy's vendor calls; its priority is the nvidia one's less 20, after them in the tier (a
    fresh key's default stays NumPy's whether torch is installed or not, and the nvidia order between two torch
    candidates holds); measurement decides between them.
    """

    target = "cpu"
    tier = Tier.HAND_TUNED
    priority: int

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.priority = getattr(cls.__mro__[2], "priority", 0) - 20  # the reused nvidia candidate's

    def available(self):
        return torch_cpu_available()

    def param_space(self):
        return [{}, {"torch_threads": 1}]

    def launch_signature(self, region, params):
        import torch

        one = params.get("torch_threads") == 1 or torch.get_num_threads() == 1
        return "one thread" if one else "torch's threads"

    def run(self, region, params):
        threads = params.get("torch_threads")
        if not threads:
            return super().run(region, params)  # type: ignore[misc]  # the nvidia candidate's
        with cpu_threads.torch_threads(threads):  # restored by the last of concurrent callers (cpu_threads)
            return super().run(region, params)  # type: ignore[misc]

    def applies_to(self, region):
        if "residual" in dict(region.attrs).get("inplace", "").split("+"):
            # out= is the residual: torch's out= GEMMs write the product over it before adding it (2x the
            # product, the gate's in-place probe); numpy_matmul serves the in-place residual add
            return "out= is the residual (in-place residual add): torch's out= GEMM overwrites it first"
        ok = views_reason(region)
        return super().applies_to(region) if ok is True else ok  # type: ignore[misc]  # the candidate's own
