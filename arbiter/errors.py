"""Every error the arbiter raises on purpose. Each names what is at fault."""
from __future__ import annotations

import difflib
from collections.abc import Iterable


def unknown(what: str, value: object, known: Iterable[str], known_as: str = "known:") -> str:
    """"unknown dtype 'flaot32' (did you mean 'float32'?); known: ...": the words of every refusal of a name, with
    the closest known name when one is close (a typo), so each says what would be accepted (``known_as``: the words
    before the list, e.g. "matmul takes")."""
    known = sorted(known)
    close = difflib.get_close_matches(str(value), known, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown {what} {value!r}{hint}; {known_as} {', '.join(known) or 'none'}"

class ArbiterError(Exception):
    """Base of all kernel-arbiter errors."""


class RegionError(ArbiterError, ValueError):
    """A region's operands or attributes are invalid; ``argument`` names the one at fault."""

    def __init__(self, argument: str, message: str):
        self.argument = argument
        super().__init__(f"{argument}: {message}")


class NoCandidateError(ArbiterError, LookupError):
    """No candidate may serve a problem key; the message lists every candidate and why."""

    def __init__(self, key, rows):
        self.key = key
        self.rows = rows
        lines = [f"no candidate can serve {key}:"]
        if not rows:
            lines.append("  (no candidate is registered for this target and op)")
        for row in rows:
            lines.append(f"  {row.label:<40} {row.status:<9} {row.reason}")
        super().__init__("\n".join(lines))


class CaptureMissError(ArbiterError, LookupError):
    """A key not yet decided in this process was dispatched while its stream was being captured into a CUDA
    graph. Deciding it runs the F4 gate (and, under policy tune, timing), which synchronise the device and
    cannot be captured: run the sequence once before capturing (``arbiter.capture`` does)."""

    def __init__(self, key, why: str | None = None):
        self.key = key
        if why is not None:  # a decided key whose winner cannot be captured and has no capturable stand-in
            super().__init__(f"{key}: {why}")
            return
        super().__init__(f"{key}: not decided before CUDA-graph capture; deciding it gates (and may time) "
                         "solutions, which synchronises the device and cannot be captured. Call the sequence "
                         "once before capturing it (arbiter.capture runs it first), or dispatch it outside capture")


class StrictMissError(ArbiterError, LookupError):
    """Policy ``strict``: the key has no stored solution it can serve, and strict forbids deciding now.

    ``why``: why a stored solution cannot be served here (its winner not registered, unavailable, failing the
    gate); None when there is none.
    """

    def __init__(self, key, why: str | None = None):
        self.key = key
        self.why = why
        if why is None:
            super().__init__(f"policy 'strict': no stored solution for {key}; "
                             f"run `arbiter tune` for it, or dispatch with policy='tier'")
        else:
            fix = ("load the plug-in that registers it (ARBITER_PLUGINS), " if "no longer registered" in why else "")
            super().__init__(f"policy 'strict': {key} has a stored solution, but it cannot be served here: {why}; "
                             f"{fix}re-tune the key with `arbiter tune`, or dispatch with policy='tier'")


class RegistryError(ArbiterError, RuntimeError):
    """The persistent registry cannot be used; the message names the file and the fix."""


class UnwritableRegistry(RegistryError):
    """The registry path cannot be written (``open_default`` degrades on this one). ``readable``: the file
    exists and this process may read it (it is then served read-only). Here, not in ``store.diagnostics``, so that
    dispatch can catch it without importing SQLAlchemy."""

    def __init__(self, message: str, readable: bool = False):
        super().__init__(message)
        self.readable = readable


class WorkersDied(ArbiterError, RuntimeError):
    """``tune --workers``: the worker processes keep dying (or one reported it cannot start); the message
    says how many were started and how to see why."""


class TargetUnavailable(ArbiterError, RuntimeError):
    """A target cannot run anything here; ``reason`` names the first gate that failed (no CuPy, no device,
    the NVRTC probe, no libamdhip64, ...), on one line."""

    def __init__(self, target: str, reason: str):
        self.target = target
        self.reason = " ".join(str(reason).split())  # a compiler log or dlopen message can span lines
        super().__init__(f"target {target} is unavailable: {self.reason}")
