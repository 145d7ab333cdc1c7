"""The tuner judges a solution by its tail as well as its median (issue 39 item 2): a program pays every call.

A default whose calls stall now and then (a pool woken late on a busy box) loses to a steadier solution that is
slower on the median but faster on the mean; a challenger faster on the median but slower on the mean does not
win. Pure checks of the rule on given rounds, and one tune on real, deliberately bimodal candidates.
"""
from __future__ import annotations

import time

import numpy as np

from arbiter import dispatch, tune
from arbiter.candidates import Candidate, Tier
from arbiter.regions import Softmax
from arbiter.tune import TAIL_RATIO, _tail_win, tune_region
from softmax_support import softmax_into_out


def test_a_bimodal_default_loses_to_a_steadier_one_on_the_mean():
    rng = np.random.default_rng(1)
    steady = list(20e-6 * (1 + 0.05 * rng.random(30)))
    bimodal = [1e-3 if i % 3 == 0 else 10e-6 for i in range(30)]  # a third of its rounds stalled
    assert np.mean(bimodal) > TAIL_RATIO * np.median(bimodal)
    assert _tail_win([bimodal, steady], 0) == 1


def test_a_steady_default_or_a_rare_stall_keeps_the_default():
    rng = np.random.default_rng(2)
    steady = list(20e-6 * (1 + 0.05 * rng.random(30)))
    faster = list(15e-6 * (1 + 0.05 * rng.random(30)))
    assert _tail_win([steady, faster], 0) is None  # not bimodal: the median rule decides, not this one
    rare = [10e-6] * 29 + [3e-3]  # one stalled round in 30: resampled rounds often miss it
    assert _tail_win([rare, steady], 0) is None


class BimodalSoftmax(Candidate):
    """A right softmax whose every 45th call stalls 20 ms: fast on the median, slow for a program."""

    name, target, op, tier, priority = "bimodal_softmax", "cpu", "softmax", Tier.HAND_TUNED, 100

    def __init__(self):
        self.calls = 0

    def run(self, region, params):
        self.calls += 1
        if self.calls % 45 == 0:
            time.sleep(0.02)
        return softmax_into_out(region)


class SteadySoftmax(Candidate):
    """A right softmax that does its work twice: about 2x slower a call, never stalled."""

    name, target, op, tier, priority = "steady_softmax", "cpu", "softmax", Tier.EMITTED, 0

    def run(self, region, params):
        softmax_into_out(region)
        return softmax_into_out(region)


def test_the_tuner_picks_the_steadier_solution_over_a_bimodal_default(only_candidates):
    only_candidates("cpu", "softmax", BimodalSoftmax(), SteadySoftmax())
    region = Softmax(np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32))
    decision = tune_region(region, dispatch.store())
    assert decision.winner.candidate.name == "steady_softmax", decision.note
    assert "bimodal" in decision.note and "on the mean" in decision.note, decision.note


class FastMedianSlowTail(BimodalSoftmax):
    """Faster than the default on most calls, with stalls that make it slower on the mean."""

    name, tier, priority = "fast_median_slow_tail", Tier.EMITTED, 0

    def run(self, region, params):
        self.calls += 1
        if self.calls % 40 == 0:
            time.sleep(0.02)
        return softmax_into_out(region)


def test_a_win_on_the_median_lost_in_the_tail_keeps_the_default(only_candidates):
    only_candidates("cpu", "softmax", SteadySoftmax(), FastMedianSlowTail())
    SteadySoftmax.tier, SteadySoftmax.priority = Tier.HAND_TUNED, 100  # the default here
    try:
        region = Softmax(np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32))
        decision = tune_region(region, dispatch.store())
    finally:
        SteadySoftmax.tier, SteadySoftmax.priority = Tier.EMITTED, 0
    assert decision.winner.candidate.name == "steady_softmax", decision.note
    assert tune.PAIRED_MIN_MARGIN > 0
