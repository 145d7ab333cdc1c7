"""fft: complex regions and outputs, the oracle, and every CPU candidate through the F4 gate."""
import numpy as np
import pytest

import arbiter
from arbiter import Candidate, RegionError, Tier
from arbiter.candidates import REGISTRY
from arbiter.oracles.fft import oracle
from arbiter.regions import FFT
from arbiter.verify import verify

BOTH = {"scipy_fft", "numba_stockham_fft"}


def test_region_errors_name_the_argument(rng):
    real = rng.standard_normal((3, 16)).astype(np.float32)
    cplx = real.astype(np.complex64)
    with pytest.raises(RegionError, match="^x: dtype float32: kind='c2c' takes complex"):
        FFT(real)
    with pytest.raises(RegionError, match="^x: dtype complex64: kind='r2c' takes float"):
        FFT(cplx, kind="r2c")
    with pytest.raises(RegionError, match="^kind: "):
        FFT(cplx, kind="dct")
    with pytest.raises(RegionError, match="^n: 10 does not fit a half spectrum of 16 bins"):
        FFT(cplx, kind="r2c", inverse=True, n=10)
    with pytest.raises(RegionError, match="^n: 8 differs"):
        FFT(cplx, n=8)
    with pytest.raises(RegionError, match="^out: dtype float32 should be complex64"):
        FFT(real, kind="r2c", out=np.empty((3, 9), np.float32))


def test_output_dtypes_and_shapes():
    r2c = FFT(np.ones((2, 10), np.float64), kind="r2c")
    assert (r2c.out_dtype, r2c.output_shape()) == ("complex128", (2, 6))
    c2r = FFT(np.ones((2, 6), np.complex64), kind="r2c", inverse=True, n=11)
    assert (c2r.out_dtype, c2r.output_shape(), c2r.n) == ("float32", (2, 11), 11)
    assert c2r.key.id == "cpu:fft:complex64:R:kind=r2c,inverse=1:batch2,n11"


@pytest.mark.parametrize("attrs, n", [({"kind": "c2c"}, 60), ({"kind": "c2c", "inverse": "1"}, 97),
                                      ({"kind": "r2c"}, 45), ({"kind": "r2c", "inverse": "1"}, 33),
                                      ({"kind": "r2c", "inverse": "1"}, 34)])
def test_oracle_is_the_definition(attrs, n):
    region = FFT.random("cpu", "float64", {"batch": 3, "n": n}, attrs)
    x = region.x.astype(np.complex128)
    fn = {("c2c", False): np.fft.fft, ("c2c", True): np.fft.ifft, ("r2c", False): np.fft.rfft}.get(
        (region.kind, region.inverse))
    expected = fn(x if region.kind == "c2c" else x.real) if fn else np.fft.irfft(x, n=n)
    np.testing.assert_allclose(oracle(region), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize("attrs", [{"kind": "c2c"}, {"kind": "c2c", "inverse": "1"}, {"kind": "r2c"},
                                   {"kind": "r2c", "inverse": "1"}])
def test_every_candidate_passes_powers_of_two(precision, attrs, every_candidate):
    every_candidate(FFT.random("cpu", precision, {"batch": 5, "n": 128}, attrs), BOTH)


@pytest.mark.parametrize("attrs, n", [({"kind": "c2c"}, 97), ({"kind": "r2c"}, 100),
                                      ({"kind": "r2c", "inverse": "1"}, 75)])
def test_other_lengths_go_to_the_vendor(attrs, n, every_candidate):
    region = FFT.random("cpu", "float32", {"batch": 3, "n": n}, attrs)
    every_candidate(region, {"scipy_fft"})
    assert "not a power of two" in REGISTRY.get("numba_stockham_fft", "cpu", "fft").applies_to(region)


def test_the_gate_compares_complex_outputs_as_complex():
    class Conjugated(Candidate):  # right magnitudes and real parts, wrong sign of every imaginary part
        name, target, op, tier = "conjugated_fft", "cpu", "fft", Tier.EMITTED

        def run(self, region, params):
            out = region.alloc_out()
            np.conjugate(np.fft.fft(region.x), out=out)
            return out

    region = FFT.random("cpu", "complex64", {"batch": 4, "n": 32})
    verdict = verify(Conjugated(), {}, region)
    assert not verdict.passed and "elementwise budget" in verdict.reason


def test_dispatch_returns_the_callers_buffer(rng):
    x = (rng.standard_normal((4, 64)) + 1j * rng.standard_normal((4, 64))).astype(np.complex64)
    out = np.empty_like(x)
    assert arbiter.run_arbitrated("fft", FFT(x, out=out)) is out
    np.testing.assert_allclose(out, np.fft.fft(x), rtol=1e-4, atol=1e-4)
