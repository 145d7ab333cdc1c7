"""The background counter flusher: dispatch counts reach the registry without the caller waiting.

``start()`` (called when a writable ``SqlStore`` opens) runs one daemon thread
per process that calls ``arbiter.dispatch.flush()`` every ``INTERVAL_S``
seconds, and flushes once more at interpreter exit. The hot path is unchanged:
it only bumps integers; ``flush`` turns them into deltas under the dispatch
lock and hands them to the store in one transaction. A crash loses at most the
counts of the last interval, never a committed row.
"""
from __future__ import annotations

import atexit
import os
import threading
import warnings

INTERVAL_S = 2.0

_lock = threading.Lock()
_pid: int | None = None  # the process the thread runs in (a forked child starts its own)
_stop = threading.Event()
_thread: threading.Thread | None = None
_warned: set[str] = set()


def flush_now() -> None:
    """Flush the dispatch counters; a failure is warned about once per message, never raised."""
    from arbiter import dispatch

    try:
        dispatch.flush()
    except Exception as exc:  # a background thread has no caller to raise to
        text = f"kernel-arbiter: dispatch counters not flushed: {exc}"
        if text not in _warned:
            _warned.add(text)
            warnings.warn(text, RuntimeWarning, stacklevel=2)


def _loop() -> None:
    while not _stop.wait(INTERVAL_S):
        flush_now()


def _at_exit() -> None:
    if _pid != os.getpid():
        return  # inherited from a parent through fork: the parent flushes its own
    _stop.set()
    if _thread is not None:
        _thread.join(timeout=30)  # let an in-flight flush commit rather than die mid-transaction
    flush_now()


def start() -> None:
    """Start this process's flusher (idempotent)."""
    global _pid, _thread
    with _lock:
        if _pid == os.getpid():
            return
        _pid = os.getpid()
        _stop.clear()
        _thread = threading.Thread(target=_loop, name="arbiter-counter-flusher", daemon=True)
        _thread.start()
        atexit.register(_at_exit)
