"""run_arbitrated: policies, counters, errors, fallbacks."""
import numpy as np
import pytest

import arbiter
from arbiter import Candidate, Fallback, Tier
from arbiter.regions import Matmul, RMSNorm, Softmax


def region(m=20, n=20, k=20, **attrs):
    return Matmul.random("cpu", "float32", {"m": m, "n": n, "k": k}, attrs)


def test_op_must_match_the_region():
    with pytest.raises(arbiter.RegionError) as err:
        arbiter.run_arbitrated("softmax", region())
    assert err.value.argument == "op"


def test_results_match_the_oracle_for_each_builtin_op():
    r = region(activation="silu", bias="1", residual="1")
    z = r.a @ r.b + r.bias
    np.testing.assert_allclose(arbiter.run_arbitrated("matmul", r), z / (1 + np.exp(-z)) + r.residual, rtol=1e-4)
    x = np.random.default_rng(0).standard_normal((7, 33))
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(arbiter.run_arbitrated("softmax", Softmax(x)), e / e.sum(-1, keepdims=True))
    w = np.random.default_rng(1).standard_normal(33)
    np.testing.assert_allclose(arbiter.run_arbitrated("rmsnorm", RMSNorm(x, w, eps=1e-5)),
                               x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * w)


def test_counters_count_one_miss_then_hits():
    r = region()
    for _ in range(5):
        arbiter.run_arbitrated("matmul", r)
    [row] = arbiter.stats()
    assert (row["hits"], row["misses"], row["fallbacks"]) == (4, 1, 0)
    assert row["solution"] == "numpy_matmul" and row["policy"] == "tier" and row["key"] == r.key.id


def test_strict_raises_on_an_unseen_key_then_serves_a_decided_one(monkeypatch):
    r = region()
    with pytest.raises(arbiter.StrictMissError) as err:
        arbiter.run_arbitrated("matmul", r, policy="strict")
    assert "arbiter tune" in str(err.value)
    monkeypatch.setenv("ARBITER_POLICY", "strict")
    with pytest.raises(arbiter.StrictMissError):
        arbiter.run_arbitrated("matmul", r)
    arbiter.arbitrate("matmul", r)
    arbiter.run_arbitrated("matmul", r)  # decided: strict serves it


def test_unknown_policy_is_rejected_by_name(monkeypatch):
    with pytest.raises(ValueError, match="policy"):
        arbiter.run_arbitrated("matmul", region(), policy="fastest")
    monkeypatch.setenv("ARBITER_POLICY", "nope")
    with pytest.raises(ValueError, match="ARBITER_POLICY"):
        arbiter.run_arbitrated("matmul", region())


def test_no_candidate_error_lists_every_candidate_and_why(only_candidates):
    class Unavailable(Candidate):
        name, target, op = "needs_gpu_lib", "cpu", "rmsnorm"

        def available(self):
            return "libfoo.so not found"

    class TooSmall(Candidate):
        name, target, op = "wide_rows_only", "cpu", "rmsnorm"

        def applies_to(self, region):
            return "needs cols >= 1024"

    only_candidates("cpu", "rmsnorm", Unavailable(), TooSmall())
    with pytest.raises(arbiter.NoCandidateError) as err:
        arbiter.run_arbitrated("rmsnorm", RMSNorm(np.ones((4, 8)), np.ones(8)))
    text = str(err.value)
    assert "needs_gpu_lib" in text and "libfoo.so not found" in text
    assert "wide_rows_only" in text and "needs cols >= 1024" in text


def test_registering_replaces_by_name_and_redecides():
    calls = []

    @arbiter.candidate(op="softmax", tier=Tier.HAND_TUNED, name="numpy_softmax", priority=0)
    def replacement(region):
        calls.append(1)
        out = region.alloc_out()
        e = np.exp(region.x - region.x.max(axis=-1, keepdims=True))
        np.divide(e, e.sum(axis=-1, keepdims=True), out=out)
        return out

    try:
        arbiter.run_arbitrated("softmax", Softmax(np.ones((3, 5), np.float32)))
        assert calls  # the replacement, not the built-in, served it
    finally:
        arbiter.unregister("numpy_softmax", "cpu", "softmax")
        from arbiter.candidates.cpu.numpy_softmax import NumpySoftmax

        arbiter.register(NumpySoftmax())


def test_a_winner_that_declines_an_instance_is_counted_as_fallback():
    class Picky(Candidate):
        name, target, op, tier, priority = "picky", "cpu", "matmul", Tier.HAND_TUNED, 10

        def run(self, region, params):
            out = region.alloc_out()
            np.matmul(region.a, region.b, out=out)
            if region.dims["m"] == 19:  # not a probed shape: the gate cannot see it
                return Fallback(out, "m=19 unsupported")
            return out

    arbiter.register(Picky())
    try:
        arbiter.run_arbitrated("matmul", region(m=20))
        out = arbiter.run_arbitrated("matmul", r := region(m=19))
        np.testing.assert_allclose(out, r.a @ r.b, rtol=1e-5)
        [row] = arbiter.stats()
        assert row["solution"] == "picky" and row["fallbacks"] == 1 and row["hits"] == 1
    finally:
        arbiter.unregister("picky", "cpu", "matmul")


def test_root_only_delegate_does_not_apply_to_a_fused_epilogue():
    class RootOnly(Candidate):
        name, target, op, tier, priority = "root_gemm", "cpu", "matmul", Tier.HAND_TUNED, 10
        contract = arbiter.Contract(provenance="vendor_library", coverage="root_only")

        def run(self, region, params):
            out = region.alloc_out()
            np.matmul(region.a, region.b, out=out)
            return out

    arbiter.register(RootOnly())
    try:
        plain = arbiter.arbitrate("matmul", region())
        assert plain.winner.candidate.name == "root_gemm"
        fused = arbiter.arbitrate("matmul", region(activation="relu"))
        assert fused.winner.candidate.name == "numpy_matmul"
        row = next(r for r in fused.rows if r.candidate.name == "root_gemm")
        assert row.status == "excluded" and "root_only" in row.reason
    finally:
        arbiter.unregister("root_gemm", "cpu", "matmul")


def test_force_names_an_unknown_candidate():
    with pytest.raises(ValueError, match="force: no candidate named 'nope'"):
        arbiter.arbitrate("matmul", region(), force="nope")


def test_caller_output_buffer_is_written():
    r0 = region()
    out = np.empty((20, 20), np.float32)
    r = Matmul(r0.a, r0.b, out=out)
    assert arbiter.run_arbitrated("matmul", r) is out
    np.testing.assert_allclose(out, r0.a @ r0.b, rtol=1e-5)
