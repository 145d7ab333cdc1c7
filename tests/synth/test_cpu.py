"""The numba backend of the generator: general chains computed right, sources cached by content hash."""
from __future__ import annotations

import numpy as np
import pytest

from arbiter.synth import Chain, Operand, Step
from arbiter.synth import cpu as synth_cpu

# A chain that is no matmul epilogue: per-row scale, a scalar shift, silu, minus a full operand.
GENERAL = Chain((Operand("scale", "col"), Operand("shift", "scalar"), Operand("other", "full")),
                (Step("mul", "scale"), Step("add", "shift"), Step("act", "silu"), Step("sub", "other")))


@pytest.mark.parametrize("dtype,rtol", [("float32", 1e-5), ("float64", 1e-12)])
def test_general_chain_matches_float64_numpy(dtype, rtol, rng):
    m, n = 37, 53
    z, scale, other = rng.standard_normal((m, n)), rng.standard_normal(m), rng.standard_normal((m, n))
    shift = 0.25
    ref = z * scale[:, None] + shift
    ref = ref / (1.0 + np.exp(-ref)) - other
    zt, st, ot = (a.astype(dtype) for a in (z, scale, other))
    out = np.full((m, n), np.nan, dtype=dtype)
    k = synth_cpu.kernel(GENERAL, dtype, parallel=False)
    k.fn(zt, out, st, shift, ot)
    assert out.dtype == dtype
    np.testing.assert_allclose(out, ref, rtol=rtol, atol=rtol)


def test_source_is_readable_and_names_every_step():
    text = synth_cpu.source(GENERAL, "float32", parallel=True)
    assert "def kernel(z, out, scale, shift, other):" in text
    for line in ("v = v * scale[i]", "v = v + shift", "v = v / (T(1.0) + math.exp(-v))  # silu",
                 "v = v - other[i, j]", "for i in prange(m):", "T = np.float32"):
        assert line in text
    assert "for i in range(m):" in synth_cpu.source(GENERAL, "float32", parallel=False)


def test_kernels_are_cached_by_content_hash(tmp_path, monkeypatch):
    monkeypatch.setenv("ARBITER_CACHE_DIR", str(tmp_path))
    chain = Chain((Operand("w", "row"),), (Step("mul", "w"), Step("act", "relu")))
    first = synth_cpu.kernel(chain, "float64", parallel=False)
    assert first.path == tmp_path / "synth" / "cpu" / f"k_{first.hash}.py"
    assert first.path.read_text() == first.source == synth_cpu.source(chain, "float64", parallel=False)
    assert synth_cpu.kernel(chain, "float64", parallel=False) is first  # same content: same kernel
    assert synth_cpu.kernel(chain, "float32", parallel=False).hash != first.hash


def test_unsupported_dtype_is_refused_by_name():
    with pytest.raises(ValueError, match="dtype: float16"):
        synth_cpu.source(GENERAL, "float16")
