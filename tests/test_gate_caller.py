"""Gate round 2 (issue 25): the gate probes the caller's call. Per class, a wrong candidate the gate of issue 15
served (it probed plain layouts, no aliasing, benign values, one run a probe) and the new gate rejects, with
its reason; correct alternatives (stride-aware, in place, compensated sums, guarded online softmax) pass.
``benchmarks/gate_classes.py`` replays the same candidates against any version of the gate.
"""
import math

import numpy as np
import pytest

from arbiter import layouts
from arbiter.errors import RegionError
from arbiter.regions import Attention, Matmul, Pointwise, RMSNorm, Softmax
from arbiter.verify import REPEAT_WORK_FACTOR, REPEATS, probe_plan, repeat_dims, verify
from wrong_candidates import (
    BiasAssumedContiguous,
    BroadcastResidualOnce,
    DenseTransposeAssumed,
    FastExpSaturating,
    FlushesSubnormals,
    InPlaceRMSNorm,
    KahanRMSNorm,
    MisalignedPeel,
    OneWrongFragment,
    OnlineSoftmaxGuarded,
    OnlineSoftmaxNoGuard,
    RacySumOrder,
    RacySumOrderDeclared,
    ReluFmax,
    ResidualAddedTwice,
    RMSNormFillsRows,
    RMSNormNaNsLargeRows,
    RMSNormZeroesInfRows,
    RowsFromFirstAxis,
    ScaleOneMeansDefault,
    SoftmaxThreePass,
    StrideAwareMatmul,
    TinyThreshold,
    WritesPastTile,
    Wrong,
    WrongAboveK768,
    ZeroEndsShortcut,
)

RNG = np.random.default_rng(25)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def transposed_padded_b(m=40, n=24, k=36):
    w = _f32(n, k + 5)  # a weight [N, K + pad] as stored; the caller multiplies by W[:, :K].T
    return Matmul(_f32(m, k), w[:, :k].T)


def strided_bias(m=40, n=24, k=36):
    return Matmul(_f32(m, k), _f32(k, n) / 6, bias=_f32(2 * n)[::2])


def broadcast_residual(m=40, n=24, k=36):
    return Matmul(_f32(m, k), _f32(k, n) / 6, residual=np.broadcast_to(_f32(n), (m, n)))


def in_place_residual(m=40, n=24, k=36):
    r = _f32(m, n)
    return Matmul(_f32(m, k), _f32(k, n) / 6, residual=r, out=r)


def softmax_in_place(rows=20, cols=100):
    x = _f32(rows, cols)
    return Softmax(x, out=x)


CASES = [
    # layouts
    (DenseTransposeAssumed, transposed_padded_b, "at 40x24x36"),
    (RowsFromFirstAxis, lambda: RMSNorm(_f32(4, 6, 64), _f32(64)), "at "),
    (BiasAssumedContiguous, strided_bias, "at "),
    (BroadcastResidualOnce, broadcast_residual, "at "),
    (MisalignedPeel, lambda: Pointwise(_f32(300), [("neg",)]), "at "),  # relu hides a zeroed element half the time
    # aliasing
    (ResidualAddedTwice, in_place_residual, "at 40x24x36"),
    (SoftmaxThreePass, softmax_in_place, "at 20x100"),
    (WritesPastTile, lambda: Matmul(_f32(30, 16), _f32(16, 24)), "wrote outside its output"),
    # special values
    (ReluFmax, lambda: Pointwise(_f32(300), [("relu",)]), "nonfinite"),
    (OnlineSoftmaxNoGuard, lambda: Softmax(_f32(20, 100)), "masked_blocks"),
    (FastExpSaturating, lambda: Pointwise(_f32(300), [("exp",)]), ("huge", "nonfinite")),  # +inf input, or 1e30
    (FlushesSubnormals, lambda: Matmul(_f32(32, 32), _f32(32, 32)), "subnormal"),
    (ZeroEndsShortcut, lambda: RMSNorm(_f32(16, 64), _f32(64)), "zero_ends"),
    (RMSNormZeroesInfRows, lambda: RMSNorm(_f32(16, 64), _f32(64)), "nonfinite"),
    # (eps_dominated's constant rows reach magnitudes of 3000 since issue 38 item 1: caught there first)
    (RMSNormNaNsLargeRows, lambda: RMSNorm(_f32(16, 64), _f32(64)), ("large_magnitude", "eps_dominated")),
    # probe plan: a size range inside the bucket
    (WrongAboveK768, lambda: Matmul(_f32(16, 1024), _f32(1024, 16) / 32), "x771"),
    # repeats
    (RacySumOrder, lambda: Matmul(_f32(64, 64), _f32(64, 64)), "differs from run 1"),
    # scalar sentinels
    (ScaleOneMeansDefault, lambda: Attention(_f32(1, 2, 16, 16), _f32(1, 2, 16, 16), _f32(1, 2, 16, 16)),
     "scale=1"),
]


@pytest.mark.parametrize("cls, region, expected", CASES, ids=[c[0].__name__ for c in CASES])
def test_each_wrong_class_of_the_callers_call_is_rejected(cls, region, expected):
    verdict = verify(cls(), {}, region())
    assert not verdict.passed, verdict
    assert any(e in verdict.reason for e in ((expected,) if isinstance(expected, str) else expected)), verdict.reason


@pytest.mark.parametrize("cls, region", [
    (StrideAwareMatmul, transposed_padded_b),
    (StrideAwareMatmul, strided_bias),
    (StrideAwareMatmul, broadcast_residual),
    (StrideAwareMatmul, in_place_residual),
    (InPlaceRMSNorm, lambda: RMSNorm(_f32(4, 6, 64), _f32(64))),
    (InPlaceRMSNorm, lambda: (lambda x: RMSNorm(x, _f32(64), out=x))(_f32(16, 64))),
    (KahanRMSNorm, lambda: RMSNorm(_f32(16, 256), _f32(256))),
    (OnlineSoftmaxGuarded, lambda: Softmax(_f32(20, 100))),
    (RacySumOrderDeclared, lambda: Matmul(_f32(64, 64), _f32(64, 64))),
    (RMSNormFillsRows, lambda: RMSNorm(_f32(16, 256), _f32(256))),
    (RMSNormFillsRows, lambda: RMSNorm(_f32(4, 6, 64), _f32(64))),
], ids=["transposed-padded", "strided-bias", "broadcast-residual", "in-place-residual", "rmsnorm-3d",
        "rmsnorm-in-place", "kahan", "online-softmax-guarded", "nondeterministic-declared", "rmsnorm-fills-rows",
        "rmsnorm-fills-rows-3d"])
def test_correct_alternatives_of_the_callers_call_pass(cls, region):
    verdict = verify(cls(), {}, region())
    assert verdict.passed, verdict.reason


# --- 1. layouts in the key and in the probes ------------------------------------------------------------------
def test_layout_tokens_name_class_rank_and_alignment():
    w = np.zeros((8, 20), np.float32)  # rows of 80 bytes: 16-byte multiples
    v = np.zeros((8, 21), np.float32)  # rows of 84 bytes
    heads = np.zeros((2, 5, 3, 4), np.float32).transpose(0, 2, 1, 3)  # [B, S, H, D] seen as [B, H, S, D]
    assert [layouts.token(a) for a in (w, w.T, v[:, :7], v[:, :7].T, w[:, :6], heads, w[:, ::2],
                                       np.broadcast_to(w[0], (8, 20)), np.zeros((3, 4, 5)))] == \
        ["R2", "C2", "P2u", "T2u", "P2a", "M4o0213d", "S2", "B2z0", "R3"]


def test_key_carries_non_plain_operands_and_plain_keys_are_unchanged():
    plain = Matmul(_f32(8, 8), _f32(8, 8), bias=_f32(8))
    assert "layouts" not in dict(plain.key.attrs)
    assert dict(strided_bias().key.attrs)["layouts"] == "bias-S1"
    assert dict(broadcast_residual().key.attrs)["layouts"] == "residual-B2z0"
    assert dict(RMSNorm(_f32(4, 6, 64), _f32(64)).key.attrs)["layouts"] == "x-R3"
    assert transposed_padded_b().key != Matmul(_f32(40, 36), np.asfortranarray(_f32(36, 24))).key


class _Spy(Wrong):
    name, op = "layout_spy", "matmul"

    def __init__(self):
        self.seen = []

    def run(self, region, params):
        self.seen.append((layouts.token(region.b), region.b.__array_interface__["data"][0] % 16))
        out = region.alloc_out()
        np.matmul(np.ascontiguousarray(region.a), np.ascontiguousarray(region.b), out=out)
        return out


def test_every_probe_reproduces_the_callers_layout_and_alternates_alignment():
    spy = _Spy()
    assert verify(spy, {}, transposed_padded_b()).passed
    assert {tok for tok, _ in spy.seen} == {"T2u"}
    assert {off for _, off in spy.seen} == {0, 4}  # 16-byte aligned, and one float32 off


# --- 2. aliasing -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("build", [
    lambda: (lambda a: Matmul(a, _f32(16, 16), out=a))(_f32(16, 16)),
    lambda: (lambda buf: RMSNorm(buf, buf[0], out=buf))(_f32(8, 8)),
    lambda: (lambda buf: Softmax(buf[1:], out=buf[:-1]))(_f32(9, 8)),
], ids=["matmul-out-a", "rmsnorm-out-overlaps-weight", "softmax-shifted-overlap"])
def test_illegal_overlaps_of_out_are_refused_naming_out(build):
    with pytest.raises(RegionError) as err:
        build()
    assert err.value.argument == "out" if hasattr(err.value, "argument") else "out" in str(err.value)
    assert "out" in str(err.value)


def test_legal_in_place_is_keyed_and_numpy_matmul_is_right_for_it():
    from arbiter.candidates import REGISTRY

    region = in_place_residual()
    assert dict(region.key.attrs)["inplace"] == "residual"
    r0 = region.residual.copy()
    expected = region.a.astype(np.float64) @ region.b + r0
    REGISTRY.get("numpy_matmul", "cpu", "matmul").run(region, {})
    np.testing.assert_allclose(region.out, expected, rtol=1e-5, atol=1e-5)
    assert verify(REGISTRY.get("numpy_matmul", "cpu", "matmul"), {}, in_place_residual()).passed


# --- 3..7: plan, large shapes, repeats, scalars ----------------------------------------------------------
def test_no_family_is_dropped_when_the_cost_cap_binds():
    region = Matmul.random("cpu", "float32", {"m": 600, "n": 600, "k": 600})
    names = {p.family.name for p in probe_plan(region)}
    assert {"mixed_rows", "tiny", "nonfinite", "subnormal"} <= names
    assert any(not p.inside for p in probe_plan(region))  # shrunk to fit, not skipped


def test_interior_sizes_of_the_bucket_are_probed():
    region = Matmul.random("cpu", "float32", {"m": 16, "n": 16, "k": 1024})
    ks = {p.dims["k"] for p in probe_plan(region)}
    assert {640, 771, 960} <= ks  # an odd multiple of 128, an odd tail past 768, an odd multiple of 64


def test_cap_bound_key_still_meets_the_tiny_family():
    region = Matmul.random("cpu", "float32", {"m": 520, "n": 520, "k": 520})
    verdict = verify(TinyThreshold(), {}, region)
    assert not verdict.passed and "tiny" in verdict.reason


def test_one_wrong_fragment_in_a_large_nonlinear_product_is_caught():
    from arbiter.verify import CHEAP_CHECK_WORK

    region = Matmul.random("cpu", "float32", {"m": 640, "n": 640, "k": 384}, {"activation": "gelu"})
    assert CHEAP_CHECK_WORK < 640 * 640 * 384  # the sampled/diagonal check, not the full reference
    for seed in range(3):
        verdict = verify(OneWrongFragment(seed), {}, region)
        assert not verdict.passed and "at 640x640x384" in verdict.reason


def test_repeats_catch_a_one_in_eight_race_at_stated_odds():
    assert 1 - (7 / 8) ** REPEATS >= 0.99
    region = Matmul.random("cpu", "float32", {"m": 64, "n": 64, "k": 64})
    assert math.prod(repeat_dims(region).values()) * REPEATS <= max(REPEAT_WORK_FACTOR * 64 ** 3, 1 << 22)


def test_varied_scalars_include_the_sentinels():
    from arbiter.probes import varied_scalars

    region = Attention(_f32(1, 2, 16, 16), _f32(1, 2, 16, 16), _f32(1, 2, 16, 16))
    seen = [varied_scalars(region, RNG, i)["scale"] for i in range(1, 8)]
    assert 1.0 in seen and 0.0 in seen and None in seen and any(s is not None and s < 0 for s in seen)
    eps = [varied_scalars(RMSNorm(_f32(4, 8), _f32(8), eps=1e-5), RNG, i)["eps"] for i in range(1, 6)]
    assert 1.0 in eps and 1e-6 in eps  # rmsnorm's default
    pw = [varied_scalars(Pointwise(_f32(8), [("add", 2.0)]), RNG, i)["scalars"][0] for i in range(1, 6)]
    assert {1.0, 0.0, -1.0} <= set(pw)


def _builtin_cases():
    def inplace_res():
        r = _f32(40, 24)
        return Matmul(_f32(40, 36), _f32(36, 24) / 6, bias=_f32(24), activation="relu", residual=r, out=r)

    def inplace(cls, *extra):
        x = _f32(16, 64)
        return cls(x, *extra, out=x)

    from arbiter.regions import LayerNorm

    return {
        "matmul-transposed-padded-b": lambda: transposed_padded_b(),
        "matmul-strided-bias-gelu": lambda: Matmul(_f32(40, 36), _f32(36, 24) / 6, bias=_f32(48)[::2],
                                                   activation="gelu"),
        "matmul-broadcast-residual": broadcast_residual,
        "matmul-in-place-residual": inplace_res,
        "rmsnorm-3d": lambda: RMSNorm(_f32(4, 6, 64), _f32(64)),
        "rmsnorm-strided-weight": lambda: RMSNorm(_f32(16, 64), _f32(128)[::2]),
        "rmsnorm-in-place": lambda: inplace(RMSNorm, _f32(64)),
        "layernorm-in-place": lambda: inplace(LayerNorm, _f32(64), _f32(64)),
        "softmax-3d": lambda: Softmax(_f32(4, 6, 64)),
        "softmax-in-place": lambda: inplace(Softmax),
        "pointwise-2d": lambda: Pointwise(_f32(16, 64), [("mul", _f32(16, 64)), ("add", 1.0), ("relu",)]),
        "pointwise-broadcast-operand": lambda: Pointwise(_f32(16, 64), [("mul", np.broadcast_to(_f32(64), (16, 64))),
                                                                         ("tanh",)]),
        "attention-permuted-heads": lambda: Attention(*(_f32(1, 16, 2, 32).transpose(0, 2, 1, 3) for _ in range(3))),
    }


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(_builtin_cases()))
def test_builtins_serve_or_decline_the_callers_layouts(case):
    """Every CPU built-in either declines the caller's layout or aliasing (cheaply, in applies_to) or passes the
    gate probing it; none is served wrong."""
    from arbiter.candidates import REGISTRY

    region = _builtin_cases()[case]()
    served = 0
    for cand in REGISTRY.candidates(target="cpu", op=region.op):
        if cand.available() is not True or cand.applies_to(region) is not True:
            continue
        verdict = verify(cand, (cand.param_space() or [{}])[0], region)
        assert verdict.passed, f"{cand.name}: {verdict.reason}"
        served += 1
    assert served, "no built-in serves it"


def test_an_isolated_gate_probes_the_callers_layouts_and_aliasing():
    """``tune --isolate`` rebuilds the region in a child from its description: the key (and with it the layouts
    and in-place attributes the probes reproduce) must survive."""
    from arbiter.isolate import _describe, _rebuild

    r = _f32(8, 6)
    region = Matmul(_f32(8, 5), _f32(5, 6), bias=_f32(12)[::2], residual=r, out=r)
    assert _rebuild(_describe(region)).key == region.key
