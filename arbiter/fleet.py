"""The fleet loop: claim a key, tune it under a renewed lease, commit its solution with the claim's done state.

``arbiter tune`` runs it whenever the registry is a database (``arbiter.store.claims`` has the claim rules):
hosts of one environment class sharing one registry split the keys between them, each tuned once, and a key
whose host died is taken over when its lease runs out. ``watch`` keeps claiming keys recorded since (polling
every ``poll_s``) until ``stop`` is set (SIGINT/SIGTERM) or ``until`` (a ``time.monotonic()`` deadline) passes.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from dataclasses import dataclass, field

from sqlalchemy import select

from arbiter.errors import NoCandidateError, RegistryError
from arbiter.keys import ProblemKey
from arbiter.store.claims import Claims, LostClaim
from arbiter.store.models import RecordedKey
from arbiter.suite import Problem


@dataclass(frozen=True)
class Claiming:
    """How ``work`` claims: ``recorded``: also the keys production recorded (not only those offered); ``force``:
    re-tune keys measured already; ``watch``: keep looking every ``poll_s`` for keys recorded since, until
    stopped; ``until``: a ``time.monotonic()`` deadline for starting keys."""

    recorded: bool = False
    force: bool = False
    watch: bool = False
    poll_s: float = 5.0
    until: float | None = None


@dataclass
class Outcome:
    tuned: list[str] = field(default_factory=list)  # key ids whose solution this host committed
    failed: list[str] = field(default_factory=list)  # no solution passed the gate (claim marked failed)
    lost: list[str] = field(default_factory=list)  # the lease ran out and another host took the key over
    skipped: list[str] = field(default_factory=list)  # claimed, but tuned already here (marked done)


class Stopped(BaseException):
    """SIGTERM or SIGHUP stopped a tuner mid-key (see ``stopping_on_signals``): a BaseException, like SIGINT's
    KeyboardInterrupt, so ``work`` gives the key's claim back on its way out."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def stopping_on_signals(signals=("SIGTERM", "SIGHUP")):
    """While the body runs, SIGTERM and SIGHUP raise ``Stopped`` in the main thread, so the claim in hand is
    released at once (before: only SIGINT released it; a terminated tuner stranded its key for a lease). After
    the body the handlers are restored and the signal raised again, so the process still ends by it (through
    the counter flusher's last flush). A signal set to be ignored stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise Stopped(signum)

    previous = {}
    for name in signals:
        signum = getattr(signal, name, None)
        if signum is not None and signal.getsignal(signum) not in (signal.SIG_IGN, None):
            previous[signum] = signal.signal(signum, stop)
    try:
        yield
    except Stopped as stopped:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        previous = {}
        os.kill(os.getpid(), stopped.signum)  # ends the process (default action), or hands it to its handler
        raise SystemExit(128 + stopped.signum) from None  # a handler that returned: still not a success
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def recorded_problem(claims: Claims, key_id: str, env: str) -> Problem:
    """The Problem of a recorded key, with the real dimensions production recorded for it under ``env``."""
    dims = claims.sql.transact(lambda conn: conn.execute(select(RecordedKey.dims).where(
        RecordedKey.key == key_id, RecordedKey.env == env)).scalar(), write=False)
    key = ProblemKey.parse(key_id)
    if dims is None:  # offered from a key list, not recorded: tune it at its bucket's bounds
        dims = {n: max(v, 1) for n, v in key.bucket}
    return Problem(key.op, dict(dims), key.dtype, dict(key.attrs))


def _outside_bucket(problem: Problem, key_id: str) -> str:
    """Why ``problem`` (a recorded key's dims) is not ``key_id``'s problem, or ""."""
    key = ProblemKey.parse(key_id)
    try:
        got = problem.key(key.target).id
    except Exception as exc:  # (dims no region accepts: say so as the key's failure)
        return f"its recorded dims {problem.dims} are not a problem of this key: {type(exc).__name__}: {exc}"
    if got != key_id:
        return f"its recorded dims {problem.dims} fall in key {got}, not this one; nothing tuned"
    return ""


def _fail(claims: Claims, key_id: str, env: str, why: str, outcome: Outcome, event) -> None:
    try:
        claims.finish(key_id, env, "failed", why[:1000])
    except LostClaim as exc:
        outcome.lost.append(key_id)
        event("lost", key_id, {"why": str(exc)})
        return
    outcome.failed.append(key_id)
    event("failed", key_id, {"decision": None, "error": why})


def work(store, claims: Claims, env: str, tune_key, how: Claiming = Claiming(), *,
         problems: dict[str, Problem] | None = None, stop: threading.Event | None = None, on_event=None) -> Outcome:
    """Claim and tune keys of ``env`` until none is left (or, with ``how.watch``, until ``stop``/``how.until``).

    ``problems``: key id -> Problem offered from the command line (claimed only among these unless
    ``how.recorded``). ``tune_key(problem, key_id)`` tunes one key (``arbiter.tune.tune_region`` underneath) and
    raises NoCandidateError when nothing passes.
    ``on_event(kind, key_id, info)`` is told "claimed", "tuned", "failed", "lost", "skipped", "waiting", "held".
    """
    recorded, force, watch, poll_s, until = how.recorded, how.force, how.watch, how.poll_s, how.until
    stop = stop or threading.Event()
    event = on_event or (lambda kind, key, info: None)
    problems = dict(problems or {})
    only = None if recorded else list(problems)
    outcome = Outcome()
    if problems:
        claims.offer(problems, env, reopen=force)
    waiting = False
    while not stop.is_set() and (until is None or time.monotonic() < until):
        key_id = claims.claim(env, only) if only is None or only else None
        if key_id is None and recorded and claims.offer_recorded(env):
            continue  # new recordings since the last look
        if key_id is None:
            held = [] if watch else claims.held(env, only)
            if not watch and not held:
                break
            if held:  # another holder's live lease (a host tuning it, or a tuner killed mid-key): wait for it,
                # do not report this run finished (issue 28 item 7); a lapsed lease makes the key claimable
                wait = max(0.05, min(poll_s, min(e for _, _, e in held) - time.time() + 0.05))
                event("held", "", {"held": held, "wait_s": wait})
                stop.wait(wait if until is None else max(0.0, min(wait, until - time.monotonic())))
                continue
            if not waiting:
                event("waiting", "", {"poll_s": poll_s})
                waiting = True
            stop.wait(poll_s if until is None else max(0.0, min(poll_s, until - time.monotonic())))
            continue
        waiting = False
        event("claimed", key_id, {"holder": claims.holder})
        problem = problems.get(key_id) or recorded_problem(claims, key_id, env)
        outside = _outside_bucket(problem, key_id)
        if outside:  # tuned, it would be stored under another key while this claim says done (issue 28 item 8)
            _fail(claims, key_id, env, outside, outcome, event)
            continue
        if not force and store.load_measurements(key_id, env):
            with store.transaction():  # tuned already (by a run that did not claim): nothing to do but say so
                claims.finish(key_id, env, "done", "tuned already")
            outcome.skipped.append(key_id)
            event("skipped", key_id, {})
            continue
        try:
            with claims.lease(key_id, env):
                failed = None
                with store.transaction():  # the key's verdicts, measurements, solution and done state: one commit
                    try:
                        decision = tune_key(problem, key_id)
                    except NoCandidateError as exc:
                        failed, decision = exc, None
                    claims.finish(key_id, env, "failed" if failed else "done", str(failed or "")[:1000])
        except LostClaim as exc:
            outcome.lost.append(key_id)
            event("lost", key_id, {"why": str(exc)})
            continue
        except RegistryError:
            claims.release(key_id, env)  # the registry's trouble, not the key's: open again at once
            raise
        except Exception as exc:  # (this key cannot be tuned here: MemoryError, a region error...)
            # Marked failed with why, so neither this run nor a watcher fails on it again and again.
            _fail(claims, key_id, env, f"{type(exc).__name__}: {exc}", outcome, event)
            continue
        except BaseException:
            claims.release(key_id, env)  # stopping or broken mid-key: the key is open again at once
            raise
        (outcome.failed if failed else outcome.tuned).append(key_id)
        event("failed" if failed else "tuned", key_id, {"decision": decision, "error": failed})
    return outcome
