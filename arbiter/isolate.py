"""Crash isolation: every solution with ``arbiter tune --isolate``, and every plug-in's gate by default
(``plugin_verify``).

Verification and timing run in a child process with a time limit (and, optionally, an address-space limit),
one solution at a time; the child is kept warm for the next and started again after a crash or a time-out. A
candidate that segfaults, hangs, or exhausts memory is recorded as failed with that reason, and tuning goes on
with the rest.

The child is spawned (a fresh interpreter: forking after OpenMP or CUDA
initialised is unsafe). It rebuilds the region from its description (op,
target, dtype, dims, attributes, layout) and receives the candidate pickled,
which works for any candidate class defined at module level (built-in, plug-in,
or a user's module: unpickling imports it).
"""
from __future__ import annotations

import atexit
import math
import multiprocessing as mp
import os
import pickle
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

from arbiter.store import Verdict
from arbiter.verify import budget_of


@dataclass(frozen=True)
class Crash:
    reason: str


def _describe(region) -> dict:
    return {"op": region.op, "target": region.target, "dtype": region.dtype, "dims": dict(region.dims),
            "attrs": dict(region.attrs), "layout": region.layout, "extra": region.runtime_args()}


def _rebuild(desc: dict):
    import numpy as np

    from arbiter.ops import op_kind

    kind = op_kind(desc["op"])
    region = kind.region_type.random(desc["target"], desc["dtype"], desc["dims"], desc["attrs"], desc["layout"],
                                     np.random.default_rng(0), **desc["extra"])
    if set(desc["attrs"]) - set(dict(region.attrs)):
        # attributes the random instance's operands do not give (the caller's operand layouts, a legal in-place
        # out=): the gate probes from the key's attributes, so the child's region carries the caller's
        from arbiter.keys import ProblemKey

        k = region.key
        region.attrs = tuple(desc["attrs"].items())
        region.key = ProblemKey.make(k.target, k.op, k.dtype, k.layout, region.attrs, k.bucket)
    # The caller's consent to looser accuracy is part of the key: the child's region keeps it.
    return region.allow_looser() if desc["attrs"].get("accuracy") == "looser" else region


def _job(job, desc, candidate, params, kwargs):
    from arbiter.timing import measure
    from arbiter.verify import verify

    region = _rebuild(desc)
    if job == "verify":
        return verify(candidate, params, region)
    # Timed warm, as in the caller's process: a first, short measurement takes the cold costs (imports, a
    # library's thread pool and handles, first-touch pages) and is thrown away. Before, a fresh child per
    # solution timed torch_softmax at 7,944 us against 7.9 us in process, and the winner changed (issue 40 item 7).
    measure(candidate, params, region, **{**kwargs, "time_cap_s": min(0.2, kwargs.get("time_cap_s", 1.0))})
    return measure(candidate, params, region, **kwargs)


def _worker(conn, memory_bytes):
    """The child's loop: one job at a time from ``conn`` until it closes; a job's exception is its answer."""
    if memory_bytes:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    while True:
        try:
            args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            result = _job(*args)
        except MemoryError:
            result = Crash("exhausted memory (MemoryError)")
        except BaseException as exc:  # report anything, never hang the parent
            result = Crash(f"raised {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")
        conn.send(result)


class Isolated:
    """Runs ``verify`` and ``measure`` of one solution at a time in a child process, kept for the next solution (a
    warm process, as the caller's is) and started again after one that crashed or ran past ``timeout_s``."""

    def __init__(self, timeout_s: float = 120.0, memory_bytes: int | None = None):
        self.timeout_s = timeout_s
        self.memory_bytes = memory_bytes
        self._proc: Any = None  # the child (a SpawnProcess) and its end of the pipe, while one runs
        self._conn: Any = None
        self._lock = threading.Lock()  # one job at a time per child

    def _start(self):
        ctx = mp.get_context("spawn")  # a fresh interpreter: forking after OpenMP or CUDA initialised is unsafe
        parent, child = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=_worker, args=(child, self.memory_bytes), daemon=True)
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent

    def _stop(self):
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(5)
        self._proc = self._conn = None

    def close(self):
        with self._lock:
            self._stop()

    def _call(self, job, candidate, params, region, kwargs=None):
        with self._lock:
            if self._proc is None or not self._proc.is_alive():
                self._start()
            assert self._proc is not None and self._conn is not None
            try:
                self._conn.send((job, _describe(region), candidate, params, kwargs or {}))
            except (pickle.PicklingError, AttributeError, TypeError) as exc:
                return Crash(f"cannot be sent to a child process ({exc}); define the candidate class at module level")
            except (BrokenPipeError, OSError):
                self._stop()
                return Crash("the child process ended before it took the job")
            deadline = time.monotonic() + self.timeout_s
            while True:
                if self._conn.poll(0.05):
                    try:
                        return self._conn.recv()
                    except EOFError:
                        break
                if not self._proc.is_alive():
                    if self._conn.poll(0):
                        continue
                    break
                if time.monotonic() > deadline:
                    self._stop()
                    return Crash(f"timed out after {self.timeout_s:g} s (killed)")
            self._proc.join(5)
            code = self._proc.exitcode
            self._proc = self._conn = None
            if code is not None and code < 0:
                try:
                    sig = signal.Signals(-code).name
                except ValueError:
                    sig = f"signal {-code}"
                return Crash(f"crashed with {sig}")
            return Crash(f"child exited with status {code} and no result")

    def verify(self, candidate, params, region) -> Verdict:
        start = time.perf_counter()
        result = self._call("verify", candidate, params, region)
        if isinstance(result, Crash):
            budget, looser = budget_of(candidate, region.op, region.dtype)
            return Verdict(False, f"isolated: {result.reason}", math.nan, math.inf, (), budget, looser,
                           time.perf_counter() - start)
        return result

    def measure(self, candidate, params, region, **kwargs):
        """A Measurement, or a Crash saying why timing failed."""
        return self._call("measure", candidate, params, region, kwargs)


# --- plug-ins isolated by default ------------------------------------------------------------------------------
PLUGIN_TIMEOUT_ENV = "ARBITER_PLUGIN_TIMEOUT_S"
ISOLATE_PLUGINS_ENV = "ARBITER_ISOLATE_PLUGINS"
PLUGIN_TIMEOUT_S = 120.0
_plugins: Isolated | None = None
_plugins_lock = threading.Lock()


def plugin_timeout() -> float:
    """``$ARBITER_PLUGIN_TIMEOUT_S`` (a finite number > 0; default 120 s): how long a plug-in's gate may run."""
    text = os.environ.get(PLUGIN_TIMEOUT_ENV, "").strip()
    if not text:
        return PLUGIN_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{PLUGIN_TIMEOUT_ENV}={text!r} is not a number of seconds > 0 (default {PLUGIN_TIMEOUT_S:g})")
    return value


def plugin_verify(candidate, params, region) -> Verdict:
    """The gate of a plug-in's candidate (``Candidate.plugin``) when the caller chose no verifier: in a child
    process shared by the plug-ins' gates, killed past ``plugin_timeout()``, so a hanging or crashing plug-in
    fails its verdict ("isolated: timed out after 120 s", "isolated: crashed with SIGSEGV") where it took its
    caller with it before. ``ARBITER_ISOLATE_PLUGINS=0`` gates them in this process (a plug-in one trusts, or a
    debugger)."""
    from arbiter.verify import verify

    if os.environ.get(ISOLATE_PLUGINS_ENV, "").strip().lower() in ("0", "false", "no", "off"):
        return verify(candidate, params, region)
    global _plugins
    with _plugins_lock:
        if _plugins is None:
            _plugins = Isolated(timeout_s=plugin_timeout())
            atexit.register(_plugins.close)
        runner = _plugins
    return runner.verify(candidate, params, region)
