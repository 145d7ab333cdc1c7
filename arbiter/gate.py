"""The gate's own version: a digest of the rules ``arbiter.verify`` applies (its module, the probe catalogue,
the budgets, the ops and every op's oracle). A candidate's identity covers it (``arbiter.candidates``), so a
change to the gate takes new verdicts.

It sits below the candidates and the gate both: it reads the gate's module files by name rather than importing
``arbiter.verify`` (which imports the candidates).
"""
from __future__ import annotations

import hashlib
import importlib.util
import linecache

from arbiter.ops import OPS

GATE_MODULES = ("arbiter.verify", "arbiter.probes", "arbiter.oracles", "arbiter.oracles.budgets",
                "arbiter.ops", "arbiter.keys")
_version: str | None = None


def _source(name: str) -> str | None:
    """The text of module ``name``'s file, as ``inspect.getsource`` reads it; None where it has no source file."""
    spec = importlib.util.find_spec(name)
    origin = getattr(spec, "origin", None)
    if not origin or not origin.endswith(".py"):
        return None
    linecache.checkcache(origin)
    return "".join(linecache.getlines(origin)) or None


def gate_version() -> str:
    """A digest of the gate's rules: ``GATE_MODULES`` and every op's oracle module."""
    global _version
    if _version is None:
        h = hashlib.sha256()
        for name in list(GATE_MODULES) + sorted({k.oracle.__module__ for k in OPS.values()}):
            text = _source(name)
            h.update(name.encode() if text is None else text.encode())
        _version = h.hexdigest()[:12]
    return _version
