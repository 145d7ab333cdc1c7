"""The gate's cost at large keys (issue 25): the real shape runs once, the second real-shape probe at a reduced
shape that keeps the caller's other dimensions, tails and layout; what the gate catches there stays caught."""
from __future__ import annotations

import math

import numpy as np
import pytest

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
from gpu_support import requires_gpu


def test_a_large_key_runs_its_real_shape_once():
    region = Matmul.random("cpu", "float32", {"m": 2048, "n": 2048, "k": 2048})
    plan = probe_plan(region)
    real = dict(region.dims)
    assert sum(p.dims == real for p in plan) == 1 and plan[0].dims == real
    second = plan[1]
    assert second.family.name == "mixed_rows" and second.vary_scalars
    assert second.dims == {"m": 128, "n": 2048, "k": 2048}  # n, k (inner loop, layout of b) the caller's
    assert not second.inside and second.fallback == corner_shapes(region)[0]  # a decliner meets it there


def test_a_small_key_still_runs_its_real_shape_twice():
    region = Matmul.random("cpu", "float32", {"m": 64, "n": 64, "k": 64})
    assert [p.dims for p in probe_plan(region)[:2]] == [dict(region.dims)] * 2


def test_the_reduced_dimension_keeps_its_tail_and_the_others_stay():
    region = Matmul.random("cpu", "float32", {"m": 8, "n": 8, "k": 8})
    dims = {"m": 3001, "n": 1000, "k": 777}
    cut = reduced(dims, region, SECOND_WORK_FACTOR * math.prod(dims.values()))
    assert cut["n"] == 1000 and cut["k"] == 777 and cut["m"] % TAIL_PERIOD == 3001 % TAIL_PERIOD
    assert math.prod(cut.values()) <= SECOND_WORK_FACTOR * math.prod(dims.values())
    # where the cut dimension cannot go low enough, it stops at its tail and the others still stay
    assert reduced({"m": 1024, "n": 1024, "k": 1024}, region, 1024 ** 3 / 16) == {"m": 128, "n": 1024, "k": 1024}


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


@pytest.mark.gpu
@requires_gpu
def test_device_draw_is_seeded_uniform_of_the_stated_scale():
    import cupy as cp

    from arbiter import targets

    target = targets.get("nvidia")
    for dtype, order in (("float16", "C"), ("float32", "F"), ("float64", "C")):
        a = target.device_draw((1000, 600), dtype, 0.5, np.random.default_rng(7), order)
        b = target.device_draw((1000, 600), dtype, 0.5, np.random.default_rng(7), order)
        assert isinstance(a, cp.ndarray) and a.shape == (1000, 600) and str(a.dtype) == dtype
        assert a.flags.f_contiguous if order == "F" else a.flags.c_contiguous
        assert bool(cp.array_equal(a, b))  # the gate's seed replays the draw
        host = cp.asnumpy(a).astype(np.float64)
        assert abs(host).max() <= 0.5 * math.sqrt(3.0) * 1.001 and abs(host.mean()) < 0.01
        assert abs(host.std() - 0.5) < 0.01


@pytest.mark.gpu
@requires_gpu
def test_a_large_nvidia_key_is_gated_with_the_real_shape_once():
    from arbiter.candidates import REGISTRY

    region = Matmul.random("nvidia", "float16", {"m": 1024, "n": 1024, "k": 1024})
    cand = next(c for c in REGISTRY.candidates(target="nvidia", op="matmul")
                if c.available() is True and c.applies_to(region) is True)
    verdict = verify(cand, (cand.param_space() or [{}])[0], region)
    assert verdict.passed, verdict.reason
    assert sum(p.split(" ")[0] == "1024x1024x1024" for p in verdict.probes) == 1
    # the reduced probe (or, for a candidate declining a shape outside the bucket, the family at its low corner)
    assert verdict.probes[1].startswith(("128x1024x1024 mixed_rows", "513x513x513 mixed_rows")), verdict.probes
