"""Crash isolation for tuning (``arbiter tune --isolate``).

Each candidate's verification and timing run in a child process with a time
limit (and, optionally, an address-space limit). A candidate that segfaults,
hangs, or exhausts memory is recorded as failed with that reason, and tuning
goes on with the rest.

The child is spawned (a fresh interpreter: forking after OpenMP or CUDA
initialised is unsafe). It rebuilds the region from its description (op,
target, dtype, dims, attributes, layout) and receives the candidate pickled,
which works for any candidate class defined at module level (built-in, plug-in,
or a user's module: unpickling imports it).
"""
from __future__ import annotations

import math
import multiprocessing as mp
import pickle
import signal
import time
import traceback
from dataclasses import dataclass

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


def _child(conn, job, desc, candidate, params, kwargs, memory_bytes):
    try:
        if memory_bytes:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        from arbiter.timing import measure
        from arbiter.verify import verify

        region = _rebuild(desc)
        result = verify(candidate, params, region) if job == "verify" else measure(candidate, params, region, **kwargs)
        conn.send(result)
    except MemoryError:
        conn.send(Crash("exhausted memory (MemoryError)"))
    except BaseException as exc:  # report anything, never hang the parent
        conn.send(Crash(f"raised {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"))
    finally:
        conn.close()


class Isolated:
    """Runs ``verify`` and ``measure`` of one solution in a child process."""

    def __init__(self, timeout_s: float = 120.0, memory_bytes: int | None = None):
        self.timeout_s = timeout_s
        self.memory_bytes = memory_bytes

    def _call(self, job, candidate, params, region, kwargs=None):
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(child, job, _describe(region), candidate, params,
                                                kwargs or {}, self.memory_bytes), daemon=True)
        try:
            proc.start()
        except (pickle.PicklingError, AttributeError, TypeError) as exc:
            return Crash(f"cannot be sent to a child process ({exc}); define the candidate class at module level")
        child.close()
        deadline = time.monotonic() + self.timeout_s
        result = None
        while result is None:
            if parent.poll(0.05):
                try:
                    result = parent.recv()
                except EOFError:
                    result = None
                    break
            elif not proc.is_alive():
                if parent.poll(0):
                    continue
                break
            elif time.monotonic() > deadline:
                proc.kill()
                proc.join()
                return Crash(f"timed out after {self.timeout_s:g} s (killed)")
        proc.join(5)
        if result is None:
            code = proc.exitcode
            if code is not None and code < 0:
                try:
                    sig = signal.Signals(-code).name
                except ValueError:
                    sig = f"signal {-code}"
                return Crash(f"crashed with {sig}")
            return Crash(f"child exited with status {code} and no result")
        return result

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
