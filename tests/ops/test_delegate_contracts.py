"""Delegate contracts: provenance, exact vs bounded accuracy, determinism, root_only vs whole_region."""
import dataclasses

import numpy as np
import pytest

import arbiter
from arbiter import Candidate, Contract, Tier
from arbiter.oracles.budgets import budget_for
from arbiter.regions import Attention, Gated, LayerNorm, Matmul
from arbiter.tune import explain_rows
from arbiter.verify import verify


def _layernorm(region):
    out = region.alloc_out()
    x = region.x
    c = x - x[..., :1]  # shifted by the row's first element: exact on the gate's constant rows (issue 38)
    c -= c.mean(-1, keepdims=True)
    np.multiply(c / np.sqrt((c * c).mean(-1, keepdims=True) + region.eps), region.weight, out=out)
    out += region.bias
    return out


class VendorLN(Candidate):
    name, target, op, tier, priority = "vendor_ln", "cpu", "layernorm", Tier.HAND_TUNED, 5
    contract = Contract(provenance="vendor_library")

    def run(self, region, params):
        return _layernorm(region)


class HandLN(VendorLN):
    name, priority = "hand_ln", 4
    contract = Contract(provenance="handwritten_kernel", deterministic=False)


@pytest.fixture
def delegates():
    registered = []

    def add(*cands):
        for c in cands:
            registered.append(arbiter.register(c))

    yield add
    for c in registered:
        arbiter.unregister(c.name, c.target, c.op)


def test_contract_round_trips_as_plain_data():
    c = Contract(provenance="vendor_library", accuracy="bounded", rel_fro=1e-3, atol=1e-2, rtol=1e-2,
                 deterministic=False, coverage="root_only")
    assert Contract(**dataclasses.asdict(c)) == c
    assert c.summary() == ("vendor_library, bounded(rel_fro 1e-03, atol 1e-02, rtol 1e-02), root_only, "
                           "nondeterministic")


def test_vendor_and_handwritten_delegates_compete_and_show_their_provenance(delegates):
    delegates(VendorLN(), HandLN())
    region = LayerNorm.random("cpu", "float32", {"rows": 17, "cols": 70})
    decision = arbiter.arbitrate("layernorm", region)
    assert decision.winner.candidate.name == "vendor_ln"  # tier, then priority
    shown = {r["solution"]: r["contract"] for r in explain_rows(decision, arbiter.dispatch.store())}
    assert shown["vendor_ln"] == "vendor_library, exact, whole_region"
    assert shown["hand_ln"] == "handwritten_kernel, exact, whole_region, nondeterministic"
    assert shown["numpy_layernorm"] is None  # a built-in candidate declares no contract
    assert arbiter.arbitrate("layernorm", region, force="hand_ln").winner.verdict.passed


class ApproxAttention(Candidate):
    """Attention with a 5e-4 relative error: over the float32 budget, inside a declared bounded one."""

    name, target, op, tier = "approx_attention", "cpu", "attention", Tier.HAND_TUNED
    contract = Contract(accuracy="bounded", rel_fro=1e-3, atol=1e-2, rtol=1e-2)

    def run(self, region, params):
        out = region.alloc_out()
        s = region.scale * region.q @ np.swapaxes(region.k, -1, -2)
        p = np.exp(s - s.max(-1, keepdims=True))
        np.matmul(p / p.sum(-1, keepdims=True), region.v, out=out)
        out *= 1.0005
        return out


def test_bounded_budget_is_used_and_recorded_as_looser(delegates):
    region = Attention.random("cpu", "float32", {"batch": 1, "heads": 2, "q": 9, "k": 20, "d": 8})
    refused = verify(ApproxAttention(), {}, region)  # looser than the budget: not without the caller's consent
    assert not refused.passed and "has not opted in" in refused.reason
    region = region.allow_looser()
    verdict = verify(ApproxAttention(), {}, region)
    assert verdict.passed and verdict.looser_budget
    assert (verdict.budget.rel_fro, verdict.budget.atol) == (1e-3, 1e-2)
    exact = type("ExactApprox", (ApproxAttention,), {"contract": Contract(accuracy="exact")})()
    failed = verify(exact, {}, region)
    assert not failed.passed and failed.budget == budget_for("attention", "float32")
    delegates(ApproxAttention())
    decision = arbiter.arbitrate("attention", region, force="approx_attention")
    [row] = [r for r in explain_rows(decision, arbiter.dispatch.store()) if r["solution"] == "approx_attention"]
    assert row["looser_budget"] and row["status"] == "passed"


def test_a_tighter_bounded_budget_is_not_looser():
    tight = type("Tight", (ApproxAttention,), {
        "contract": Contract(accuracy="bounded", rel_fro=1e-6, atol=1e-5, rtol=1e-5),
        "run": lambda self, region, params: arbiter.candidates.REGISTRY.get(
            "numpy_attention", "cpu", "attention").run(region, params)})()
    verdict = verify(tight, {}, Attention.random("cpu", "float32", {"batch": 1, "heads": 1, "q": 5, "k": 7, "d": 4}))
    assert verdict.passed and not verdict.looser_budget


class GemmOnly(Candidate):
    """A root-only GEMM delegate: x @ w_gate for gated (it would foreclose the fused gate)."""

    name, target, op, tier, priority = "root_gemm", "cpu", "gated", Tier.HAND_TUNED, 10
    contract = Contract(provenance="vendor_library", coverage="root_only")

    def run(self, region, params):
        out = region.alloc_out()
        np.matmul(region.x, region.w_gate, out=out)
        return out


class WholeGated(Candidate):
    name, target, op, tier, priority = "whole_gated", "cpu", "gated", Tier.HAND_TUNED, 10
    contract = Contract(provenance="handwritten_kernel", coverage="whole_region")

    def run(self, region, params):
        out = region.alloc_out()
        g = region.x @ region.w_gate
        np.multiply(g / (1 + np.exp(-g)), region.x @ region.w_up, out=out)
        return out


def test_root_only_is_excluded_from_a_fused_region_and_whole_region_competes(delegates):
    delegates(GemmOnly(), WholeGated())
    decision = arbiter.arbitrate("gated", Gated.random("cpu", "float32", {"m": 13, "n": 11, "k": 9}))
    rows = {r.candidate.name: r for r in decision.rows}
    assert rows["root_gemm"].status == "excluded" and "root_only" in rows["root_gemm"].reason
    assert rows["root_gemm"].verdict is None  # never run, never gated
    assert decision.winner.candidate.name == "whole_gated"


def test_root_only_serves_a_matmul_without_epilogue_only(delegates):
    class RootMatmul(Candidate):
        name, target, op, tier, priority = "root_matmul", "cpu", "matmul", Tier.HAND_TUNED, 10
        contract = Contract(provenance="vendor_library", coverage="root_only")

        def run(self, region, params):
            out = region.alloc_out()
            np.matmul(region.a, region.b, out=out)
            return out

    delegates(RootMatmul())
    dims = {"m": 12, "n": 10, "k": 9}
    assert arbiter.arbitrate("matmul", Matmul.random("cpu", "float32", dims)).winner.candidate.name == "root_matmul"
    fused = arbiter.arbitrate("matmul", Matmul.random("cpu", "float32", dims, {"activation": "silu", "bias": "1"}))
    assert fused.winner.candidate.name != "root_matmul"
    assert next(r for r in fused.rows if r.candidate.name == "root_matmul").status == "excluded"


@pytest.mark.parametrize("tier", [Tier.EMITTED, Tier.SYNTHESIZED, Tier.COMPOSED])
def test_a_vendor_library_delegate_below_hand_tuned_is_refused_naming_the_tier(tier):
    # A vendor library is HAND_TUNED: registered lower, it would lose on tier to every kernel above it.
    from arbiter.candidates import REGISTRY

    low = type("LowVendor", (VendorLN,), {"name": "low_vendor", "tier": tier})()
    with pytest.raises(ValueError, match=rf"^tier: 'low_vendor' declares .*vendor_library.* not {tier.name}"):
        arbiter.register(low)
    with pytest.raises(ValueError, match=r"^tier: 'low_vendor_fn'"):
        arbiter.candidate(op="layernorm", tier=tier, name="low_vendor_fn",
                          contract=Contract(provenance="vendor_library"))(_layernorm)
    assert {"low_vendor", "low_vendor_fn"}.isdisjoint(c.name for c in REGISTRY.candidates("cpu", "layernorm"))


def test_a_hand_tuned_vendor_delegate_and_an_emitted_kernel_declaring_its_accuracy_register(delegates):
    emitted = type("BoundedEmitted", (HandLN,), {"name": "bounded_emitted", "tier": Tier.EMITTED,
                                                 "contract": Contract(accuracy="bounded", rel_fro=1e-3, atol=1e-2,
                                                                      rtol=1e-2)})()
    delegates(VendorLN(), emitted)
    from arbiter.candidates import REGISTRY

    tiers = {c.name: c.tier for c in REGISTRY.candidates("cpu", "layernorm")}
    assert tiers["vendor_ln"] == Tier.HAND_TUNED and tiers["bounded_emitted"] == Tier.EMITTED
