"""The gate's cost at large keys (issue 25): the real shape runs once, the second real-shape probe at a reduced
shape that keeps the caller's other dimensions, tails and layout; what the gate catches there stays caught."""
from __future__ import annotations

import math

import numpy as np

from arbiter.candidates import Candidate
from arbiter.regions import Matmul
from arbiter.verify import (
    EXTRA_WORK_FLOOR,
    SECOND_WORK_FACTOR,
    TAIL_PERIOD,
    corner_shapes,
    probe_plan,
    reduced,
    verify,
)


def test_a_large_key_runs_its_real_shape_once():
    region = Matmul.random("cpu", "float32", {"m": 2048, "n": 2048, "k": 2048})
    plan = probe_plan(region)
    real = dict(region.dims)
    assert sum(p.dims == real for p in plan) == 1 and plan[0].dims == real
    second = plan[1]
    assert second.family.name == "mixed_rows" and second.vary_scalars
    assert second.dims == {"m": 256, "n": 2048, "k": 2048}  # n, k (inner loop, layout of b) the caller's
    assert not second.inside and second.fallback == corner_shapes(region)[0]  # a decliner meets it there


def test_a_small_key_still_runs_its_real_shape_twice():
    region = Matmul.random("cpu", "float32", {"m": 64, "n": 64, "k": 64})
    assert [p.dims for p in probe_plan(region)[:2]] == [dict(region.dims)] * 2


def test_the_reduced_dimension_keeps_its_tail_and_the_others_stay():
    region = Matmul.random("cpu", "float32", {"m": 8, "n": 8, "k": 8})
    dims = {"m": 3001, "n": 1000, "k": 777}
    cut = reduced(dims, region, SECOND_WORK_FACTOR * math.prod(dims.values()))
    assert cut["n"] == 1000 and cut["k"] == 777 and cut["m"] % TAIL_PERIOD == 3001 % TAIL_PERIOD
    assert math.prod(cut.values()) <= SECOND_WORK_FACTOR * math.prod(dims.values()) < 3001 * 1000 * 777


class _MemoByShape(Candidate):
    """A matmul handing back its first result per shape (a stale output): served right only on first sight."""

    name, target, op = "memo_by_shape_matmul", "cpu", "matmul"

    def __init__(self):
        self.cache = {}

    def run(self, region, params):
        out = region.alloc_out()
        key = (region.a.shape, region.b.shape)
        if key not in self.cache:
            self.cache[key] = region.a.astype(np.float64) @ region.b.astype(np.float64)
        out[...] = self.cache[key]
        return out


def test_a_stale_output_still_fails_at_a_key_that_runs_its_real_shape_once():
    region = Matmul.random("cpu", "float32", {"m": 640, "n": 640, "k": 384})
    assert EXTRA_WORK_FLOOR < 640 * 640 * 384
    verdict = verify(_MemoByShape(), {}, region)
    assert not verdict.passed and "640x640x384" not in verdict.reason.split(":")[0], verdict.reason
