"""The gate's own version: ``GATE_RULES_VERSION``, bumped by hand whenever the rules ``arbiter.verify`` applies
change what it decides (the probe plan and catalogue, the budgets, the comparison, an op's oracle, what a key
carries). A candidate's identity covers it (``arbiter.candidates``), so a bump takes new verdicts everywhere.

An explicit number, not a digest of the gate's source (issue 27 item 2): moving code between modules or
editing a comment re-gates nothing. ``tests/test_gate_version.py`` holds the number to its word: a golden set
of verdicts (reasons, probes, budgets, rounded errors) on fixed seeds over the NumPy built-ins and the known-wrong
candidates (``tests/gate_golden.json``) fails when the gate decides differently under the same number; after a
bump, ``PYTHONPATH=. python tests/gate_golden.py --write`` regenerates it.

An op kind a plug-in registers (``register_op``) brings its own oracle, outside this project: its source is
digested into the version instead, so a changed plug-in oracle takes new verdicts too.

It sits below the candidates and the gate both.
"""
from __future__ import annotations

import functools
import hashlib
import inspect

from arbiter.ops import OPS

# Bump on any change to what the gate decides; then regenerate tests/gate_golden.json (see above).
GATE_RULES_VERSION = 7
PROJECT = "arbiter."


@functools.cache
def _oracle_text(oracle) -> str:
    try:
        return inspect.getsource(oracle)
    except (OSError, TypeError):
        return getattr(oracle, "__qualname__", repr(oracle))


def gate_version() -> str:
    """``rules-<GATE_RULES_VERSION>``, plus a digest of the oracles of op kinds registered from outside the
    project (plug-ins), when there are any."""
    foreign = sorted((name, _oracle_text(k.oracle)) for name, k in OPS.items()
                     if not (k.oracle.__module__ or "").startswith(PROJECT))
    if not foreign:
        return f"rules-{GATE_RULES_VERSION}"
    digest = hashlib.sha256(repr(foreign).encode()).hexdigest()[:12]
    return f"rules-{GATE_RULES_VERSION}+{digest}"
