"""A new target is one target module and one candidates folder (issue 27 item 4).

``cpu2`` is a toy target on NumPy memory with its own array type, added through the public hooks only:
``arbiter.targets.register`` (its ``Target`` subclass: arrays, timer, environment and the hook answers) and
``arbiter.targets.register_array_type``; its candidates are registered as any plug-in's are. A key on it is
gated, tuned, stored and served without any core module knowing its name.
"""
from __future__ import annotations

import numpy as np
import pytest

import arbiter
from arbiter import Candidate, Tier, dispatch, targets
from arbiter.regions import Matmul
from arbiter.select import Status
from arbiter.targets import Target, Timer
from arbiter.tune import tune_region


class Cpu2Array(np.ndarray):
    """The toy target's own array type: NumPy memory under another type, so region construction finds ``cpu2``."""


class Cpu2Target(Target):
    """What a target module holds: arrays, availability, timer, environment, and the hooks' answers."""

    name = "cpu2"
    host_clock = True  # timed on the host clock, as the CPU is
    host_cores = True
    captures_graphs = False

    def available(self):
        return True

    def owns(self, array):
        return isinstance(array, Cpu2Array)

    def to_host(self, array):
        return np.asarray(array)

    def from_host(self, array, dtype, order="C"):
        out = np.asarray(array).astype(dtype, copy=False)
        return (np.asfortranarray(out) if order == "F" else np.ascontiguousarray(out)).view(Cpu2Array)

    def full(self, shape, value, dtype):
        return np.full(shape, value, dtype=dtype).view(Cpu2Array)

    def empty(self, shape, dtype):
        return np.empty(shape, dtype=dtype).view(Cpu2Array)

    def timer(self):
        return Timer()

    def environment(self):
        return {"device": "toy", "numpy": np.__version__}


class Product(Candidate):
    """What the target's candidates folder holds: a right candidate..."""

    name, target, op, tier = "cpu2_matmul", "cpu2", "matmul", Tier.EMITTED
    calls = 0

    def run(self, region, params):
        type(self).calls += 1
        out = region.alloc_out()
        np.matmul(region.a, region.b, out=out)
        return out


class Skewed(Candidate):
    """...and a wrong one, ranked ahead of it, that the gate must fail."""

    name, target, op, tier = "cpu2_skewed", "cpu2", "matmul", Tier.HAND_TUNED

    def run(self, region, params):
        out = region.alloc_out()
        np.matmul(region.a, region.b, out=out)
        out[0, 0] += 1.0
        return out


@pytest.fixture
def cpu2(only_candidates):
    target = targets.register(Cpu2Target())
    targets.register_array_type(Cpu2Array, "cpu2", target.adopt)
    only_candidates("cpu2", "matmul", Product(), Skewed())
    try:
        yield target
    finally:
        targets._targets.pop("cpu2", None)
        targets._by_type.pop(Cpu2Array, None)


def test_a_registered_target_is_known_by_name(cpu2):
    assert targets.get("cpu2") is cpu2 and "cpu2" in targets.names()
    with pytest.raises(ValueError, match="unknown target 'cpu3'.*cpu2"):
        targets.get("cpu3")
    with pytest.raises(TypeError, match="Target instance"):
        targets.register("cpu3")  # type: ignore[arg-type]


def test_a_key_on_a_new_target_is_gated_tuned_and_served(cpu2):
    region = Matmul.random("cpu2", "float32", {"m": 24, "n": 16, "k": 8})
    assert region.target == "cpu2" and isinstance(region.a, Cpu2Array)

    decision = tune_region(region, dispatch.store())
    status = {row.candidate.name: row.status for row in decision.rows}
    assert status["cpu2_skewed"] == Status.FAILED  # gated: the wrong candidate never serves
    assert status["cpu2_matmul"] == Status.PASSED
    assert decision.winner.candidate.name == "cpu2_matmul"
    assert decision.env.target == "cpu2"
    stored = dispatch.store().load_solution(region.key.id, decision.env.fingerprint)
    assert stored.candidate_name == "cpu2_matmul"

    a, b = region.a, region.b  # the caller's own arrays: the target is found from their type
    before = Product.calls
    y = arbiter.run_arbitrated("matmul", Matmul(a, b))
    assert Product.calls == before + 1  # served by the stored winner
    np.testing.assert_allclose(np.asarray(y), np.asarray(a) @ np.asarray(b), rtol=1e-5)


CORE = ("tune.py", "verify.py", "regions.py", "graphs.py", "oracles/__init__.py", "parallel.py", "dispatch.py",
        "audit.py", "torch.py", "candidates/__init__.py")
BRANCH = (r"""\btarget\s*(==|!=|\bin\b|\bnot in\b)\s*\(?\s*["'](cpu|nvidia|rocm)["']""",  # region.target == "cpu"
          r"""targets\.get\(\s*["'](cpu|nvidia|rocm)["']\s*\)""",  # targets.get("nvidia").<its own attribute>
          r"""from arbiter\.targets\.(cpu|nvidia|rocm) import""")  # a target module's helper, by name


def test_the_core_asks_its_target_and_names_none():
    """Where the core branched on a target's name it now asks the region's target (``Target`` hooks)."""
    import pathlib
    import re

    root = pathlib.Path(arbiter.__file__).parent
    found = [f"{name}: {line.strip()}" for name in CORE for line in (root / name).read_text().splitlines()
             if any(re.search(pattern, line) for pattern in BRANCH)]
    assert found == []
