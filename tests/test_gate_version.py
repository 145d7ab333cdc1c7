"""The gate's rules version (issue 27 item 2): an explicit number, not a digest of source files. Moving code or
editing a comment re-gates nothing; a change to what the gate decides must bump the number (the golden verdicts
of ``tests/gate_golden.py`` hold it to that)."""
import json
import linecache

import pytest

import gate_golden
from arbiter import gate
from arbiter.candidates import REGISTRY
from arbiter.ops import OPS, OpKind

REGENERATE = "PYTHONPATH=. python tests/gate_golden.py --write"


def _diff(golden: dict, now: dict) -> list[str]:
    lines = []
    for section in ("budgets", "verdicts"):
        old, new = golden.get(section, {}), now[section]
        for k in sorted(set(old) | set(new)):
            if old.get(k) != new.get(k):
                lines.append(f"  {section} {k}:\n    golden {old.get(k)}\n    now    {new.get(k)}")
    return lines


def test_the_gate_decides_as_its_rules_version_says():
    golden = json.loads(gate_golden.GOLDEN.read_text())
    now = gate_golden.current()
    if now["version"] != golden["version"]:
        pytest.fail(f"GATE_RULES_VERSION is {now['version']} but tests/gate_golden.json records "
                    f"{golden['version']}: regenerate it with `{REGENERATE}`")
    changed = _diff(golden, now)
    if changed:
        pytest.fail(f"the gate decides differently under rules version {now['version']}: bump GATE_RULES_VERSION in "
                    f"arbiter/gate.py (every stored verdict is taken again) and regenerate the golden file with "
                    f"`{REGENERATE}`. Changed:\n" + "\n".join(changed[:20]))


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
    assert cand.identity() != before


def test_a_plugin_ops_oracle_is_digested_into_the_version(monkeypatch):
    base = gate.gate_version()

    def my_oracle(region):  # defined outside the project: its source is the rule
        return region.x

    monkeypatch.setitem(OPS, "my_op", OpKind("my_op", object, my_oracle))
    with_plugin = gate.gate_version()
    assert with_plugin.startswith(base + "+")
    gate._oracle_text.cache_clear()
    monkeypatch.setitem(OPS, "my_op", OpKind("my_op", object, lambda region: 2 * region.x))
    assert gate.gate_version() not in (base, with_plugin)
