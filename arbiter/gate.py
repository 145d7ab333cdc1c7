"""The gate's versions: the core's ``GATE_RULES_VERSION`` and each op kind's own ``OpKind.gate_version``, bumped
by hand whenever what ``arbiter.verify`` decides changes. A candidate's identity covers its own op's pair
(``arbiter.candidates``), so a bump takes new verdicts where it applies and nowhere else (issue 41 item 2):

- the core's number, for what every op shares: the probe plan and the shared families (``ops/family.py``),
  the comparison, the dtype budgets, what a key carries. A bump re-gates every op.
- an op's number (``arbiter/ops/<op>/__init__.py``), for what is its own: its oracle, budgets, probe families,
  large-shape check. A bump re-gates that op's verdicts only; adding an op kind re-gates nothing else.

Explicit numbers, not digests of the gate's source (issue 27 item 2): moving code between modules or editing a
comment re-gates nothing. ``tests/test_gate_version.py`` holds the numbers to their word: golden verdicts on
fixed seeds (``tests/gate_golden.json``), generated from every op kind's suite plus the known-wrong candidates,
fail when an op's verdicts change under the same numbers and say which number to bump; then
``PYTHONPATH=. python tests/gate_golden.py --write`` regenerates the file.

An op kind a plug-in registers (``register_op``) brings its own oracle, outside this project: its source is
digested into that op's version too, so a changed plug-in oracle takes new verdicts of its own op.

It sits below the candidates and the gate both.
"""
from __future__ import annotations

import functools
import hashlib
import inspect

from arbiter.ops import OPS

# Bump on a change to what the gate decides for every op; then regenerate tests/gate_golden.json (see above).
GATE_RULES_VERSION = 10  # 9: size classes inside a bucket, 64-byte aligned probes; 10: four concurrent callers
# meeting just before the candidate runs
PROJECT = "arbiter."


@functools.cache
def _oracle_text(oracle) -> str:
    try:
        return inspect.getsource(oracle)
    except (OSError, TypeError):
        return getattr(oracle, "__qualname__", repr(oracle))


def op_rules(op: str) -> str:
    """``<op>-<its gate_version>``, plus a digest of its oracle when the op kind comes from outside the project
    (a plug-in); ``<op>-?`` for an op no kind is registered for."""
    kind = OPS.get(op)
    if kind is None:
        return f"{op}-?"
    own = f"{op}-{kind.gate_version}"
    if (kind.oracle.__module__ or "").startswith(PROJECT):
        return own
    return f"{own}+{hashlib.sha256(_oracle_text(kind.oracle).encode()).hexdigest()[:12]}"


def gate_version(op: str | None = None) -> str:
    """``rules-<GATE_RULES_VERSION>``, and with ``op`` that op's own rules: ``rules-7/softmax-1``. A verdict of
    an ``op`` candidate is valid under ``gate_version(op)`` only."""
    core = f"rules-{GATE_RULES_VERSION}"
    return core if op is None else f"{core}/{op_rules(op)}"
