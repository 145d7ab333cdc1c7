"""Values real models produce (issue 38 item 5): finfo.min additive masks and fully padded rows (``masked_fill(mask,
finfo.min)``, Hugging Face's extended attention masks). Each wrong candidate below passes every family the gate had
before and is refused by ``finfo_min_mask``; the built-ins pass it (docs/budgets.md states the semantics: a fully
padded finfo.min row is uniform, 1/cols, where a fully -inf row is NaN)."""
from __future__ import annotations

import numpy as np
import pytest

from arbiter import probes
from arbiter.candidates import Candidate, Tier
from arbiter.ops.kind import op_kind
from arbiter.regions import Softmax
from arbiter.verify import verify
from builtin_support import assert_builtins_pass


class _Wrong(Candidate):
    target, tier, priority = "cpu", Tier.HAND_TUNED, 100


class SoftmaxFiniteMinusInfinity(_Wrong):
    """An online softmax whose running max starts at -1e30, a finite stand-in for -inf (common in hand-written CUDA
    and Triton code): a -inf row still gives 0/0 = NaN as the oracle does, but a row padded with finfo.min
    (-3.4e38, below -1e30) keeps max = -1e30, every exp underflows to 0 and the row comes back NaN, not 1/cols."""

    name, op = "softmax_finite_minus_infinity", "softmax"

    def run(self, region, params):
        x = region.x.astype(np.float32) if region.axis_last else region.x.T.astype(np.float32)
        m = np.maximum(x.max(axis=-1, keepdims=True), np.float32(-1e30))
        with np.errstate(invalid="ignore", over="ignore"):
            e = np.exp(x - m)
            y = e / e.sum(axis=-1, keepdims=True)
        out = region.alloc_out()
        out[...] = (y if region.axis_last else y.T).astype(out.dtype)
        return out


class SoftmaxMaskByValue(_Wrong):
    """Treats logits below half the dtype's lowest value as masked (-inf): the padding test of a fused mask kernel.
    Right for -inf masks; a fully padded finfo.min row becomes NaN where the answer is 1/cols."""

    name, op = "softmax_mask_by_value", "softmax"

    def run(self, region, params):
        x = np.array(region.x if region.axis_last else region.x.T, dtype=np.float64)
        x[x < np.finfo(region.x.dtype).min / 2] = -np.inf
        with np.errstate(invalid="ignore"):
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            y = e / e.sum(axis=-1, keepdims=True)
        out = region.alloc_out()
        out[...] = (y if region.axis_last else y.T).astype(out.dtype)
        return out


def _region(op, dtype, dims, rng):
    return op_kind(op).region_type.random("cpu", dtype, dims, {}, rng=rng)


CASES = [
    (SoftmaxFiniteMinusInfinity, "softmax", "float32", {"rows": 33, "cols": 257}),
    (SoftmaxMaskByValue, "softmax", "float32", {"rows": 33, "cols": 257}),
    (SoftmaxMaskByValue, "softmax", "float16", {"rows": 16, "cols": 1024}),
]


@pytest.mark.parametrize("cls, op, dtype, dims", CASES, ids=[c[0].name + "-" + c[2] for c in CASES])
def test_finfo_min_masks_refuse_what_every_earlier_family_served(cls, op, dtype, dims, rng, monkeypatch):
    region = _region(op, dtype, dims, rng)
    verdict = verify(cls(), {}, region)
    assert not verdict.passed and "finfo_min_mask" in verdict.reason, verdict.reason
    # without the family the same candidate is served: the family is what catches it
    every = probes.families

    def without(*args, **kwargs):
        return [f for f in every(*args, **kwargs) if f.name != "finfo_min_mask"]

    monkeypatch.setattr(probes, "families", without)
    assert verify(cls(), {}, _region(op, dtype, dims, np.random.default_rng(1))).passed


@pytest.mark.parametrize("op, dtype, dims", [(c[1], c[2], c[3]) for c in CASES]
)
def test_the_built_ins_pass_them(op, dtype, dims, rng):
    region = _region(op, dtype, dims, rng)
    assert_builtins_pass(op, region)


def test_a_fully_padded_row_is_uniform():
    x = np.full((2, 8), np.finfo(np.float32).min, np.float32)
    x[1, :3] = 0.5
    ref = op_kind("softmax").oracle(Softmax(x))
    np.testing.assert_array_equal(ref[0], np.full(8, 1 / 8))
    assert ref[1, 3:].max() == 0.0 and abs(ref[1, :3].sum() - 1) < 1e-12
