"""Fuzzed regions (hypothesis): every case computes the oracle's answer within budget, or raises
RegionError naming the argument; never a crash, never a silently wrong result.

Cases: dtypes, 0-size and 1-size dimensions, column-major, strided and negative-stride operands,
NaN/Inf in the inputs, mismatched shapes and dtypes. ``CASES`` counts the cases run; a last test shows
the comparison fails on a kernel that is wrong only where the gate's finite probes never look.
"""
from __future__ import annotations

import collections

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import arbiter
from arbiter import RegionError, dispatch, select
from arbiter.env import environment
from arbiter.ops import op_kind
from arbiter.oracles.budgets import budget_for
from arbiter.regions import Matmul, RMSNorm, Softmax
from arbiter.verify import compare

CASES = collections.Counter()
# The fuzz draws NaN and Inf inputs on purpose: NumPy's "invalid value" RuntimeWarnings from the oracles and the
# kernels on them are the expected arithmetic, not findings (the comparison checks the results).
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning",
                                        "ignore:overflow encountered:RuntimeWarning",
                                        "ignore:divide by zero encountered:RuntimeWarning")
SETTINGS = settings(max_examples=int(__import__("os").environ.get("FUZZ_EXAMPLES", "60")), deadline=None,
                    suppress_health_check=list(HealthCheck))
DTYPES = st.sampled_from(["float16", "float32", "float64"])
SIZE = st.integers(min_value=0, max_value=40)


def arrange(draw, shape, dtype, rng):
    """An operand of ``shape`` in a drawn layout: C, Fortran, strided, or reversed (negative strides)."""
    base = rng.standard_normal(shape).astype(dtype)
    layout = draw(st.sampled_from(["C", "F", "strided", "reversed"]))
    if layout == "F":
        return np.asfortranarray(base)
    if layout == "strided" and len(shape):
        wide = np.empty(shape[:-1] + (shape[-1] * 2,), dtype)
        wide[..., ::2] = base
        return wide[..., ::2]
    if layout == "reversed" and len(shape):
        return np.ascontiguousarray(base[..., ::-1])[..., ::-1]
    return base


def poison(draw, arrays):
    """Maybe put NaN or Inf into one operand element."""
    value = draw(st.sampled_from([None, np.nan, np.inf, -np.inf]))
    if value is None:
        return
    victims = [a for a in arrays if a is not None and a.size]
    if victims:
        a = draw(st.sampled_from(victims))
        a[tuple(draw(st.integers(0, n - 1)) for n in a.shape)] = value


def check(op, region):
    """Dispatch, then run every other solution that passed the gate for this key too, and compare each
    with the oracle under the published budget: a fuzz case must not find a wrong-but-gated kernel."""
    ref = op_kind(op).oracle(region)
    budget = budget_for(op, region.dtype)
    out = arbiter.run_arbitrated(op, region)
    reason, _, _ = compare(np.asarray(out, dtype=np.float64), ref, budget)
    assert not reason, f"{region} via run_arbitrated: {reason}"
    env = environment(region.target)
    for row in select.screen(region, all_params=True):
        if row.status != "pending":
            continue
        select.gate(row, region, dispatch.store(), env)
        if row.status != "passed":
            continue
        got = row.candidate.run(region.with_out(np.full(region.output_shape(), np.nan, region.dtype)), row.params)
        reason, _, _ = compare(np.asarray(got, dtype=np.float64), ref, budget)
        assert not reason, f"{region} via {row.label}: {reason}"
        CASES[f"{op} solutions"] += 1
    CASES[op] += 1


@st.composite
def matmul_case(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    m, n, k, dtype = draw(SIZE), draw(SIZE), draw(SIZE), draw(DTYPES)
    a = arrange(draw, (m, k), dtype, rng)
    b = arrange(draw, (k, n), dtype, rng) / np.sqrt(max(k, 1)).astype(dtype)
    bias = rng.standard_normal(n).astype(dtype) if draw(st.booleans()) else None
    residual = arrange(draw, (m, n), dtype, rng) if draw(st.booleans()) else None
    act = draw(st.sampled_from(["none", "relu", "gelu", "gelu_tanh", "silu"]))
    poison(draw, [a, b, bias, residual])
    return a, b, bias, act, residual


@given(matmul_case())
@SETTINGS
def test_fuzz_matmul(case):
    a, b, bias, act, residual = case
    check("matmul", Matmul(a, b, bias=bias, activation=act, residual=residual))


@st.composite
def rows_case(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1 if i == ndim - 1 else 0, 24)) for i in range(ndim))
    dtype = draw(DTYPES)
    x = arrange(draw, shape, dtype, rng)
    return rng, x, dtype


@given(rows_case(), st.data())
@SETTINGS
def test_fuzz_softmax(case, data):
    _, x, _ = case
    poison(data.draw, [x])
    check("softmax", Softmax(x, axis=data.draw(st.integers(-x.ndim, x.ndim - 1))))


@given(rows_case(), st.data())
@SETTINGS
def test_fuzz_rmsnorm(case, data):
    rng, x, dtype = case
    w = rng.standard_normal(x.shape[-1]).astype(dtype)
    poison(data.draw, [x, w])
    check("rmsnorm", RMSNorm(x, w, eps=data.draw(st.sampled_from([1e-6, 1e-5, 0.1]))))


@st.composite
def bad_matmul(draw):
    """One thing wrong at a time; returns (the constructor call, the argument it must name)."""
    m, n, k = draw(st.integers(1, 9)), draw(st.integers(1, 9)), draw(st.integers(1, 9))
    ok = dict(a=np.ones((m, k), np.float32), b=np.ones((k, n), np.float32))
    flaw = draw(st.sampled_from(["inner", "dtype", "bias", "residual", "rank", "int", "act", "list"]))
    if flaw == "inner":
        ok["b"] = np.ones((k + 1, n), np.float32)
        return ok, "b"
    if flaw == "dtype":
        ok["b"] = ok["b"].astype(np.float64)
        return ok, "b"
    if flaw == "bias":
        ok["bias"] = np.ones(n + 1, np.float32)
        return ok, "bias"
    if flaw == "residual":
        ok["residual"] = np.ones((m + 1, n), np.float32)
        return ok, "residual"
    if flaw == "rank":
        ok["a"] = np.ones((m, k), np.float32)[0]  # 1-D (a 3-D a is a batch of rows: N-D inputs are accepted)
        return ok, "a"
    if flaw == "int":
        ok["a"] = np.ones((m, k), np.int64)
        return ok, "a"
    if flaw == "act":
        ok["activation"] = draw(st.sampled_from(["tanh", "GELU", "", "swish"]))
        return ok, "activation"
    ok["a"] = [[1.0] * k] * m
    return ok, "a"


@given(bad_matmul())
@SETTINGS
def test_fuzz_bad_matmul_names_the_argument(case):
    kwargs, argument = case
    with pytest.raises(RegionError) as err:
        Matmul(**kwargs)
    assert err.value.argument == argument
    CASES["matmul rejected"] += 1


@given(st.integers(1, 6), st.integers(1, 6), st.sampled_from(["weight_len", "weight_dtype", "eps", "axis"]))
@SETTINGS
def test_fuzz_bad_rows_name_the_argument(r, c, flaw):
    x = np.ones((r, c), np.float32)
    with pytest.raises(RegionError) as err:
        if flaw == "weight_len":
            RMSNorm(x, np.ones(c + 1, np.float32))
        elif flaw == "weight_dtype":
            RMSNorm(x, np.ones(c, np.float64))
        elif flaw == "eps":
            RMSNorm(x, np.ones(c, np.float32), eps=-1.0)
        else:
            Softmax(x, axis=3)
    assert err.value.argument == {"weight_len": "weight", "weight_dtype": "weight", "eps": "eps", "axis": "axis"}[flaw]
    CASES["rows rejected"] += 1


def test_fuzz_check_catches_a_kernel_wrong_only_on_nonfinite_inputs(only_candidates):
    """The fuzz comparison can fail: a softmax that passes the gate but replaces inf by the largest float at the
    caller's shape only (the gate's non-finite probes run at the bucket's low corner, 3x5) is caught on an input
    holding inf."""
    class FiniteOnly(arbiter.Candidate):
        name, target, op, tier, priority = "finite_only_softmax", "cpu", "softmax", arbiter.Tier.HAND_TUNED, 9

        def run(self, region, params):
            out = region.alloc_out()
            x = region.x.astype(np.float64)
            if x.shape == (4, 8):
                x = np.nan_to_num(x, posinf=1e300, neginf=-1e300)
            e = np.exp(x - x.max(axis=region.axis, keepdims=True))
            out[...] = e / e.sum(axis=region.axis, keepdims=True)
            return out

    only_candidates("cpu", "softmax", FiniteOnly())
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    check("softmax", Softmax(x))  # finite input: right
    x[1, 3] = np.inf  # the oracle gives NaN for the row; this kernel gives a one-hot row
    with pytest.raises(AssertionError, match="non-finite"):
        check("softmax", Softmax(x))
