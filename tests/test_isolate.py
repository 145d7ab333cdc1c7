"""--isolate: a candidate that segfaults, hangs or exhausts memory fails alone; tuning goes on."""
import ctypes
import time

import numpy as np

from arbiter import Candidate, Tier, dispatch
from arbiter.isolate import Isolated
from arbiter.regions import Matmul
from arbiter.tune import tune_region


class Good(Candidate):
    name, target, op, tier = "good", "cpu", "matmul", Tier.EMITTED

    def run(self, region, params):
        out = region.alloc_out()
        np.matmul(region.a, region.b, out=out)
        return out


class Segfaults(Good):
    name, tier = "segfaults", Tier.HAND_TUNED

    def run(self, region, params):
        ctypes.string_at(0)  # read address 0: SIGSEGV


class Hangs(Good):
    name, tier = "hangs", Tier.HAND_TUNED

    def run(self, region, params):
        time.sleep(3600)


class Hog(Good):
    name, tier = "hog", Tier.HAND_TUNED

    def run(self, region, params):
        np.ones(1 << 34, dtype=np.uint8)  # 16 GiB, over the child's address-space limit


class CrashesWhenTimed(Good):
    """Passes the gate (its probes and repeats at 16x16x16: ``limit`` calls), then segfaults on the next call,
    inside timing."""

    name, tier = "crashes_when_timed", Tier.HAND_TUNED
    calls = 0

    def __init__(self, limit: int = 25):
        self.limit = limit  # an instance attribute: pickled to the child process with the candidate

    def run(self, region, params):
        type(self).calls += 1
        if type(self).calls > self.limit:
            ctypes.string_at(0)
        return super().run(region, params)


def test_crashing_hanging_and_hogging_candidates_fail_alone(only_candidates):
    from arbiter.verify import CONTEXT_RUNS, REPEATS, probe_plan

    region = Matmul.random("cpu", "float32", {"m": 16, "n": 16, "k": 16})
    only_candidates("cpu", "matmul", Good(), Segfaults(), Hangs(), Hog(),
                    CrashesWhenTimed(len(probe_plan(region)) + REPEATS + CONTEXT_RUNS))
    decision = tune_region(region, dispatch.store(), runner=Isolated(timeout_s=5, memory_bytes=4 << 30),
                           budget_s=0.5)
    reasons = {r.candidate.name: (r.status, r.reason) for r in decision.rows}
    assert reasons["segfaults"][0] == "failed" and "SIGSEGV" in reasons["segfaults"][1]
    assert reasons["hangs"][0] == "failed" and "timed out" in reasons["hangs"][1]
    assert reasons["hog"][0] == "failed" and "memory" in reasons["hog"][1].lower()
    assert reasons["crashes_when_timed"][0] == "failed" and "crashed while timed" in reasons["crashes_when_timed"][1]
    assert decision.winner.candidate.name == "good"
    # the failure is persisted: a later decision in this process never picks it
    again = dispatch.store().load_solution(region.key.id, decision.env.fingerprint)
    assert again.candidate_name == "good"


def test_isolated_results_match_in_process_ones(only_candidates):
    only_candidates("cpu", "matmul", Good())
    region = Matmul.random("cpu", "float32", {"m": 33, "n": 9, "k": 17})
    verdict = Isolated(timeout_s=30).verify(Good(), {}, region)
    assert verdict.passed and verdict.probes[0] == "33x9x17"
    m = Isolated(timeout_s=30).measure(Good(), {}, region, time_cap_s=0.1)
    assert m.reps >= 5 and m.median_s > 0


def test_a_candidate_that_cannot_be_sent_to_a_child_is_reported():
    class Local(Good):  # defined in a function: not importable, so not picklable
        name = "local"

    verdict = Isolated(timeout_s=30).verify(Local(), {}, Matmul.random("cpu", "float32", {"m": 4, "n": 4, "k": 4}))
    assert not verdict.passed and "module level" in verdict.reason
