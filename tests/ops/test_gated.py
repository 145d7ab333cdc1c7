"""gated (SwiGLU): region validation, the epilogue flag, and every CPU candidate through the F4 gate."""
import numpy as np
import pytest

from arbiter import RegionError
from arbiter.candidates import REGISTRY, Candidate, Tier
from arbiter.regions import Gated
from arbiter.verify import verify

BOTH = {"numpy_gated", "numba_gated_fused"}


def test_region_errors_name_the_argument(rng):
    x = rng.standard_normal((5, 8)).astype(np.float32)
    w = rng.standard_normal((8, 6)).astype(np.float32)
    with pytest.raises(RegionError, match="^w_gate: shape"):
        Gated(x, w[:7], w)
    with pytest.raises(RegionError, match="^w_up: shape"):
        Gated(x, w, w[:, :5])
    with pytest.raises(RegionError, match="^w_up: dtype"):
        Gated(x, w, w.astype(np.float64))
    with pytest.raises(RegionError, match=r"^x: must be \[M, K\] or \[\.\.\., M, K\]"):
        Gated(x[0], w, w)


def test_the_gate_is_a_fused_epilogue():
    assert Gated.random("cpu", "float32", {"m": 3, "n": 4, "k": 5}).has_epilogue


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_candidate_passes_at_odd_shapes(dtype, every_candidate):
    every_candidate(Gated.random("cpu", dtype, {"m": 37, "n": 29, "k": 70}), BOTH)


def test_every_block_height_passes_including_a_tail():
    fused = REGISTRY.get("numba_gated_fused", "cpu", "gated")
    region = Gated.random("cpu", "float32", {"m": 161, "n": 17, "k": 33})  # 161 = 5 * 32 + 1
    for params in fused.param_space():
        assert verify(fused, params, region).passed, params


def test_float16_and_strided_weights(every_candidate):
    every_candidate(Gated.random("cpu", "float16", {"m": 9, "n": 20, "k": 31}), {"numpy_gated"})
    every_candidate(Gated.random("cpu", "float32", {"m": 9, "n": 20, "k": 31}, layout="RSC"), BOTH)


# --- SwiGLU from one concatenated gate/up weight (issue 43 item 2) ---------------------------------------------
def _halves(rng, k, n, linear: bool):
    """The two halves of one concatenated weight as a model holds it: ``[K, 2N]`` row-major (its column halves), or
    a torch ``Linear`` weight ``[2N, K]`` whose row blocks, transposed, are the ``[K, N]`` operands."""
    if linear:
        w = (rng.standard_normal((2 * n, k)) / np.sqrt(k)).astype(np.float32)
        return w[:n].T, w[n:].T
    w = (rng.standard_normal((k, 2 * n)) / np.sqrt(k)).astype(np.float32)
    return w[:, :n], w[:, n:]


@pytest.mark.parametrize("linear", [False, True])
def test_the_halves_of_one_weight_are_keyed_and_served_by_one_gemm(rng, linear, every_candidate):
    from arbiter.keys import concatenated

    w_gate, w_up = _halves(rng, 33, 20, linear)
    x = rng.standard_normal((9, 33)).astype(np.float32)
    region = Gated(x, w_gate, w_up)
    assert ("shares", "w_up>w_gate") in region.attrs, region.attrs
    whole = concatenated(w_gate, w_up)
    assert whole.shape == (33, 40) and np.shares_memory(whole, w_gate)
    np.testing.assert_array_equal(whole, np.concatenate([w_gate, w_up], axis=1))
    apart = Gated(x, np.ascontiguousarray(w_gate), np.ascontiguousarray(w_up))
    assert not any(k == "shares" for k, _ in apart.attrs) and concatenated(apart.w_gate, apart.w_up) is None
    every_candidate(region, {"numpy_gated"})


class SwappedHalves(Candidate):
    """Right on two weights; on the halves of one concatenated weight, one GEMM, but the halves read in the other
    order (up first, as some checkpoints store them): wrong exactly where the one-GEMM path is taken."""

    name, target, op, tier, priority = "swapped_halves", "cpu", "gated", Tier.HAND_TUNED, 100

    def run(self, region, params):
        from arbiter.keys import concatenated

        whole, n = concatenated(region.w_gate, region.w_up), region.dims["n"]
        out = region.alloc_out()
        if whole is None:
            g, u = region.x @ region.w_gate, region.x @ region.w_up
        else:
            z = region.x @ whole
            u, g = z[:, :n], z[:, n:]
        out[...] = g / (1.0 + np.exp(-g)) * u
        return out


@pytest.mark.parametrize("linear", [False, True])
def test_a_kernel_wrong_only_on_one_concatenated_weight_is_refused(rng, linear):
    # the probes of a key with shares w_up>w_gate are such halves too (layouts._share); before, they passed one
    # array twice, so the one-GEMM path of this kernel was never run by the gate
    w_gate, w_up = _halves(rng, 40, 24, linear)
    region = Gated(rng.standard_normal((16, 40)).astype(np.float32), w_gate, w_up)
    verdict = verify(SwappedHalves(), {}, region)
    assert not verdict.passed and "element" in verdict.reason, verdict.reason
    apart = Gated(region.x, np.ascontiguousarray(w_gate), np.ascontiguousarray(w_up))
    assert verify(SwappedHalves(), {}, apart).passed


def test_torch_callers_concatenated_gate_up_weight():
    torch = pytest.importorskip("torch")
    import arbiter.torch as at

    g = torch.Generator().manual_seed(0)
    w = torch.randn(2 * 24, 40, generator=g) / 40 ** 0.5  # a fused gate_up_proj Linear weight
    x = torch.randn(3, 5, 40, generator=g)
    gate, up = torch.nn.functional.linear(x, w).chunk(2, -1)
    want = torch.nn.functional.silu(gate) * up
    for _ in range(3):  # the first call learns the signature; later ones take arbiter.torch's fast path on tensors
        torch.testing.assert_close(at.gated(x, w[:24].T, w[24:].T), want, rtol=1e-5, atol=1e-5)
