"""The timing engine times the user's path: what run_arbitrated executes for a call without out=."""

import numpy as np
import pytest

from arbiter import Candidate, Fallback, Tier
from arbiter.regions import Softmax
from arbiter.timing import MODES, measure, measure_calls


class Recording(Candidate):
    """Records what each timed call was handed, and allocates its output as a dispatched call does."""

    name, target, op, tier = "recording", "cpu", "softmax", Tier.EMITTED

    def __init__(self):
        self.outs_given, self.outputs = [], []

    def run(self, region, params):
        self.outs_given.append(region.out)
        out = region.alloc_out()
        e = np.exp(region.x - region.x.max(axis=-1, keepdims=True))
        out[...] = e / e.sum(axis=-1, keepdims=True)
        self.outputs.append(out)
        return out


def test_timed_calls_allocate_their_output_like_a_dispatched_call():
    cand = Recording()
    region = Softmax.random("cpu", "float32", {"rows": 8, "cols": 16})
    m = measure(cand, {}, region, mode="device", min_reps=5, max_reps=5, time_cap_s=0.5)
    assert m.reps == 5
    assert all(out is None for out in cand.outs_given)  # nothing preallocated: the wrapper allocates
    assert len({id(o) for o in cand.outputs}) > 1  # a new output per call


def test_a_caller_given_out_is_what_the_timed_call_writes():
    cand = Recording()
    region = Softmax.random("cpu", "float32", {"rows": 8, "cols": 16})
    out = np.empty_like(region.x)
    measure(cand, {}, region.with_out(out), min_reps=3, max_reps=3)
    assert cand.outs_given[0] is out  # the region that carried out= keeps it...
    assert all(given is not None for given in cand.outs_given)  # ...and its rotated copies have their own


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_measures(mode):
    m = measure(Recording(), {}, Softmax.random("cpu", "float32", {"rows": 4, "cols": 8}), mode=mode,
                min_reps=3, max_reps=3)
    assert m.mode == mode and m.median_s > 0 and m.reps == 3


def test_stream_mode_runs_calls_back_to_back():
    counted = []
    m = measure_calls([lambda: counted.append(1)], "cpu", mode="stream", min_reps=4, max_reps=4, stream_calls=7)
    warm = len(counted) - 4 * 7
    assert 1 <= warm <= 10 and m.reps == 4  # warm-up calls, then 4 samples of 7 calls each


def test_unknown_mode_names_the_argument():
    with pytest.raises(ValueError, match="mode: 'fastest'"):
        measure_calls([lambda: None], "cpu", mode="fastest")


def test_a_declining_candidate_is_timed_with_its_stand_in_as_dispatch_serves_it():
    class Declines(Recording):
        name = "declines"

        def run(self, region, params):
            return Fallback(super().run(region, params))

    cand = Declines()
    measure(cand, {}, Softmax.random("cpu", "float32", {"rows": 4, "cols": 8}), min_reps=3, max_reps=3)
    assert cand.outputs


def test_dispatch_outputs_are_not_poisoned_but_the_gates_are():
    region = Softmax.random("cpu", "float32", {"rows": 4, "cols": 8})
    assert np.isnan(region.poisoned_out()).all()
    assert region.poisoned_out().shape == region.output_shape()


# --- paired rounds (issue 31 item 3) -------------------------------------------------------------------------------
def test_paired_statistics():
    from arbiter.timing import Paired

    p = Paired((1.0, 1.0, 1.0, 1.0), (2.0, 2.0, 0.5, 2.0))
    assert p.ratio == 2.0 and p.wins == 3
    assert p.p_value == pytest.approx(5 / 16)  # 3 or 4 of 4 rounds by chance
    assert p.measurement("b").median_s == 2.0 and p.measurement("a").reps == 4


def test_paired_rounds_alternate_the_order_and_skip_the_first_call_of_each_sample():
    from arbiter.timing import paired_rounds

    log = []
    a = [lambda: log.append("a")]
    b = [lambda: log.append("b")]
    p = paired_rounds(a, b, estimate_s=1.0, rounds=(4, 4))  # one timed call a sample (estimate >= 0.2 ms)
    assert len(p.a_s) == len(p.b_s) == 4
    # each sample: an untimed call, then one timed call; rounds A B, B A, A B, B A
    assert "".join(log) == "aabb" "bbaa" "aabb" "bbaa"


def test_paired_rounds_see_a_margin_through_drifting_load(monkeypatch):
    """Load that triples every other 30 ms makes each solution's own spread ~100%: one after the other their
    20% never separates; paired in time, every round shows it. On a simulated clock (each call advances it by its
    cost under the load of that moment): real sleeps on a busy box add their own noise, and a run of this test
    in a clean-clone CI saw 15 wins of 20 (p 0.021) where the rounds' logic gives 20 (issue 41 item 4: no test on
    wall-clock behaviour a busy box can break)."""
    from types import SimpleNamespace

    from arbiter import timing
    from arbiter.timing import paired_rounds

    now = [0.0]
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=lambda: now[0],
                                                        perf_counter_ns=lambda: int(now[0] * 1e9)))

    def loaded(base):
        def call():
            factor = 3.0 if int(now[0] / 0.03) % 2 else 1.0
            now[0] += base * factor
        return [call]

    p = paired_rounds(loaded(0.001), loaded(0.0012), estimate_s=0.001, rounds=(20, 20))
    assert 1.1 < p.ratio < 1.4, p.ratio
    assert p.p_value < 0.01, (p.wins, len(p.a_s))
