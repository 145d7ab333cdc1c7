"""Vendor FFT on NVIDIA through PyTorch (``torch.fft``, cuFFT with torch's plan cache), any length.

c2c uses ``fft``/``ifft`` and r2c ``rfft``, in the input's precision. c2r is a c2c inverse of the
Hermitian-extended spectrum, not ``irfft``, for the reason ``cupy_fft`` gives: cuFFT's single-precision c2r
missed the float32 budget on an H200. Into a given out (the gate's) the result is copied; otherwise
torch's own output is returned.
"""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.nvidia._torch import TorchCandidate, deliver, tensor


def c2r_via_c2c(x, n: int):
    """The real inverse of half spectrum ``x`` (n // 2 + 1 bins on the last axis), as numpy.fft.irfft
    defines it (the imaginary parts of the zero and, for even n, the Nyquist bin ignored)."""
    import torch

    full = torch.empty(x.shape[:-1] + (n,), dtype=x.dtype, device=x.device)
    h = n // 2 + 1
    full[..., :h] = x
    full[..., 0] = full[..., 0].real
    if n % 2 == 0:
        full[..., n // 2] = full[..., n // 2].real
    m = (n + 1) // 2  # bins 1 .. m - 1 have their conjugate mirrors at n - 1 .. n - m + 1
    if m > 1:
        full[..., n - m + 1:] = torch.conj(x[..., 1:m].flip(-1))
    return torch.fft.ifft(full, dim=-1).real


class TorchFFT(TorchCandidate):
    name = "torch_fft"
    op = "fft"

    def run(self, region, params):
        import torch

        x = tensor(region, "x")
        if region.kind == "c2c":
            y = torch.fft.ifft(x, dim=-1) if region.inverse else torch.fft.fft(x, dim=-1)
        elif region.inverse:
            y = c2r_via_c2c(x, region.n)
        else:
            y = torch.fft.rfft(x, dim=-1)
        return deliver(region, y)


register(TorchFFT())
