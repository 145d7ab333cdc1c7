"""rope (rotary position embedding, issue 43 item 2): region validation, every CPU candidate through the F4 gate,
the cleverest wrong kernels refused by name, and ``torch.ops.arbiter.rope`` from the op kind's own ``TorchOp``."""
import numpy as np
import pytest

import arbiter
from arbiter import RegionError
from arbiter.candidates import Candidate, Tier
from arbiter.ops.rope import Rope, tables
from arbiter.verify import verify

BUILTINS = {"numpy_rope", "numba_rope_fused"}


def _tables(s, d, dtype=np.float32):
    cos, sin = tables(s, d)
    return cos.astype(dtype), sin.astype(dtype)


def test_region_errors_name_the_argument(rng):
    x = rng.standard_normal((2, 3, 5, 8)).astype(np.float32)
    cos, sin = _tables(5, 8)
    with pytest.raises(RegionError, match=r"^x: its last dimension D=7 must be even"):
        Rope(x[..., :7], cos[:, :7], sin[:, :7])
    with pytest.raises(RegionError, match=r"^cos: shape \(4, 8\) should be \[S, D\]"):
        Rope(x, cos[:4], sin)
    with pytest.raises(RegionError, match="^sin: dtype"):
        Rope(x, cos, sin.astype(np.float64))
    with pytest.raises(RegionError, match=r"^x: must be \[\.\.\., S, D\]"):
        Rope(x[0, 0, 0], cos, sin)


def test_the_key_is_the_rows_positions_and_width_of_any_rank(rng):
    cos, sin = _tables(16, 8)
    four = Rope(rng.standard_normal((2, 4, 16, 8)).astype(np.float32), cos, sin)
    three = Rope(rng.standard_normal((8, 16, 8)).astype(np.float32), cos, sin)
    assert four.key.id == three.key.id == "cpu:rope:float32:RRR:-:rows8,seq16,dim8"
    assert four.nd_shape == (2, 4, 16, 8) and three.nd_shape is None


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_candidate_passes_at_odd_shapes(dtype, every_candidate):
    every_candidate(Rope.random("cpu", dtype, {"rows": 5, "seq": 37, "dim": 22}), BUILTINS)


def test_a_permuted_view_of_q_is_served_right(rng):
    # llama keeps q as [B, S, H, D] and rotates it as [B, H, S, D]: a permuted view, computed out of place
    q = rng.standard_normal((2, 16, 4, 8)).astype(np.float32).transpose(0, 2, 1, 3)
    cos, sin = _tables(16, 8)
    y = arbiter.run_arbitrated("rope", Rope(q, cos, sin))
    want = q * cos + np.concatenate([-q[..., 4:], q[..., :4]], axis=-1) * sin
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


# --- wrong kernels, each refused by the gate -------------------------------------------------------------------
class _Wrong(Candidate):
    target, op, tier, priority = "cpu", "rope", Tier.HAND_TUNED, 100


class Interleaved(_Wrong):
    """GPT-J's rotation (pairs of neighbours, ``rotate_every_two``) where llama's rotates halves."""

    name = "interleaved_rope"

    def run(self, region, params):
        x = region.x
        rot = np.empty_like(x)
        rot[..., 0::2], rot[..., 1::2] = -x[..., 1::2], x[..., 0::2]
        out = region.alloc_out()
        out[...] = x * region.cos + rot * region.sin
        return out


class FirstHalfTables(_Wrong):
    """Reads only the first half of each table, taking the halves equal (they are in a model's tables)."""

    name = "first_half_rope"

    def run(self, region, params):
        x, h = region.x, region.x.shape[-1] // 2
        cos = np.concatenate([region.cos[:, :h]] * 2, axis=-1)
        sin = np.concatenate([region.sin[:, :h]] * 2, axis=-1)
        out = region.alloc_out()
        out[...] = x * cos + np.concatenate([-x[..., h:], x[..., :h]], axis=-1) * sin
        return out


class DropsNaN(_Wrong):
    """Right, except that a NaN in x becomes 0 (a kernel that masks its inputs)."""

    name = "nan_dropping_rope"

    def run(self, region, params):
        x, h = np.nan_to_num(region.x), region.x.shape[-1] // 2
        out = region.alloc_out()
        out[...] = x * region.cos + np.concatenate([-x[..., h:], x[..., :h]], axis=-1) * region.sin
        return out


@pytest.mark.parametrize("wrong,where", [(Interleaved(), "at "), (FirstHalfTables(), "at "),
                                         (DropsNaN(), "nan_in_x")])
def test_a_wrong_rotation_is_refused(wrong, where):
    region = Rope.random("cpu", "float32", {"rows": 4, "seq": 16, "dim": 32})
    verdict = verify(wrong, {}, region)
    assert not verdict.passed and where in verdict.reason, verdict.reason


def test_the_first_half_kernel_would_pass_a_models_own_tables():
    # why the benign family's random tables matter: on llama's tables the two halves are equal
    x = np.random.default_rng(1).standard_normal((4, 16, 32)).astype(np.float32)
    region = Rope(x, *_tables(16, 32))
    y = FirstHalfTables().run(region, {})
    np.testing.assert_allclose(y, arbiter.run_arbitrated("rope", Rope(x, *_tables(16, 32))), rtol=1e-6)


# --- torch.ops.arbiter.rope, from the op kind's TorchOp ---------------------------------------------------------
def test_torch_op_eager_compiled_and_its_gradient():
    torch = pytest.importorskip("torch")
    import arbiter.torch as at
    from arbiter.ops.rope.torch_ref import ref_rope

    q = torch.randn(2, 16, 4, 8).transpose(1, 2)  # a permuted view, as llama passes it
    cos, sin = (torch.from_numpy(t) for t in _tables(16, 8))
    want = ref_rope(q, cos, sin)
    for call in (torch.ops.arbiter.rope, at.OPS["rope"]):
        torch.testing.assert_close(call(q, cos, sin), want, rtol=1e-5, atol=1e-6)
    torch.library.opcheck(torch.ops.arbiter.rope.default, (torch.randn(3, 5, 6), *(torch.randn(5, 6),) * 2),
                          test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))
    compiled = torch.compile(lambda t: torch.ops.arbiter.rope(t, cos, sin) * 2.0, fullgraph=True,
                             backend="aot_eager")
    torch.testing.assert_close(compiled(q), 2.0 * want, rtol=1e-5, atol=1e-6)
    leaf = q.detach().clone().requires_grad_()
    at.OPS["rope"](leaf, cos, sin).square().sum().backward()
    ref = q.detach().clone().requires_grad_()
    ref_rope(ref, cos, sin).square().sum().backward()
    torch.testing.assert_close(leaf.grad, ref.grad, rtol=1e-5, atol=1e-5)
