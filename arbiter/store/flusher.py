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

* normal exit and uncaught exceptions (``atexit``); a flush that fails there is
  reported on stderr with the number of counts lost;
* SIGTERM and SIGHUP (docs/reliability.md, "Signals"): the Python handler only
  hands the signal over (one byte into a pipe) and returns; it takes no lock, so
  it cannot wait on one the interrupted code holds. The pipe is also Python's
  signal wakeup fd (``signal.set_wakeup_fd``, when nobody else set one), so a
  signal delivered to another thread while the main thread is blocked still
  arrives. A watcher thread, started beforehand, then ends the process: it closes
  dispatch to new calls (``close``: they wait for the end instead of counting),
  flushes until nothing is pending, for at most ``SIGNAL_FLUSH_S`` seconds
  (``ARBITER_SIGNAL_FLUSH_S``), reports on stderr the counts it could not write
  (with their number) and re-raises the signal with its default action, so the
  process ends by that signal whichever thread got it. A program's own handler
  (installed before ours) is called after a flush instead, in the main thread,
  and decides itself; a signal set to be ignored is left alone. Installed only
  from the main thread (Python allows no other);
* a forked child: it inherits neither the parent's pending counts (see
  ``dispatch._after_fork_in_child``) nor its threads and pipe, so it starts its
  own; a ``multiprocessing`` child (which ends with ``os._exit``, skipping
  ``atexit``) flushes from a multiprocessing finalizer.

SIGKILL, ``os._exit`` outside multiprocessing, and a crash of the interpreter
lose at most the counts of the last interval, never a committed row.
"""
from __future__ import annotations

import atexit
import contextlib
import math
import os
import select
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable

INTERVAL_S = 2.0
SIGNAL_FLUSH_S = 10.0  # how long a SIGTERM/SIGHUP waits for the last flush (ARBITER_SIGNAL_FLUSH_S overrides)
SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))

_lock = threading.Lock()
_pid: int | None = None  # the process the thread runs in (a forked child starts its own)
_stop = threading.Event()
_thread: threading.Thread | None = None
_warned: set[str] = set()
_atexit_registered = False
_previous: dict[int, object] = {}  # signal -> the handler ours replaced (called after the flush)
_flush: Callable[[], None] | None = None  # what each interval, exit and signal runs (given to ``start``)
_pending: Callable[[], int] | None = None  # how many counts are not written yet (for the loss report)
_close: Callable[[], None] | None = None  # stops new dispatches from counting: the process is ending
_pipe: tuple[int, int] | None = None  # (read, write): signal numbers for the watcher thread
_watcher: threading.Thread | None = None
_signalled = 0  # the ending signal, once the handler saw it (atexit must then let the watcher end the process)
_ending = threading.Event()  # the watcher is ending the process


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


def _count_pending() -> int:
    try:
        return _pending() if _pending is not None else 0
    except Exception:  # (a report must not fail the exit it reports on)
        return -1


def _report(text: str) -> None:
    """One line on stderr through the file descriptor: ``sys.stderr``'s lock may be held by a thread that
    will never run again."""
    with contextlib.suppress(OSError):
        os.write(2, f"kernel-arbiter: {text}\n".encode(errors="replace"))


def _at_exit() -> None:
    if _pid != os.getpid():
        return  # inherited from a parent through fork, and this child never used a registry
    if _signalled:  # a SIGTERM/SIGHUP arrived: the watcher flushes and ends the process by it, not a plain exit
        _ending.wait(5.0)
        time.sleep(_bound() + 5.0)
    _stop.set()
    if _thread is not None:
        _thread.join(timeout=30)  # let an in-flight flush commit rather than die mid-transaction
    others = _dispatching_threads()
    if others and _close is not None:
        _close()  # daemon threads still dispatching now wait for the end (``wait_for_end``) instead of counting
    try:
        if _flush is not None:
            _flush()
            # A thread between its route lookup and its count adds one after that snapshot: flush until nothing
            # has been pending for two short looks (a runnable thread gets the GIL within a switch interval).
            deadline, quiet = time.monotonic() + _bound(), 0
            while others and quiet < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
                if _count_pending() > 0:
                    _flush()
                    quiet = 0
                else:
                    quiet += 1
    except Exception as exc:  # (the process is ending: say what is lost, with its number)
        _report(f"{_count_pending()} dispatch count(s) not written to the registry at exit, lost: {exc}")
        return
    lost = _count_pending()
    if lost:
        _report(f"{lost} dispatch count(s) not written to the registry at exit (made by threads still "
                f"dispatching after the last flush); they are lost")


def _dispatching_threads() -> list[threading.Thread]:
    """Threads alive at exit besides this one and the flusher's own (daemon threads that may still dispatch)."""
    ours = {threading.current_thread(), _thread, _watcher}
    return [t for t in threading.enumerate() if t not in ours and t.is_alive()]


MAX_SIGNAL_FLUSH_S = 3600.0  # the longest ARBITER_SIGNAL_FLUSH_S taken (a larger finite value is capped to it)
_bound_of: tuple[str | None, float] | None = None  # (the setting, the seconds it gives): parsed once per value


def _parse_bound(given: str | None) -> tuple[float, str]:
    """(seconds, warning) for the setting ``given`` of ARBITER_SIGNAL_FLUSH_S; the warning is empty when it is
    taken as it is. Not a finite number >= 0 (``inf``, ``nan``, ``-1``, ``abc``): refused, the default is used
    (``inf`` raised OverflowError in the watcher thread and the signal never ended the process; ``nan`` was taken
    as 0). Past ``MAX_SIGNAL_FLUSH_S``: capped to it (a thread's wait overflows far beyond)."""
    if given is None or not given.strip():
        return SIGNAL_FLUSH_S, ""
    try:
        seconds = float(given)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        return SIGNAL_FLUSH_S, (f"ARBITER_SIGNAL_FLUSH_S={given!r} is not a finite number of seconds >= 0; "
                                f"using the default, {SIGNAL_FLUSH_S:g} s (how long a SIGTERM/SIGHUP waits for "
                                f"the last flush; at most {MAX_SIGNAL_FLUSH_S:g})")
    if seconds > MAX_SIGNAL_FLUSH_S:
        return MAX_SIGNAL_FLUSH_S, (f"ARBITER_SIGNAL_FLUSH_S={given!r} is more than the most a signal waits, "
                                    f"{MAX_SIGNAL_FLUSH_S:g} s; using {MAX_SIGNAL_FLUSH_S:g}")
    return seconds, ""


def _setting() -> str:
    """ARBITER_SIGNAL_FLUSH_S as set, for a message: the value given, or that it is unset."""
    given = os.environ.get("ARBITER_SIGNAL_FLUSH_S")
    return "unset" if given is None else repr(given)


def _bound() -> float:
    """How long a SIGTERM/SIGHUP waits for the last flush: ARBITER_SIGNAL_FLUSH_S (checked, see ``_parse_bound``)
    else ``SIGNAL_FLUSH_S``. A refused setting is warned about once, on stderr through the file descriptor (this
    may run in the watcher thread while the process ends)."""
    global _bound_of
    given = os.environ.get("ARBITER_SIGNAL_FLUSH_S")
    if _bound_of is not None and _bound_of[0] == given:
        return _bound_of[1]
    seconds, warning = _parse_bound(given)
    _bound_of = (given, seconds)
    if warning:
        _report(f"warning: {warning}")
    return seconds


_main_depth = 0  # how deep the main thread is in a registry transaction or a flush (see ``deferring_signals``)
_deferred: list[tuple[int, object]] = []


@contextlib.contextmanager
def deferring_signals():
    """Mark a registry transaction or flush: a SIGTERM/SIGHUP bound for a program's own handler (which runs
    after a flush, in the main thread) that interrupts the main thread inside one is handled when it leaves;
    handled at once, its flush would wait for the locks the interrupted code holds. The default action is
    never deferred: that handler only hands the signal to the watcher thread."""
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


def _ends_process(signum: int) -> bool:
    """Is ``signum`` one this module ends the process on (ours installed, over the default action)?"""
    return signal.getsignal(signum) is _on_signal and not callable(_previous.get(signum, signal.SIG_DFL))


def _on_signal(signum, frame) -> None:
    global _signalled
    previous = _previous.get(signum, signal.SIG_DFL)
    if not callable(previous):
        # Hand over and return: no lock, no flush, no thread started here (each could wait forever on what the
        # interrupted code holds). The watcher flushes and ends the process by this signal.
        _signalled = signum
        if _pipe is not None:
            with contextlib.suppress(OSError):
                os.write(_pipe[1], bytes([signum | _MARK]))
            return
        signal.signal(signum, signal.SIG_DFL)  # no watcher (cannot happen once started): end as without us
        os.kill(os.getpid(), signum)
        return
    if _main_depth:  # Python runs handlers in the main thread: it was interrupted inside a transaction
        _deferred.append((signum, frame))
        return
    # The program's own handler decides what happens next; flush first, in a helper thread, waited for at
    # most the bound: a stuck server must not keep that handler from running.
    helper = threading.Thread(target=flush_now, name="arbiter-signal-flush", daemon=True)
    helper.start()
    helper.join(_bound())
    previous(signum, frame)


_MARK = 0x80  # a byte our handler wrote (signal | _MARK), beside the raw ones of the wakeup fd
GRACE_S = 0.5  # how long a raw wakeup byte waits for the main thread to run the handler itself


def _main_spot():
    """Where the main thread is (its frame and instruction), or None: unchanged over the grace period, it is
    blocked in C and cannot run a Python handler."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    return None if frame is None else (id(frame), frame.f_lasti)


def _watch(read_fd: int) -> None:
    """The watcher thread: wait for an ending signal and end the process. Our handler's byte (signal |
    ``_MARK``) acts at once. A raw byte from Python's C-level handler (through the wakeup fd, whichever thread
    the signal was delivered to) acts only when the main thread stays blocked for ``GRACE_S`` (its handler can
    never run) and the handler is still ours: a main thread that runs handlers writes the mark itself, or a
    handler of the program's took the signal."""
    raw: tuple[int, float, object] | None = None  # (signal, when, main's spot) of a raw byte not yet explained
    while True:
        timeout = None if raw is None else max(0.0, raw[1] + GRACE_S - time.monotonic())
        try:
            ready, _, _ = select.select([read_fd], [], [], timeout)
            data = os.read(read_fd, 256) if ready else b""
        except InterruptedError:
            continue
        except OSError:
            return  # closed: a forked child's copy, or the interpreter is going away
        for byte in data:
            signum = byte & ~_MARK
            if signum not in SIGNALS:
                continue
            if byte & _MARK:
                if _ends_process(signum):
                    _end_by(signum)
                    return
            elif raw is None and _ends_process(signum):
                raw = (signum, time.monotonic(), _main_spot())
        if raw is not None and time.monotonic() >= raw[1] + GRACE_S:
            signum, _, spot = raw
            raw = None
            if spot is not None and spot == _main_spot() and _ends_process(signum):
                _end_by(signum)
                return


def _final_flush(deadline: float, errors: list[str]) -> None:
    if _close is not None:
        _close()  # new dispatches wait for the end from here on: every count made so far is in what follows
    while True:
        try:
            if _flush is not None:
                _flush()
            if _count_pending() <= 0:
                return  # a call between its route lookup and its count is caught by the next snapshot
        except Exception as exc:  # (retried until the deadline, then reported)
            errors[:] = [str(exc)]
        if time.monotonic() >= deadline:
            return
        time.sleep(0.05)


def _end_by(signum: int) -> None:
    """Flush what dispatch counted (bounded), say what could not be written, then end by ``signum``. Whatever
    goes wrong on the way (it runs in the watcher thread: nothing above it would see an exception), the process
    still ends by the signal: a watcher that died left the dispatching threads waiting forever."""
    _ending.set()
    try:
        bound = _bound()
        errors: list[str] = []
        flusher = threading.Thread(target=_final_flush, args=(time.monotonic() + bound, errors),
                                   name="arbiter-final-flush", daemon=True)
        flusher.start()
        flusher.join(bound)
        lost = _count_pending()
        if lost:
            why = errors[0] if errors else f"the registry did not take them within {bound:g} s"
            _report(f"{signal.Signals(signum).name}: {lost if lost > 0 else 'some'} dispatch count(s) not written "
                    f"to the registry ({why}); they are lost. The signal waited {bound:g} s for them; "
                    f"ARBITER_SIGNAL_FLUSH_S sets how long (now {_setting()}).")
    except BaseException as exc:  # (the end must come: say why the last flush did not)
        _report(f"{signal.Signals(signum).name}: the last flush failed ({type(exc).__name__}: {exc})")
    finally:
        _die(signum)


_libc_signal = None  # libc's signal(): the default action is restored from this thread (Python allows only main)


def _die(signum: int) -> None:
    try:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signum, signal.SIG_DFL)
        elif _libc_signal is not None:
            _libc_signal(signum, None)  # NULL is SIG_DFL
        else:
            raise OSError("no way to restore the default action here")
        signal.pthread_kill(threading.get_ident(), signum)  # this thread does not block it: the process ends
    except (OSError, ValueError, AttributeError):
        pass
    time.sleep(1.0)
    os._exit(128 + signum)  # the signal could not be raised: the same status a shell reports for it


def _load_libc_signal():
    global _libc_signal
    if _libc_signal is not None:
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.signal
        fn.argtypes, fn.restype = [ctypes.c_int, ctypes.c_void_p], ctypes.c_void_p
        _libc_signal = fn
    except (ImportError, OSError, AttributeError):
        _libc_signal = None


def _start_watcher() -> None:
    """The pipe, the wakeup fd (unless the program set its own: asyncio does) and the watcher thread."""
    global _pipe, _watcher
    if _pipe is not None:
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)  # a signal handler must never block on a full pipe
    _pipe = (read_fd, write_fd)
    try:
        old = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        if old != -1:  # someone else's: give it back; our handler still writes to our pipe from the main thread
            signal.set_wakeup_fd(old)
    except (ValueError, OSError):
        pass
    _load_libc_signal()
    _watcher = threading.Thread(target=_watch, args=(read_fd,), name="arbiter-signal-watcher", daemon=True)
    _watcher.start()


def _install_signal_handlers() -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # Python lets only the main thread set handlers; atexit still covers a normal exit
    installed = False
    for signum in SIGNALS:
        current = signal.getsignal(signum)
        if current is _on_signal:
            installed = True
            continue
        if current in (signal.SIG_IGN, None):
            continue  # ignored on purpose, or set outside Python
        _previous[signum] = current
        signal.signal(signum, _on_signal)
        installed = True
    if installed:
        _start_watcher()


def _mp_child(_owner) -> None:
    """Run in each multiprocessing child after fork: it ends with ``os._exit``, so flush from its finalizer."""
    from multiprocessing import util

    util.Finalize(None, _at_exit, exitpriority=10)


class _Owner:  # multiprocessing keeps after-fork hooks only while their object lives: this one always does
    pass


_OWNER = _Owner()


def start(flush: Callable[[], None], *, pending: Callable[[], int] | None = None,
          close: Callable[[], None] | None = None) -> None:
    """Start this process's flusher (idempotent), running ``flush`` every interval and on exit, SIGTERM and
    SIGHUP. ``pending()``: how many counts are not written yet (named when they are lost); ``close()``: called
    once the process ends by a signal, before its last flush, so that no count is made after it."""
    global _pid, _thread, _atexit_registered, _flush, _pending, _close
    with _lock:
        _flush = flush
        _pending = pending if pending is not None else _pending
        _close = close if close is not None else _close
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
    _bound()  # a refused ARBITER_SIGNAL_FLUSH_S is named now, not first when a signal ends the process


def wait_for_end() -> None:
    """Called by a dispatch made after the process began ending by a signal: wait for the end rather than count
    a call the last flush may not carry (bounded: should the end not come, the call goes on). At a normal exit
    (``_at_exit`` closed dispatch: no signal) only other threads wait; the main thread, running exit handlers,
    goes on."""
    if not _ending.is_set() and threading.current_thread() is threading.main_thread():
        return
    _ending.wait(1.0)
    deadline = time.monotonic() + _bound() + 10.0
    while time.monotonic() < deadline:
        time.sleep(0.1)


def _after_fork_in_child() -> None:
    """A forked child has no flusher or watcher thread (threads do not survive fork), and its parent's pipe is
    not its own: it starts its own if the parent had them."""
    global _lock, _pid, _main_depth, _pipe, _watcher, _signalled, _ending
    _lock = threading.Lock()
    _main_depth = 0  # forked from another thread while the main one was inside a transaction: not this one
    _deferred.clear()
    _signalled, _ending, _watcher = 0, threading.Event(), None
    if _pipe is not None:
        try:
            old = signal.set_wakeup_fd(-1)
            if old != _pipe[1]:
                signal.set_wakeup_fd(old)  # not ours: leave it as it was
        except (ValueError, OSError):
            pass
        for fd in _pipe:
            with contextlib.suppress(OSError):
                os.close(fd)
        _pipe = None
    if _pid is not None and _flush is not None:
        _pid = None
        start(_flush)


os.register_at_fork(after_in_child=_after_fork_in_child)
