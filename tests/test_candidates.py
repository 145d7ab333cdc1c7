"""The candidate registry: tiers, decorator, replacement, plug-in entry points, code identity."""
import inspect
import sys
import textwrap

import numpy as np
import pytest

import arbiter
from arbiter import Tier
from arbiter.candidates import ENTRY_POINT_GROUP, REGISTRY, CandidateRegistry, Contract


def test_tier_order():
    assert Tier.COMPOSED < Tier.SYNTHESIZED < Tier.EMITTED < Tier.HAND_TUNED


def test_builtin_cpu_vendor_candidates_are_registered():
    names = {c.name for c in REGISTRY.candidates("cpu", "matmul")}
    assert "numpy_matmul" in names
    vendor = REGISTRY.get("numpy_matmul", "cpu", "matmul")
    assert vendor.tier is Tier.HAND_TUNED
    # The BLAS library and version are part of its code identity, beyond the class's own source.
    from arbiter.candidates.cpu._common import blas_identity

    assert vendor.source().endswith(blas_identity()) and blas_identity().split()[0] != "none"
    assert vendor.source() != inspect.getsource(type(vendor))


def test_identity_changes_with_the_code():
    class A(arbiter.Candidate):
        name, target, op = "same_name", "cpu", "matmul"

        def run(self, region, params):
            return 1

    class B(arbiter.Candidate):
        name, target, op = "same_name", "cpu", "matmul"

        def run(self, region, params):
            return 2

    assert A().identity() != B().identity()
    assert A().identity() == A().identity()


def test_registration_errors_name_the_field():
    class Nameless(arbiter.Candidate):
        target, op = "cpu", "matmul"

    with pytest.raises(ValueError, match="name"):
        arbiter.register(Nameless())
    with pytest.raises(KeyError, match="name: no candidate"):
        arbiter.unregister("ghost", "cpu", "matmul")
    with pytest.raises(ValueError, match="coverage"):
        Contract(coverage="partial")
    with pytest.raises(ValueError, match="bounded"):
        Contract(accuracy="bounded")


def test_plugin_entry_point_contributes_a_candidate(tmp_path, monkeypatch):
    (tmp_path / "arbiter_demo_plugin.py").write_text(textwrap.dedent('''
        import numpy as np
        import arbiter

        @arbiter.candidate(op="softmax", tier=arbiter.Tier.EMITTED, name="plugin_softmax")
        def plugin_softmax(region):
            out = region.alloc_out()
            e = np.exp(region.x - region.x.max(axis=region.axis, keepdims=True))
            np.divide(e, e.sum(axis=region.axis, keepdims=True), out=out)
            return out
    '''))
    dist = tmp_path / "arbiter_demo_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: arbiter-demo-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\ndemo = arbiter_demo_plugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    fresh = CandidateRegistry()
    monkeypatch.setattr("arbiter.candidates.REGISTRY", fresh)
    fresh.load_builtin("cpu")
    try:
        assert "plugin_softmax" in {c.name for c in fresh.candidates("cpu", "softmax")}
    finally:
        sys.modules.pop("arbiter_demo_plugin", None)


def test_function_candidate_gets_gated_like_any_other():
    @arbiter.candidate(op="rmsnorm", tier=Tier.SYNTHESIZED, name="forgets_weight")
    def forgets_weight(region):
        out = region.alloc_out()
        x = region.x
        np.divide(x, np.sqrt((x * x).mean(-1, keepdims=True) + region.eps), out=out)
        return out

    try:
        region = arbiter.regions.RMSNorm.random("cpu", "float32", {"rows": 9, "cols": 40})
        decision = arbiter.arbitrate("rmsnorm", region, force="numpy_rmsnorm")
        assert decision.winner.candidate.name == "numpy_rmsnorm"
        with pytest.raises(arbiter.NoCandidateError):
            arbiter.arbitrate("rmsnorm", region, force="forgets_weight")
    finally:
        arbiter.unregister("forgets_weight", "cpu", "rmsnorm")
