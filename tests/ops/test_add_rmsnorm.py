"""add_rmsnorm (a residual add and the RMSNorm of its sum, both returned; issue 43 item 2): region validation,
every CPU candidate through the F4 gate, the cleverest wrong kernels refused by name (one only because the two
results are judged apart), the families' exact split, and ``torch.ops.arbiter.add_rmsnorm`` from its ``TorchOp``."""
import numpy as np
import pytest

import arbiter
from arbiter import RegionError
from arbiter.candidates import Candidate, Tier
from arbiter.ops import op_kind
from arbiter.ops.add_rmsnorm import AddRMSNorm, split_sum
from arbiter.verify import compare, verify

BUILTINS = {"numpy_add_rmsnorm", "numba_add_rmsnorm_fused"}


def _want(x, residual, weight, eps=1e-6):
    s = x.astype(np.float64) + residual
    return np.stack([s, s / np.sqrt((s * s).mean(-1, keepdims=True) + eps) * weight])


def test_region_errors_name_the_argument(rng):
    x = rng.standard_normal((4, 8)).astype(np.float32)
    w = np.ones(8, np.float32)
    with pytest.raises(RegionError, match=r"^residual: shape \(4, 7\) should be x's \(4, 8\)"):
        AddRMSNorm(x, x[:, :7], w)
    with pytest.raises(RegionError, match=r"^weight: shape \(7,\) should be \(8,\)"):
        AddRMSNorm(x, x, w[:7])
    with pytest.raises(RegionError, match="^residual: dtype"):
        AddRMSNorm(x, x.astype(np.float64), w)
    with pytest.raises(RegionError, match=r"^out: shape \(4, 8\) should be \(2, 4, 8\)"):
        AddRMSNorm(x, x, w, out=np.empty_like(x))
    with pytest.raises(RegionError, match="^eps: must be a finite number > 0"):
        AddRMSNorm(x, x, w, eps=0.0)


def test_any_rank_is_rows_by_cols_and_returns_both_results(rng):
    x, res = (rng.standard_normal((2, 5, 16)).astype(np.float32) for _ in range(2))
    w = rng.standard_normal(16).astype(np.float32)
    region = AddRMSNorm(x, res, w)
    assert region.key.id == AddRMSNorm(x.reshape(10, 16), res.reshape(10, 16), w).key.id \
        == "cpu:add_rmsnorm:float32:RR:-:rows16,cols16"
    y = arbiter.run_arbitrated("add_rmsnorm", region)
    assert y.shape == (2, 2, 5, 16)
    np.testing.assert_allclose(y, _want(x, res, w), rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_candidate_passes_at_odd_shapes(dtype, every_candidate):
    every_candidate(AddRMSNorm.random("cpu", dtype, {"rows": 7, "cols": 129}), BUILTINS)


def test_float16_and_strided_inputs_go_to_the_vendor(every_candidate):
    every_candidate(AddRMSNorm.random("cpu", "float16", {"rows": 5, "cols": 64}), {"numpy_add_rmsnorm"})
    decisions = every_candidate(AddRMSNorm.random("cpu", "float32", {"rows": 5, "cols": 64}, layout="SR"),
                                {"numpy_add_rmsnorm"})
    assert "numba_add_rmsnorm_fused" not in decisions


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_the_families_split_the_sum_exactly(dtype):
    rng = np.random.default_rng(3)
    region = AddRMSNorm.random("cpu", dtype, {"rows": 6, "cols": 40})
    t = rng.standard_normal((6, 40)) * 10.0 ** rng.uniform(-3, 4, (6, 1))
    t[1, 3], t[2, 5], t[4, 0] = np.nan, np.inf, -np.inf
    region.x[...] = t
    drawn = region.x.astype(np.float64)
    split_sum(region)
    total = region.x.astype(np.float64) + region.residual.astype(np.float64)
    np.testing.assert_array_equal(total, drawn)  # exactly, NaN and Inf included (NaN == NaN here)
    big = np.abs(region.residual[0]) >= np.abs(region.x[0])  # even rows: the residual stream dominates
    assert big.mean() > 0.9 and (np.abs(region.x[1]) >= np.abs(region.residual[1])).mean() > 0.9


# --- wrong kernels, each refused by the gate -------------------------------------------------------------------
class _Wrong(Candidate):
    target, op, tier, priority = "cpu", "add_rmsnorm", Tier.HAND_TUNED, 100

    def norm(self, region, s):
        return s / np.sqrt((s * s).mean(-1, keepdims=True) + region.eps) * region.weight


class StaleSum(_Wrong):
    """Normalises the sum but returns x as the sum (a kernel that updates the residual stream in place and hands
    back the input it was given)."""

    name = "stale_sum"

    def run(self, region, params):
        out = region.alloc_out()
        out[0] = region.x
        out[1] = self.norm(region, region.x + region.residual)
        return out


class NormOfX(_Wrong):
    """Returns the sum, but normalises x alone (the add and the norm fused in the wrong order)."""

    name = "norm_of_x"

    def run(self, region, params):
        out = region.alloc_out()
        out[0] = region.x + region.residual
        out[1] = self.norm(region, region.x)
        return out


class ApproxScale(_Wrong):
    """A fast reciprocal square root 2.5e-5 off (2.5x the float32 budget): hidden under the sum's scale when the
    two results share one norm, refused when each is judged alone (``OpKind.parts``)."""

    name = "approx_scale"

    def run(self, region, params):
        out = region.alloc_out()
        out[0] = region.x + region.residual
        out[1] = self.norm(region, out[0]) * np.float32(1 + 2.5e-5)
        return out


class DropsNaN(_Wrong):
    """Right, except that a NaN in the residual stream becomes 0 (a kernel that masks its inputs)."""

    name = "nan_dropping_add_rmsnorm"

    def run(self, region, params):
        out = region.alloc_out()
        out[0] = region.x + np.nan_to_num(region.residual, nan=0.0)
        out[1] = self.norm(region, out[0])
        return out


@pytest.mark.parametrize("wrong,where", [(StaleSum(), "element (0,"), (NormOfX(), "element (1,"),
                                         (ApproxScale(), "relative error"), (DropsNaN(), "nonfinite")])
def test_a_wrong_kernel_is_refused(wrong, where):
    region = AddRMSNorm.random("cpu", "float32", {"rows": 64, "cols": 256})
    verdict = verify(wrong, {}, region)
    assert not verdict.passed and where in verdict.reason, verdict.reason


def test_one_norm_over_both_results_would_pass_the_approximate_scale():
    # why the parts are judged apart: the sum (rms ~2.8 on benign data, ~300 on large_offset's) hides the
    # normalised rows' error in one Frobenius norm
    region = AddRMSNorm.random("cpu", "float32", {"rows": 64, "cols": 256})
    y = ApproxScale().run(region, {}).astype(np.float64)
    ref = op_kind("add_rmsnorm").oracle(region)
    budget = arbiter.verify.budget_for("add_rmsnorm", "float32")
    assert compare(y, ref, budget)[0] == ""
    assert "relative error" in compare(y, ref, budget, parts=(0, 1))[0]


# --- torch.ops.arbiter.add_rmsnorm, from the op kind's TorchOp --------------------------------------------------
def test_torch_op_eager_compiled_and_its_gradient():
    torch = pytest.importorskip("torch")
    import arbiter.torch as at
    from arbiter.ops.add_rmsnorm.torch_ref import ref_add_rmsnorm

    g = torch.Generator().manual_seed(0)
    x, res = torch.randn(2, 6, 32, generator=g), torch.randn(2, 6, 32, generator=g)
    w = torch.randn(32, generator=g)
    want = ref_add_rmsnorm(x, res, w, 1e-6)
    for call in (torch.ops.arbiter.add_rmsnorm, at.OPS["add_rmsnorm"]):
        total, normed = call(x, res, w, 1e-6).unbind(0)
        torch.testing.assert_close(total, want[0], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(normed, want[1], rtol=1e-5, atol=1e-5)
    torch.library.opcheck(torch.ops.arbiter.add_rmsnorm.default,
                          (torch.randn(3, 8), torch.randn(3, 8), torch.randn(8), 1e-6),
                          test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))
    compiled = torch.compile(lambda a, b: torch.ops.arbiter.add_rmsnorm(a, b, w, 1e-6)[1] * 2.0, fullgraph=True,
                             backend="aot_eager")
    torch.testing.assert_close(compiled(x, res), 2.0 * want[1], rtol=1e-5, atol=1e-5)
    leaves = [t.detach().clone().requires_grad_() for t in (x, res, w)]
    at.OPS["add_rmsnorm"](*leaves, 1e-6).square().sum().backward()
    refs = [t.detach().clone().requires_grad_() for t in (x, res, w)]
    ref_add_rmsnorm(*refs, 1e-6).square().sum().backward()
    for got, ref in zip(leaves, refs):
        torch.testing.assert_close(got.grad, ref.grad, rtol=1e-4, atol=1e-5)
