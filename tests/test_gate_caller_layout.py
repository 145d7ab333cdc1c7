"""The caller's layout, the rest of it (issue 38 item 2): a Fortran-order operand inside a pointwise chain, the inner
axis of 3-D and 4-D softmax as called, the 64-byte alignment torch's tensors always have, and an operand that is a
view of another's memory (``matmul(a, a.T)``). For each, a kernel wrong only there is refused, and the built-ins
serve it. Each wrong kernel here was served by the tree before (its key did not say it, or no probe drew it)."""
import numpy as np
import pytest

from arbiter import aligned, layouts
from arbiter.candidates import Candidate, Tier
from arbiter.regions import Matmul, Pointwise, Softmax
from arbiter.verify import _draw, probe_plan, verify
from builtin_support import assert_builtins_pass


def _f32(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


class PointwiseInMemoryOrder(Candidate):
    """A pointwise chain that walks every operand in its own memory order (``ravel(order='K')``): right when all
    operands lie alike, wrong for a Fortran-order operand beside a row-major x."""

    name, target, op, tier, priority = "pointwise_in_memory_order", "cpu", "pointwise", Tier.HAND_TUNED, 100

    def run(self, region, params):
        acc = np.ravel(region.x, order="K").astype(np.float32)
        for step, operand in region.ops:
            other = operand if isinstance(operand, float) else np.ravel(operand, order="K")
            acc = acc * other if step == "mul" else acc + other if step == "add" else acc
        out = region.alloc_out()
        out[...] = acc.reshape(out.shape)
        return out


class SoftmaxAxisZeroForInner(Candidate):
    """A softmax that takes any inner axis as axis 0 (right for 2-D x, the only rank the gate drew before)."""

    name, target, op, tier, priority = "softmax_axis_zero_for_inner", "cpu", "softmax", Tier.HAND_TUNED, 100

    def run(self, region, params):
        axis = -1 if region.axis_last else 0
        x = region.x
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        out = region.alloc_out()
        out[...] = e / e.sum(axis=axis, keepdims=True)
        return out


class WrongWhen64Aligned(Candidate):
    """A GEMM with a 'vector path' taken only when every operand starts on a 64-byte boundary (as torch's tensors
    always do) at large sizes, and wrong there: it drops the last column of k."""

    name, target, op, tier, priority = "wrong_when_64_aligned", "cpu", "matmul", Tier.HAND_TUNED, 100

    def run(self, region, params):
        a, b = region.a, region.b
        out = region.alloc_out()
        if a.size >= 1 << 14 and a.ctypes.data % 64 == 0 and b.ctypes.data % 64 == 0:
            np.matmul(a[:, :-1], b[:-1], out=out)
        else:
            np.matmul(a, b, out=out)
        return out


class TransposedViewShortcut(Candidate):
    """A GEMM that, when b's memory is a's (``matmul(a, a.T)``, told by the base), computes the upper triangle and
    mirrors it, and gets the mirror wrong (it copies the triangle without transposing)."""

    name, target, op, tier, priority = "transposed_view_shortcut", "cpu", "matmul", Tier.HAND_TUNED, 100

    def run(self, region, params):
        a, b = region.a, region.b
        out = region.alloc_out()
        np.matmul(a, b, out=out)
        if b.base is not None and b.base is (a.base if a.base is not None else a) and out.shape[0] == out.shape[1]:
            upper = np.triu(out)
            out[...] = upper + np.triu(out, 1)  # the bug: the mirror should be upper.T's strict lower part
        return out


def test_a_fortran_operand_in_a_pointwise_chain_is_keyed_and_probed():
    x = _f32(48, 40)
    y = np.asfortranarray(_f32(48, 40, seed=1))
    region = Pointwise(x, [("mul", y), ("add", 1.0)])
    assert "ops[0]-C2" in region.key.id
    assert "layouts" not in Pointwise(x, [("mul", _f32(48, 40, seed=1))]).key.id  # all row-major: plain
    verdict = verify(PointwiseInMemoryOrder(), {}, region)
    assert not verdict.passed and "element" in verdict.reason, verdict.reason
    assert verify(PointwiseInMemoryOrder(), {}, Pointwise(x, [("mul", x * 2), ("add", 1.0)])).passed
    assert_builtins_pass("pointwise", region)


@pytest.mark.parametrize("shape, axis", [((6, 50, 10), 1), ((3, 4, 40, 5), 2), ((3, 40, 4, 5), 1)])
def test_an_inner_axis_of_3d_and_4d_softmax_is_probed_where_it_is_called(shape, axis):
    region = Softmax(_f32(*shape), axis=axis)
    assert f"axis=inner{axis}" in region.key.id
    rng = np.random.default_rng(0)
    for i, probe in enumerate(probe_plan(region)[:4]):
        fresh = _draw(region, probe, rng, shift=i % 2 == 1)
        assert fresh.x.ndim == len(shape) and fresh.axis == axis, (fresh.x.shape, fresh.axis)
    verdict = verify(SoftmaxAxisZeroForInner(), {}, region)
    assert not verdict.passed, verdict
    assert verify(SoftmaxAxisZeroForInner(), {}, Softmax(_f32(50, 60), axis=0)).passed  # 2-D: right there
    assert_builtins_pass("softmax", region)


def test_probes_are_64_byte_aligned_and_alternate_probes_are_not():
    region = Matmul(_f32(256, 128), _f32(128, 96))
    rng = np.random.default_rng(0)
    seen = set()
    for i, probe in enumerate(probe_plan(region)[:4]):
        fresh = _draw(region, probe, rng, shift=i % 2 == 1)
        seen.add(tuple(aligned.is_aligned(a) for a in (fresh.a, fresh.b)))
    assert (True, True) in seen and (False, False) in seen, seen
    assert aligned.is_aligned(aligned.empty((3, 5), np.float16, order="F"))
    assert aligned.empty((3, 5), np.float32, skew=1).ctypes.data % 64 == 4


def test_a_path_taken_only_on_64_byte_aligned_operands_is_probed():
    region = Matmul(_f32(256, 128), _f32(128, 96))
    verdict = verify(WrongWhen64Aligned(), {}, region)
    assert not verdict.passed and ("element" in verdict.reason or "relative" in verdict.reason), verdict.reason


def test_a_view_of_another_operand_is_keyed_and_probed_as_one():
    a = _f32(40, 40)
    region = Matmul(a, a.T)
    assert "shares=b~a" in region.key.id
    rng = np.random.default_rng(0)
    views = 0
    for probe in probe_plan(region):
        fresh = _draw(region, probe, rng)
        if fresh.b.shape == fresh.a.shape[::-1]:
            assert fresh.b.base is not None and np.shares_memory(fresh.a, fresh.b)
            views += 1
    assert views >= 2
    verdict = verify(TransposedViewShortcut(), {}, region)
    assert not verdict.passed, verdict
    assert verify(TransposedViewShortcut(), {}, Matmul(a, a.T.copy())).passed  # without the view: never taken
    assert_builtins_pass("matmul", region)


def test_views_over_one_memory_are_probed_so_and_views_apart_are_not_keyed():
    from arbiter.regions import Attention

    q = _f32(1, 3, 16, 8)
    region = Attention(q, q[:], q * 1)
    assert "shares=k~q" in region.key.id
    fresh = _draw(region, probe_plan(region)[0], np.random.default_rng(0))
    assert fresh.k is not fresh.q and np.shares_memory(fresh.q, fresh.k)
    packed = _f32(3, 1, 3, 16, 8)  # q, k, v cut apart from one projection: no memory in common
    assert "shares" not in Attention(packed[0], packed[1], packed[2]).key.id


def test_the_memo_keeps_views_apart_from_copies():
    a = _f32(24, 24)
    first = Matmul(a, a.T).key.id
    assert Matmul(a, a.T.copy()).key.id != first and Matmul(a, a.T).key.id == first
    assert layouts.shares(Matmul(a, a.T).attrs) == [("b", "a", "~")]


class WrongAtOddMultiplesOf128(Candidate):
    """A GEMM with a path for column counts that are odd multiples of 128 (640, 896) that drops the last column."""

    name, target, op, tier, priority = "wrong_at_odd_multiples_of_128", "cpu", "matmul", Tier.HAND_TUNED, 100

    def run(self, region, params):
        out = region.alloc_out()
        np.matmul(region.a, region.b, out=out)
        n = out.shape[1]
        if n % 128 == 0 and (n // 128) % 2 == 1:
            out[:, -1] = 0.0
        return out


def test_a_path_for_odd_multiples_of_128_inside_the_bucket_is_probed():
    region = Matmul(_f32(16, 16), _f32(16, 1000) / 4)  # n in (512, 1024]: the gate probes 640 there
    verdict = verify(WrongAtOddMultiplesOf128(), {}, region)
    assert not verdict.passed and "640" in verdict.reason.split(":")[0], verdict.reason  # at 16x640x16: ...
