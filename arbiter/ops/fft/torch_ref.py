"""fft's torch reference (``arbiter.torch.REFERENCE``)."""
from __future__ import annotations

import torch


def ref_fft(x, kind, inverse, n):
    if kind == "c2c":
        return torch.fft.ifft(x, dim=-1) if inverse else torch.fft.fft(x, dim=-1)
    return torch.fft.irfft(x, n=n, dim=-1) if inverse else torch.fft.rfft(x, dim=-1)
