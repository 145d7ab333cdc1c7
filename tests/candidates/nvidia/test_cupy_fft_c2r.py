"""cupy_fft's (and torch_fft's) c2r builds the Hermitian spectrum itself (cuFFT's single-precision c2r missed
the budget on an H200); the construction is array-library neutral, so it is checked here with NumPy, on any length."""
from __future__ import annotations

import numpy as np
import pytest

from arbiter.candidates.nvidia.cupy_fft import c2r_via_c2c


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 999, 1000, 4096])
def test_c2r_via_c2c_matches_irfft_and_ignores_the_zero_and_nyquist_imaginary_parts(n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal((3, n // 2 + 1)) + 1j * rng.standard_normal((3, n // 2 + 1))
    y = c2r_via_c2c(np, x, n)
    assert y.shape == (3, n) and not np.iscomplexobj(y)
    np.testing.assert_allclose(y, np.fft.irfft(x, n=n), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n", [1, 2, 3, 8, 999, 1000])
def test_torch_fft_builds_the_same_hermitian_spectrum(n):
    """torch_fft's c2r is the same construction in torch (CPU tensors here; the H200 gates it on CUDA)."""
    torch = pytest.importorskip("torch")
    from arbiter.candidates.nvidia.torch_fft import c2r_via_c2c as torch_c2r

    rng = np.random.default_rng(n)
    x = rng.standard_normal((3, n // 2 + 1)) + 1j * rng.standard_normal((3, n // 2 + 1))
    y = torch_c2r(torch.from_numpy(x), n)
    assert tuple(y.shape) == (3, n) and not y.is_complex()
    np.testing.assert_allclose(y.numpy(), np.fft.irfft(x, n=n), rtol=1e-10, atol=1e-12)
