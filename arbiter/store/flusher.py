"""The background counter flusher: dispatch counts reach the registry without the caller waiting.

``start(flush)`` runs one daemon thread per process that calls ``flush()`` every
``INTERVAL_S`` seconds. Dispatch starts it with ``arbiter.dispatch.flush`` when
its store is one that persists (a writable registry): the store sits below
dispatch, so dispatch hands its flush down rather than the flusher importing it.
The hot path is unchanged: it only bumps integers; ``flush`` turns them into
deltas under the dispatch lock and hands them to the store in one transaction,
marking them flushed only once committed.

The counts of the last interval are flushed once more whenever the process ends
in a way Python can see:

* normal exit and uncaught exceptions (``atexit``);
* SIGTERM and SIGHUP: a handler flushes (in a helper thread, for at most
  ``SIGNAL_FLUSH_S`` seconds), then calls the handler that was there before, or
  restores the default and re-raises the signal, so the process still ends with
  that signal. A signal set to be ignored is left alone. Installed only from the
  main thread (Python allows no other). A signal that interrupts the main thread
  inside a registry transaction or a flush is handled when that ends;
* a forked child: it inherits neither the parent's pending counts (see
  ``dispatch._after_fork_in_child``) nor its thread, so it starts its own
  flusher; a ``multiprocessing`` child (which ends with ``os._exit``, skipping
  ``atexit``) flushes from a multiprocessing finalizer.

SIGKILL, ``os._exit`` outside multiprocessing, and a crash of the interpreter
lose at most the counts of the last interval, never a committed row.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
import warnings
from collections.abc import Callable

INTERVAL_S = 2.0
SIGNAL_FLUSH_S = 10.0  # how long a SIGTERM/SIGHUP waits for the last flush before the process ends anyway
SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))

_lock = threading.Lock()
_pid: int | None = None  # the process the thread runs in (a forked child starts its own)
_stop = threading.Event()
_thread: threading.Thread | None = None
_warned: set[str] = set()
_atexit_registered = False
_previous: dict[int, object] = {}  # signal -> the handler ours replaced (called after the flush)
_flush: Callable[[], None] | None = None  # what each interval, exit and signal runs (given to ``start``)


def flush_now() -> None:
    """Flush the dispatch counters; a failure is warned about once per message, never raised."""
    if _flush is None:
        return
    try:
        _flush()
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
        return  # inherited from a parent through fork, and this child never used a registry
    _stop.set()
    if _thread is not None:
        _thread.join(timeout=30)  # let an in-flight flush commit rather than die mid-transaction
    flush_now()


_main_depth = 0  # how deep the main thread is in a registry transaction or a flush (see ``deferring_signals``)
_deferred: list[tuple[int, object]] = []


@contextlib.contextmanager
def deferring_signals():
    """Mark a registry transaction or flush: a SIGTERM/SIGHUP that interrupts the main thread inside one is
    handled when it leaves. Handled at once, its flush would wait for the locks the interrupted code holds (a
    pool's workers are often flushing at exit when ``terminate()`` signals them), and the counts in flight
    would die with the process."""
    global _main_depth
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _main_depth += 1
    try:
        yield
    finally:
        _main_depth -= 1
        if _main_depth == 0 and _deferred:
            signum, frame = _deferred.pop(0)
            _deferred.clear()
            _on_signal(signum, frame)


def _on_signal(signum, frame) -> None:
    if _main_depth:  # Python runs handlers in the main thread: it was interrupted inside a transaction
        _deferred.append((signum, frame))
        return
    # The flush runs in a helper thread, waited for at most SIGNAL_FLUSH_S: a stuck server must not keep the
    # process from ending.
    helper = threading.Thread(target=flush_now, name="arbiter-signal-flush", daemon=True)
    helper.start()
    helper.join(SIGNAL_FLUSH_S)
    previous = _previous.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)
        return
    signal.signal(signum, signal.SIG_DFL)  # the default action (end the process), as if we were never there
    os.kill(os.getpid(), signum)


def _install_signal_handlers() -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # Python lets only the main thread set handlers; atexit still covers a normal exit
    for signum in SIGNALS:
        current = signal.getsignal(signum)
        if current is _on_signal or current in (signal.SIG_IGN, None):
            continue  # ours already (inherited through fork), ignored on purpose, or set outside Python
        _previous[signum] = current
        signal.signal(signum, _on_signal)


def _mp_child(_owner) -> None:
    """Run in each multiprocessing child after fork: it ends with ``os._exit``, so flush from its finalizer."""
    from multiprocessing import util

    util.Finalize(None, _at_exit, exitpriority=10)


class _Owner:  # multiprocessing keeps after-fork hooks only while their object lives: this one always does
    pass


_OWNER = _Owner()


def start(flush: Callable[[], None]) -> None:
    """Start this process's flusher (idempotent), running ``flush`` every interval and on exit, SIGTERM and
    SIGHUP."""
    global _pid, _thread, _atexit_registered, _flush
    with _lock:
        _flush = flush
        if _pid == os.getpid():
            return
        _pid = os.getpid()
        _stop.clear()
        _thread = threading.Thread(target=_loop, name="arbiter-counter-flusher", daemon=True)
        _thread.start()
        if not _atexit_registered:
            _atexit_registered = True
            atexit.register(_at_exit)
            from multiprocessing import util

            util.register_after_fork(_OWNER, _mp_child)
        _install_signal_handlers()


def _after_fork_in_child() -> None:
    """A forked child has no flusher thread (threads do not survive fork): start its own if the parent had one."""
    global _lock, _pid, _main_depth
    _lock = threading.Lock()
    _main_depth = 0  # forked from another thread while the main one was inside a transaction: not this one
    _deferred.clear()
    if _pid is not None and _flush is not None:
        _pid = None
        start(_flush)


os.register_at_fork(after_in_child=_after_fork_in_child)
