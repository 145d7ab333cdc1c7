"""Vendor FFT (``torch.fft``, pocketfft in torch) on the CPU through PyTorch: the nvidia ``torch_fft``'s code on
zero-copy ``torch.from_numpy`` views (see ``arbiter/candidates/cpu/_torch.py``)."""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.cpu._torch import TorchOnCpu
from arbiter.candidates.nvidia.torch_fft import TorchFFT


class TorchFFTCpu(TorchOnCpu, TorchFFT):
    name = "torch_fft"


register(TorchFFTCpu())
