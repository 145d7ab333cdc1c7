"""PyTorch as a vendor library on NVIDIA: availability and zero-copy DLPack views of CuPy arrays."""
from __future__ import annotations

from functools import lru_cache

from arbiter import targets
from arbiter.candidates import Tier
from arbiter.candidates.nvidia._cuda import NvidiaCandidate


@lru_cache(maxsize=1)
def torch_reason() -> bool | str:
    """True when PyTorch imports and sees a CUDA device; else why not."""
    try:
        import torch
    except Exception as exc:
        return f"PyTorch does not import ({type(exc).__name__}); install kernel-arbiter[torch]"
    if not torch.cuda.is_available():
        return f"PyTorch {torch.__version__} sees no CUDA device"
    return True


def torch_available() -> bool | str:
    ok = targets.get("nvidia").available()
    return torch_reason() if ok is True else ok


def view(array):
    """A torch tensor sharing ``array``'s memory (DLPack, no copy)."""
    import torch

    return torch.from_dlpack(array)


class TorchCandidate(NvidiaCandidate):
    """A PyTorch op as a vendor candidate: available when the nvidia target is and torch sees CUDA.
    Priority 5 puts it after the CuPy vendor candidates within the tier (tier order only; measurement decides)."""

    tier = Tier.HAND_TUNED
    priority = 5

    def available(self):
        return torch_available()
