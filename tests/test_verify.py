"""The F4 gate rejects every way of being wrong, and a wrong candidate is never selected."""
import numpy as np
import pytest

import arbiter
from arbiter import Candidate, Fallback, Tier
from arbiter.oracles.matmul import oracle as matmul_oracle
from arbiter.regions import Matmul
from arbiter.verify import probe_shapes, verify


def _mm(region):
    out = region.alloc_out()
    np.matmul(region.a, region.b, out=out)
    return out


class Bad(Candidate):
    target, op, tier, priority = "cpu", "matmul", Tier.HAND_TUNED, 100


class OffByOne(Bad):
    name = "off_by_one"

    def run(self, region, params):
        out = _mm(region)
        out[out.shape[0] // 2, out.shape[1] // 2] += 1.0
        return out


class NaNOutput(Bad):
    name = "nan_output"

    def run(self, region, params):
        out = _mm(region)
        out[-1, -1] = np.nan
        return out


class NeverWrites(Bad):
    name = "never_writes_last_row"

    def run(self, region, params):
        out = region.alloc_out()
        np.matmul(region.a[:-1], region.b, out=out[:-1])
        return out


class TaggedFallback(Bad):
    name = "tagged_fallback"

    def run(self, region, params):
        out = region.alloc_out()
        out[...] = matmul_oracle(region)
        return Fallback(out, "shape not supported, used the reference")


class WrongOffTile(Bad):
    name = "wrong_off_tile"

    def run(self, region, params):
        out = _mm(region)
        m, n = out.shape
        if m % 32 or n % 32:  # a tail bug: the last partial tile is dropped
            out[m - m % 32:, :] = 0.0
        return out


class Raises(Bad):
    name = "raises"

    def run(self, region, params):
        raise RuntimeError("kernel launch failed")


class NewArray(Bad):
    name = "new_array"

    def run(self, region, params):
        return region.a @ region.b


class GoodEmitted(Candidate):
    name, target, op, tier = "good_emitted", "cpu", "matmul", Tier.EMITTED

    def run(self, region, params):
        return _mm(region)


BAD = [OffByOne, NaNOutput, NeverWrites, TaggedFallback, WrongOffTile, Raises, NewArray]


@pytest.fixture
def zoo(only_candidates):
    only_candidates("cpu", "matmul", *(cls() for cls in BAD + [GoodEmitted]))


@pytest.mark.parametrize("cls, expected", [
    (OffByOne, "elementwise budget"),
    (NaNOutput, "NaN"),
    (NeverWrites, "NaN"),
    (TaggedFallback, "declined"),
    (WrongOffTile, "at 33x35x37"),
    (Raises, "raised RuntimeError: kernel launch failed"),
    (NewArray, "returned a new array"),
])
def test_each_wrong_candidate_fails_with_its_reason(cls, expected):
    region = Matmul.random("cpu", "float32", {"m": 64, "n": 64, "k": 64})
    verdict = verify(cls(), {}, region)
    assert not verdict.passed
    assert expected in verdict.reason


def test_tile_bug_passes_real_shape_but_edge_probe_catches_it():
    region = Matmul.random("cpu", "float32", {"m": 64, "n": 64, "k": 64})
    assert [d["m"] for d in probe_shapes(region)][:2] == [64, 33]
    verdict = verify(WrongOffTile(), {}, region)
    # the real shape passed twice (benign, then an adversarial family); the odd-tail shape of the bucket did not
    assert verdict.probes[:2] == ("64x64x64", "64x64x64 mixed_rows")
    assert verdict.probes[2].startswith("33x35x37") and len(verdict.probes) == 3


def test_wrong_candidates_are_never_selected(zoo):
    region = Matmul.random("cpu", "float32", {"m": 64, "n": 64, "k": 64})
    decision = arbiter.arbitrate("matmul", region)
    assert decision.winner.candidate.name == "good_emitted"
    status = {r.candidate.name: r.status for r in decision.rows}
    assert all(status[c.name] == "failed" for c in BAD)
    out = arbiter.run_arbitrated("matmul", region)
    np.testing.assert_allclose(out, region.a @ region.b, rtol=1e-5)


def test_forcing_a_wrong_candidate_still_runs_the_gate(zoo):
    region = Matmul.random("cpu", "float32", {"m": 40, "n": 40, "k": 40})
    with pytest.raises(arbiter.NoCandidateError) as err:
        arbiter.arbitrate("matmul", region, force="off_by_one")
    assert "off_by_one" in str(err.value) and "failed" in str(err.value)
    assert arbiter.arbitrate("matmul", region, force="good_emitted").chosen_by == "forced"


def test_correct_candidates_pass_every_dtype_with_epilogues():
    for dtype in ("float16", "float32", "float64"):
        for act in ("none", "relu", "gelu", "gelu_tanh", "silu"):
            region = Matmul.random("cpu", dtype, {"m": 37, "n": 29, "k": 70},
                                   {"activation": act, "bias": "1", "residual": "1"})
            decision = arbiter.arbitrate("matmul", region)
            assert decision.winner.verdict.passed, (dtype, act, decision)


def test_declared_looser_budget_is_used_and_recorded():
    class Sloppy(GoodEmitted):
        name = "sloppy"
        contract = arbiter.Contract(accuracy="bounded", rel_fro=1e-2, atol=1e-1, rtol=1e-1)

        def run(self, region, params):
            out = _mm(region)
            out *= 1.001  # 1e-3 relative: over the float32 budget, inside its declared one
            return out

    region = Matmul.random("cpu", "float32", {"m": 16, "n": 16, "k": 16})
    refused = verify(Sloppy(), {}, region)  # looser than the budget: only with the caller's consent
    assert not refused.passed and "has not opted in" in refused.reason and refused.looser_budget
    region = region.allow_looser()
    verdict = verify(Sloppy(), {}, region)
    assert verdict.passed and verdict.looser_budget
    assert not verify(type("Strict", (Sloppy,), {"contract": None})(), {}, region).passed


def test_verdicts_are_cached_per_identity_and_key():
    from arbiter import dispatch

    region = Matmul.random("cpu", "float32", {"m": 20, "n": 20, "k": 20})
    arbiter.arbitrate("matmul", region)
    first = dispatch.verified_count()
    arbiter.arbitrate("matmul", Matmul.random("cpu", "float32", {"m": 19, "n": 30, "k": 17}))
    assert dispatch.verified_count() == first  # same bucket, same identity: no new verification
