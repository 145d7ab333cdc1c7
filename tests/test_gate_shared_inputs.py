"""Inputs passed twice (issue 38 item 2, in part): ``attention(q, k, k)``, ``matmul(a, a)``. The key says which
operand is which other one (``shares=v@k``) and the probes pass one array twice, so a kernel broken by the sharing
(a pack cache keyed by pointer hands v k's pack) or exploiting it (a symmetric shortcut) is refused; before, the
gate always drew the operands apart and served them."""
import numpy as np
import pytest

from arbiter import layouts
from arbiter.candidates import Candidate, Tier
from arbiter.regions import Attention, Matmul
from arbiter.verify import probe_plan, verify
from builtin_support import assert_builtins_pass


class PacksByPointer(Candidate):
    """Packs k transposed and v contiguous into per-call scratch keyed by each operand's data pointer (a pack cache
    that assumes distinct operands): when v is k, v's lookup returns k's transposed pack."""

    name, target, op, tier, priority = "packs_by_pointer", "cpu", "attention", Tier.HAND_TUNED, 100

    def run(self, region, params):
        packed: dict = {}

        def pack(a, transposed):
            at = a.__array_interface__["data"][0]
            if at not in packed:
                packed[at] = np.ascontiguousarray(np.swapaxes(a, -1, -2) if transposed else a, dtype=np.float64)
            return packed[at]

        kt, v = pack(region.k, True), pack(region.v, False)
        s = (region.q.astype(np.float64) @ kt) * region.scale
        if region.causal:
            s = np.where(np.triu(np.ones(s.shape[-2:], bool), 1), -np.inf, s)
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        out = region.alloc_out()
        out[...] = (e / e.sum(axis=-1, keepdims=True)) @ v
        return out


class SymmetricShortcut(Candidate):
    """When b is a, computes a.T @ a (a Gram-matrix kernel), which is a @ a only for a symmetric a."""

    name, target, op, tier, priority = "symmetric_shortcut", "cpu", "matmul", Tier.HAND_TUNED, 100

    def run(self, region, params):
        out = region.alloc_out()
        np.matmul(region.a.T if region.b is region.a else region.a, region.b, out=out)
        return out


def _f32(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_the_key_says_which_operand_is_passed_twice():
    q, k = _f32(1, 2, 16, 8), _f32(1, 2, 16, 8, seed=1)
    assert "shares=v@k" in Attention(q, k, k).key.id
    assert "shares" not in Attention(q, k, k.copy()).key.id
    a = _f32(8, 8)
    assert "shares=b@a" in Matmul(a, a).key.id and "shares=b~a" in Matmul(a, a.T).key.id  # a view: its own mark
    assert "shares" not in Matmul(a, a.T.copy()).key.id
    assert layouts.shares(Attention(q, k, k).attrs) == [("v", "k", "@")]


def test_every_probe_of_a_shared_key_passes_one_array_twice():
    q, k = _f32(1, 2, 16, 8), _f32(1, 2, 16, 8, seed=1)
    region = Attention(q, k, k)
    from arbiter.verify import _draw

    rng = np.random.default_rng(0)
    for i, probe in enumerate(probe_plan(region)):
        fresh = _draw(region, probe, rng, shift=bool(i % 2), index=i)
        assert fresh.v is fresh.k, probe


@pytest.mark.parametrize("cls, make", [
    (PacksByPointer, lambda: (lambda q, k: Attention(q, k, k))(_f32(1, 2, 16, 8), _f32(1, 2, 16, 8, seed=1))),
    (SymmetricShortcut, lambda: (lambda a: Matmul(a, a))(_f32(24, 24))),
])
def test_a_kernel_broken_by_or_exploiting_the_sharing_is_refused(cls, make):
    verdict = verify(cls(), {}, make())
    assert not verdict.passed, verdict
    # drawn apart (the key without the sharing), the same kernel is right
    region = make()
    apart = Attention(region.q, region.k, region.k.copy()) if region.op == "attention" else Matmul(region.a,
                                                                                                   region.a.copy())
    assert verify(cls(), {}, apart).passed


@pytest.mark.parametrize("op, make", [
    ("attention", lambda: (lambda q, k: Attention(q, k, k))(_f32(1, 2, 16, 8), _f32(1, 2, 16, 8, seed=1))),
    ("matmul", lambda: (lambda a: Matmul(a, a))(_f32(24, 24))),
])
def test_the_builtins_serve_shared_inputs(op, make):
    assert_builtins_pass(op, make())


def test_a_torch_caller_passing_one_tensor_twice_gets_the_shared_key():
    torch = pytest.importorskip("torch")
    import arbiter
    import arbiter.torch as at

    q, k = torch.from_numpy(_f32(1, 2, 16, 8)), torch.from_numpy(_f32(1, 2, 16, 8, seed=1))
    for _ in range(3):  # the fast path, once warm, keeps the sharing apart too
        torch.testing.assert_close(at.attention(q, k, k), torch.nn.functional.scaled_dot_product_attention(q, k, k))
    keys = {r["key"] for r in arbiter.stats()}
    assert any("shares=v@k" in key for key in keys), keys
