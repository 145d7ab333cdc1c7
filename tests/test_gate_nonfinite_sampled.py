"""The nonfinite family at keys large enough for the sampled check (found on the H200: every matmul solution with a
residual failed the gate at 4096^3 in half precision, the right ones included).

Above ``CHEAP_CHECK_WORK`` a linear product (a residual, no activation) is checked by Freivalds' random sums over
every row. The nonfinite family puts NaN and Inf into the residual (and the bias), and ``Inf - Inf`` in those sums
made every row with such an element "hold NaN where the oracle is finite". Those columns now leave the sums and
are compared exactly, in full: the right kernel passes, a NaN-dropping one still fails. The threshold is lowered
here so that a small key takes the large-key path (the same code the H200 ran at 4096^3).
"""
import numpy as np
import pytest

import arbiter.verify as gate
from arbiter.candidates import REGISTRY, Candidate, Tier
from arbiter.regions import Matmul


@pytest.fixture
def sampled(monkeypatch):
    monkeypatch.setattr(gate, "CHEAP_CHECK_WORK", 1 << 18)  # 64^3 and up take the sampled check


class ResidualNanToZero(Candidate):
    """``a @ b + residual`` with the residual's NaN and Inf read as 0: a "safe" load that drops them."""

    name, target, op, tier = "residual_nan_to_zero", "cpu", "matmul", Tier.EMITTED

    def run(self, region, params):
        out = region.alloc_out()
        z = region.a.astype(np.float64) @ region.b.astype(np.float64)
        if region.bias is not None:
            z += np.nan_to_num(region.bias.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)
        if region.residual is not None:
            z += np.nan_to_num(region.residual.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)
        out[...] = z
        return out


@pytest.mark.parametrize("attrs", [{"residual": "1"}, {"bias": "1"}, {"bias": "1", "residual": "1"}],
                         ids=["residual", "bias", "bias+residual"])
def test_the_right_kernel_passes_the_nonfinite_family_on_the_sampled_check(sampled, attrs):
    region = Matmul.random("cpu", "float32", {"m": 300, "n": 300, "k": 300}, attrs)
    assert any(p.family.name == "nonfinite" for p in gate.probe_plan(region))
    verdict = gate.verify(REGISTRY.get("numpy_matmul", "cpu", "matmul"), {}, region)
    assert verdict.passed, verdict.reason


@pytest.mark.parametrize("attrs", [{"residual": "1"}, {"bias": "1"}], ids=["residual", "bias"])
def test_a_nan_dropping_kernel_still_fails_it(sampled, attrs):
    region = Matmul.random("cpu", "float32", {"m": 300, "n": 300, "k": 300}, attrs)
    verdict = gate.verify(ResidualNanToZero(), {}, region)
    assert not verdict.passed and "nonfinite" in verdict.reason, verdict.reason


class WrongBesideTheNan(Candidate):
    """Right everywhere, NaN and Inf included, but wrong by 1.0 in the column of the residual's first non-finite
    element, two rows away from it: an error hidden in exactly the columns that leave Freivalds' sums."""

    name, target, op, tier = "wrong_beside_the_nan", "cpu", "matmul", Tier.EMITTED

    def run(self, region, params):
        out = region.alloc_out()
        z = region.a.astype(np.float64) @ region.b.astype(np.float64)
        if region.residual is not None:
            z += region.residual.astype(np.float64)
            bad = np.argwhere(~np.isfinite(region.residual))
            if len(bad):
                i, j = bad[0]
                z[(i + 2) % z.shape[0], j] += 1.0
        out[...] = z
        return out


def test_an_error_in_a_column_taken_out_of_the_sums_is_still_caught(sampled):
    region = Matmul.random("cpu", "float32", {"m": 300, "n": 300, "k": 300}, {"residual": "1"})
    verdict = gate.verify(WrongBesideTheNan(), {}, region)
    assert not verdict.passed and "nonfinite" in verdict.reason, verdict.reason
