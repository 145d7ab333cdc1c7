"""Measured selection: separation, persistence of measurements, the bucket ladder, miss policies."""
import time

import pytest

import arbiter
from arbiter import Candidate, Tier, dispatch
from arbiter.regions import Matmul
from arbiter.timing import Measurement, measure
from arbiter.tune import separated, tune_region
from matmul_support import SlowVendor, mm

OVERHEAD_S = 0.003  # the vendor's 'library overhead' a call: what measurement beats


class FastEmitted(Candidate):
    name, target, op, tier = "fast_emitted", "cpu", "matmul", Tier.EMITTED

    def param_space(self):
        return [{"variant": 1}, {"variant": 2}]

    def run(self, region, params):
        return mm(region)


class TwinEmitted(Candidate):
    """The same code as the vendor: within noise of it."""

    name, target, op, tier = "twin_emitted", "cpu", "matmul", Tier.EMITTED

    def run(self, region, params):
        time.sleep(OVERHEAD_S)
        return mm(region)


@pytest.fixture
def pair(only_candidates):
    only_candidates("cpu", "matmul", SlowVendor(OVERHEAD_S), FastEmitted())


def small(m=24, n=24, k=24):
    return Matmul.random("cpu", "float32", {"m": m, "n": n, "k": k})


def test_separation_rule():
    def m(median, spread):
        return Measurement("device", median, median, median, spread, 10, 0.0)

    assert separated(m(1.0, 0.01), m(1.5, 0.02)) == (True, pytest.approx(0.5))
    assert separated(m(1.0, 0.10), m(1.15, 0.05))[0] is False  # 15% < 2 x 10% spread


def test_measured_winner_displaces_the_tier_default(pair):
    r = small()
    decision = tune_region(r, dispatch.store())
    assert decision.chosen_by == "measured"
    assert decision.winner.candidate.name == "fast_emitted"
    assert decision.margin > 0
    stored = dispatch.store().load_solution(r.key.id, decision.env.fingerprint)
    assert stored.chosen_by == "measured" and stored.candidate_name == decision.winner.candidate.name
    timed = dispatch.store().load_measurements(r.key.id, decision.env.fingerprint)
    labels = {(t.candidate_name, str(t.params), t.mode) for t in timed}
    # every parameter set is its own solution, measured and stored, under both modes
    assert ("fast_emitted", "{'variant': 1}", "device") in labels
    assert ("fast_emitted", "{'variant': 2}", "latency") in labels
    # dispatch serves the stored measured solution
    arbiter.run_arbitrated("matmul", small(20, 17, 30))
    [row] = [s for s in arbiter.stats() if s["key"] == r.key.id]
    assert row["policy"] == "measured" and (row["loads"], row["misses"]) == (1, 0)  # loaded, not decided


def test_within_noise_keeps_the_tier_default(only_candidates):
    only_candidates("cpu", "matmul", SlowVendor(OVERHEAD_S), TwinEmitted())
    decision = tune_region(small(), dispatch.store())
    assert decision.winner.candidate.name == "slow_vendor"
    assert decision.chosen_by == "tier"
    assert " faster than " in decision.note and ", but not separated: spread " in decision.note


def test_screening_stops_a_far_slower_candidate_early():
    m = measure(SlowVendor(OVERHEAD_S), {}, small(), best_so_far=1e-5)
    assert m.screened and m.reps == 3


def test_unavailable_after_tuning_falls_back_and_counts_it(pair, monkeypatch):
    r = small()
    winner = tune_region(r, dispatch.store()).winner.candidate
    dispatch.reset()  # a new process: nothing installed, the store remembers
    monkeypatch.setattr(type(winner), "available", lambda self: "driver went away")
    arbiter.run_arbitrated("matmul", r)
    [row] = [s for s in arbiter.stats() if s["key"] == r.key.id]
    assert row["solution"] != winner.name and row["fallbacks"] == 1 and row["misses"] == 0


def test_ladder_uses_the_nearest_tuned_buckets_winner(pair, monkeypatch):
    tuned = tune_region(small(24, 24, 24), dispatch.store())
    assert tuned.winner.candidate.name == "fast_emitted"
    far = small(100, 24, 24)  # m bucket 128: unseen
    arbiter.run_arbitrated("matmul", far)
    route = dispatch.route(far.key.id)
    assert route.candidate.name == "fast_emitted" and route.params == tuned.winner.params
    # a bucket whose nearest winner does not apply falls back to tier priority
    monkeypatch.setattr(FastEmitted, "applies_to", lambda self, region: region.dims["m"] < 200 or "m too large")
    huge = small(300, 24, 24)
    arbiter.run_arbitrated("matmul", huge)
    assert dispatch.route(huge.key.id).candidate.name == "slow_vendor"


def test_policy_tune_measures_on_first_miss(pair):
    r = small()
    arbiter.run_arbitrated("matmul", r, policy="tune")
    assert dispatch.route(r.key.id).chosen_by == "measured"
    assert dispatch.store().load_measurements(r.key.id, arbiter.env.environment("cpu").fingerprint)


def test_policy_record_serves_by_tier_and_records_the_key(monkeypatch):
    monkeypatch.setenv("ARBITER_POLICY", "record")
    r = small(30, 40, 50)
    arbiter.run_arbitrated("matmul", r)
    assert dispatch.route(r.key.id).chosen_by == "tier"
    assert dispatch.store().recorded_keys() == [(r.key.id, {"m": 30, "n": 40, "k": 50})]


class VectorTiles(Candidate):
    """Parameter sets that coincide: ``vec`` does nothing when K is not a multiple of 4, and tiles 16 and 32 run
    as one launch (as a GPU row kernel's thread counts rounded up by its plan)."""

    name, target, op, tier = "vector_tiles", "cpu", "matmul", Tier.EMITTED

    def param_space(self):
        return [{"tile": 8, "vec": True}, {"tile": 8, "vec": False}, {"tile": 16, "vec": True},
                {"tile": 32, "vec": True}, {"tile": 32, "vec": False}]

    def launch_signature(self, region, params):
        return min(params["tile"], 16), params["vec"] and region.dims["k"] % 4 == 0

    def run(self, region, params):
        return mm(region)


class Recording:
    """The in-process runner, recording every solution it times."""

    verify = None

    def __init__(self):
        self.timed: list = []

    def measure(self, candidate, params, region, **kwargs):
        self.timed.append((candidate.name, tuple(sorted(params.items())), kwargs["mode"]))
        return measure(candidate, params, region, **kwargs)


@pytest.mark.parametrize("k, distinct", [(25, [(8, True), (16, True)]),
                                         (24, [(8, True), (8, False), (16, True), (32, False)])])
def test_parameter_sets_with_one_launch_are_timed_once(only_candidates, k, distinct):
    only_candidates("cpu", "matmul", SlowVendor(OVERHEAD_S), VectorTiles())
    runner = Recording()
    decision = tune_region(small(k=k), dispatch.store(), runner=runner)
    # (a close margin is timed again: the same solutions, so first appearances are what was timed)
    mine = [dict(p) for p in dict.fromkeys(p for name, p, _ in runner.timed if name == "vector_tiles")]
    assert [(p["tile"], p["vec"]) for p in mine] == distinct  # each launch once, the first parameter set of it
    assert ("slow_vendor", (), "device") in runner.timed  # another candidate's default signature is its own
    rows = [r for r in decision.rows if r.candidate.name == "vector_tiles"]
    twins = [r for r in rows if r.params not in mine]
    assert len(twins) == 5 - len(distinct)
    for row in twins:  # gated and passed, not timed, ranked nowhere, and saying which solution ran for it
        assert row.status == "passed" and row.timing is None and row.rank is None
        assert row.reason.startswith("runs as vector_tiles{") and row.reason.endswith(": timed once")
    stored = dispatch.store().load_measurements(decision.key.id, decision.env.fingerprint)
    assert {m.solution for m in stored if m.candidate_name == "vector_tiles"} == \
        {r.solution for r in rows if r not in twins}


class BrokenSignature(VectorTiles):
    name = "broken_signature"

    def launch_signature(self, region, params):
        return [params["tile"]]  # a list: not hashable


def test_a_signature_that_cannot_be_used_times_every_parameter_set(only_candidates):
    only_candidates("cpu", "matmul", BrokenSignature())
    runner = Recording()
    decision = tune_region(small(k=25), dispatch.store(), runner=runner)
    assert len({p for name, p, _ in runner.timed if name == "broken_signature"}) == 5
    assert not any(r.reason for r in decision.rows)


# --- the CPU decides on paired rounds (issue 31 item 3) -------------------------------------------------------------
# The loaded candidates below cost simulated time: the timing engine's clock (``arbiter.timing``'s and the CPU
# timer's ``time.perf_counter``) is a counter their runs advance. With real sleeps, a busy box's oversleep broke
# the tie of two equal solutions in a clean-clone CI (loaded_synth "1.48x" against loaded_emitted's 1.5x: issue 41
# item 4, no test on wall-clock behaviour a busy box can break); the subject here is the rounds' statistics.
_NOW = [0.0]


@pytest.fixture
def simulated_clock(monkeypatch):
    from types import SimpleNamespace

    from arbiter import targets, timing

    fake = SimpleNamespace(**{name: getattr(time, name) for name in dir(time) if not name.startswith("_")})
    fake.perf_counter = lambda: _NOW[0]
    fake.perf_counter_ns = lambda: int(_NOW[0] * 1e9)
    monkeypatch.setattr(timing, "time", fake)
    monkeypatch.setattr(targets, "time", fake)


def _loaded_sleep(base: float, drift: bool = True) -> None:
    """Cost ``base`` simulated seconds times a load that triples every other 100 ms (a shared box's drift, made
    regular)."""
    _NOW[0] += base * (3.0 if drift and int(_NOW[0] / 0.1) % 2 else 1.0)


class LoadedVendor(Candidate):
    name, target, op, tier = "loaded_vendor", "cpu", "matmul", Tier.HAND_TUNED
    base = 0.0036  # sleeps of milliseconds: a loaded machine's oversleep is small beside them
    drift = True

    def run(self, region, params):
        _loaded_sleep(self.base, self.drift)
        return mm(region)


class LoadedEmitted(LoadedVendor):
    name, tier = "loaded_emitted", Tier.EMITTED
    base = 0.0024


class LoadedTwin(LoadedVendor):
    name, tier = "loaded_twin", Tier.EMITTED


def test_a_fifty_percent_margin_separates_through_drifting_load(only_candidates, simulated_clock):
    """Each solution's own spread is ~100% under this load, so the spread rule never separated 50%; paired rounds
    see it in most rounds. (50%, not the 20% the CPU separates on a quiet box: this test runs on a box whose own
    load oversleeps millisecond sleeps by as much.)"""
    only_candidates("cpu", "matmul", LoadedVendor(), LoadedEmitted())
    decision = tune_region(small(), dispatch.store(), budget_s=0.5)
    assert decision.winner.candidate.name == "loaded_emitted", decision.note
    assert decision.chosen_by == "measured", decision.note
    assert "interleaved rounds: loaded_emitted faster than loaded_vendor in" in decision.note
    assert 0.2 < decision.margin < 1.0


def test_twins_are_not_separated_by_paired_rounds(only_candidates, simulated_clock):
    only_candidates("cpu", "matmul", LoadedVendor(), LoadedTwin())
    decision = tune_region(small(), dispatch.store(), budget_s=0.5)
    assert decision.winner.candidate.name == "loaded_vendor" and decision.chosen_by == "tier", decision.note
    assert "but not separated" in decision.note and "interleaved rounds" in decision.note


def test_deciding_keys_whose_probes_overflow_exp_warns_nothing(recwarn):
    """Issue 31 item 5: the gate's probes overflow exp on purpose (numpy_gated, numpy_pointwise, the oracles); the
    verdict reports what matters, and no NumPy RuntimeWarning reaches the user, tuning or served."""
    import numpy as np

    from arbiter.regions import Gated, Pointwise

    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((8, 64)).astype(np.float32), rng.standard_normal((64, 32)).astype(np.float32)
    arbiter.run_arbitrated("gated", Gated(x * 100, w, w), policy="tune")
    big = rng.standard_normal(1000).astype(np.float32)
    arbiter.run_arbitrated("pointwise", Pointwise(big, [("mul", 100.0), ("silu",)]), policy="tune")
    arbiter.run_arbitrated("matmul", Matmul(x, w * 100, activation="silu"), policy="tune")
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in recwarn]


class LoadedSynth(LoadedVendor):
    name, tier = "loaded_synth", Tier.SYNTHESIZED
    base = 0.0024


def test_two_solutions_tied_ahead_of_the_default_resolve_by_tier_order(only_candidates, simulated_clock):
    """loaded_emitted and loaded_synth both beat the vendor by 50% and tie with each other: whichever led the rounds,
    the earlier in tier order is stored, so repeated tunes agree (no drift here: the subject is the tie)."""
    steady = [LoadedVendor(), LoadedEmitted(), LoadedSynth()]
    for cand in steady:
        cand.drift = False
    only_candidates("cpu", "matmul", *steady)
    for _ in range(2):
        dispatch.configure(store=arbiter.store.MemoryStore())
        decision = tune_region(small(), dispatch.store(), budget_s=0.5)
        assert decision.winner.candidate.name == "loaded_emitted", decision.note
        assert decision.chosen_by == "measured", decision.note
