"""Negative strides as the caller has them (issue 38 item 2, in part): ``x[:, ::-1]`` keys as ``N2n1`` and every probe
is a reversed view of dense data, so a kernel that reads a reversed operand in memory order (its |stride| from the
data pointer, or the base buffer as if it were not reversed) is refused; before, such keys were ``S2`` and probed
with positive strides (``x[:, ::2]``), so the branch never ran."""
import numpy as np
import pytest

from arbiter import layouts
from arbiter.candidates import Candidate, Tier
from arbiter.regions import Matmul, Softmax
from arbiter.verify import probe_plan, verify
from builtin_support import assert_builtins_pass


class ReversedReadInMemoryOrder(Candidate):
    """A softmax that, for a reversed row, computes on the row as it lies in memory and writes that order back."""

    name, target, op, tier, priority = "reversed_read_in_memory_order", "cpu", "softmax", Tier.HAND_TUNED, 100

    def run(self, region, params):
        x = region.x
        if x.ndim == 2 and x.strides[1] < 0:
            x = x[:, ::-1]  # memory order: the bug, never undone
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        out = region.alloc_out()
        out[...] = e / e.sum(axis=-1, keepdims=True)
        return out


class MatmulReversedB(Candidate):
    """A GEMM that takes a reversed b's columns in memory order (a kernel reading |stride| from the pointer)."""

    name, target, op, tier, priority = "matmul_reversed_b", "cpu", "matmul", Tier.HAND_TUNED, 100

    def run(self, region, params):
        b = region.b[:, ::-1] if region.b.strides[1] < 0 else region.b
        out = region.alloc_out()
        np.matmul(region.a, b, out=out)
        return out


def _x(rows=20, cols=100):
    return np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)


def test_the_key_names_the_reversed_axes_and_every_probe_reproduces_them():
    region = Softmax(_x()[:, ::-1])
    assert "x-N2n1" in region.key.id
    assert layouts.token(_x()[::-1]) == "N2n0" and layouts.token(_x()[::-1, ::-1]) == "N2n01"
    assert layouts.token(_x()[:, ::2]) == "S2"  # positive gaps keep their class
    for probe in probe_plan(region)[:3]:
        assert probe.dims


@pytest.mark.parametrize("cls, make", [
    (ReversedReadInMemoryOrder, lambda: Softmax(_x()[:, ::-1])),
    (MatmulReversedB, lambda: Matmul(_x(40, 36), (_x(36, 24) / 6)[:, ::-1])),
])
def test_a_kernel_reading_a_reversed_operand_in_memory_order_is_refused(cls, make):
    verdict = verify(cls(), {}, make())
    assert not verdict.passed, verdict
    assert "element" in verdict.reason or "relative" in verdict.reason, verdict.reason


@pytest.mark.parametrize("op, make", [
    ("softmax", lambda: Softmax(_x()[:, ::-1])),
    ("matmul", lambda: Matmul(_x(40, 36), (_x(36, 24) / 6)[:, ::-1])),
])
def test_the_builtins_serve_reversed_operands(op, make):
    region = make()
    assert_builtins_pass(op, region)
