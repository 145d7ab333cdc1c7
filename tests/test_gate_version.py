"""The gate's rules versions (issues 27 item 2, 41 item 2): explicit numbers, the core's and each op kind's, not
digests of source files. Moving code or editing a comment re-gates nothing; a change to what the gate decides
must bump the number it belongs to (the golden verdicts of ``tests/gate_golden.py`` hold them to that), and an
op's own bump re-gates that op only."""
import dataclasses
import json
import linecache

import pytest

import gate_golden
from arbiter import gate
from arbiter.candidates import REGISTRY
from arbiter.ops import OPS, OpKind


def test_the_gate_decides_as_its_rules_versions_say():
    problems = gate_golden.check(json.loads(gate_golden.GOLDEN.read_text()), gate_golden.current())
    if problems:
        pytest.fail("\n".join(problems))


def test_a_comment_edited_in_the_gates_modules_regates_nothing(monkeypatch):
    cand = REGISTRY.get("numpy_softmax", "cpu", "softmax")
    version, identity = gate.gate_version(), cand.identity()
    real = linecache.getlines

    def edited(filename, module_globals=None):  # every project file read as if a comment had been added
        lines = real(filename, module_globals)
        return lines + ["# a comment\n"] if "/arbiter/" in filename and "candidates" not in filename else lines

    monkeypatch.setattr(linecache, "getlines", edited)
    monkeypatch.setattr(linecache, "checkcache", lambda *a: None)
    monkeypatch.setattr(gate, "_version", None, raising=False)  # a new process: nothing cached (a digest was)
    assert gate.gate_version() == version
    assert cand.identity() == identity


def test_a_version_bump_takes_new_verdicts(monkeypatch):
    cand = REGISTRY.get("numpy_softmax", "cpu", "softmax")
    before = cand.identity()
    monkeypatch.setattr(gate, "GATE_RULES_VERSION", gate.GATE_RULES_VERSION + 1)
    assert gate.gate_version() == f"rules-{gate.GATE_RULES_VERSION}"
    assert gate.gate_version("softmax") == f"rules-{gate.GATE_RULES_VERSION}/softmax-{OPS['softmax'].gate_version}"
    assert cand.identity() != before


def test_an_ops_own_bump_regates_that_op_only(monkeypatch):
    """Issue 41 item 2: a change to one op's rules takes new verdicts of that op, and every other op's stay."""
    soft, mm = REGISTRY.get("numpy_softmax", "cpu", "softmax"), REGISTRY.get("numpy_matmul", "cpu", "matmul")
    before = soft.identity(), mm.identity()
    bumped = dataclasses.replace(OPS["softmax"], gate_version=OPS["softmax"].gate_version + 1)
    monkeypatch.setitem(OPS, "softmax", bumped)
    assert soft.identity() != before[0] and mm.identity() == before[1]


def test_the_golden_check_names_the_op_to_bump():
    """A change in one op's records under the same versions names that op's number; a new kind asks for the
    file to be regenerated; every op changed names the core's number."""
    golden = json.loads(gate_golden.GOLDEN.read_text())
    now = json.loads(json.dumps(golden))
    [cid] = [c for c, v in now["verdicts"].items() if v["op"] == "softmax"][:1]
    now["verdicts"][cid]["passed"] = not now["verdicts"][cid]["passed"]
    [line] = gate_golden.check(golden, now)
    assert "op 'softmax'" in line and "arbiter/ops/softmax/__init__.py" in line and "--write" in line
    now["version"]["ops"]["softmax"] += 1
    assert "gate_version is" in gate_golden.check(golden, now)[0]
    now["version"]["ops"]["rowsum"] = 1
    assert any("'rowsum' is not in" in p for p in gate_golden.check(golden, now))
    every = json.loads(json.dumps(golden))
    for v in every["verdicts"].values():
        v["probes"] = v["probes"] + ["new"]
    assert "GATE_RULES_VERSION" in gate_golden.check(golden, every)[0]


def test_a_plugin_ops_oracle_is_digested_into_the_version(monkeypatch):
    base = gate.gate_version()

    def my_oracle(region):  # defined outside the project: its source is the rule
        return region.x

    monkeypatch.setitem(OPS, "my_op", OpKind("my_op", object, my_oracle))
    with_plugin = gate.gate_version("my_op")
    assert with_plugin.startswith(base + "/my_op-1+")
    assert gate.gate_version() == base  # the others unchanged
    assert gate.gate_version("softmax") == f"{base}/softmax-{OPS['softmax'].gate_version}"
    gate._oracle_text.cache_clear()
    monkeypatch.setitem(OPS, "my_op", OpKind("my_op", object, lambda region: 2 * region.x))
    assert gate.gate_version("my_op") not in (base, with_plugin)
