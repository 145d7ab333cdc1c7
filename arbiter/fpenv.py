"""The calling thread's floating-point environment: flush-to-zero, denormals-are-zero and the rounding mode.

A kernel that turns flush-to-zero on for its thread (a fast path for subnormals) and leaves it on changes every
later computation on that thread: the caller's, and the float64 oracle's that the gate or the audit computes
next, which then agrees with the wrong kernel (issue 38 item 3). The gate and the audit take ``capture()``
before a candidate runs and ``changed(before)`` after it: a difference fails the candidate and the environment
is put back as it was, so nothing computed afterwards on the thread is judged under it.

The state is read by what it does, not by register: three one-element NumPy operations on the calling thread
(a float32 product that lands on a subnormal, a subnormal operand, a sum that rounds differently in each
mode), a few microseconds, on any architecture NumPy runs on. Putting it back needs C's ``fegetenv`` and
``fesetenv`` (glibc and macOS libm through ctypes); where they are missing the change is still reported.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import NamedTuple

import numpy as np

_TINY = np.array([np.finfo(np.float32).tiny], np.float32)  # the smallest normal float32
_HALF = np.array([0.5], np.float32)
_SUBNORMAL = np.array([np.finfo(np.float32).tiny / 4], np.float32)
_ZERO = np.array([0.0], np.float32)
_ONE = np.array([1.0, -1.0], np.float64)
_NUDGE = np.array([2.0 ** -60, -(2.0 ** -60)], np.float64)  # far below half an ulp of 1.0
_FENV_BYTES = 1024  # larger than any libm's fenv_t (x86-64 glibc: 32, aarch64: 8)


class State(NamedTuple):
    flush_to_zero: bool  # a subnormal result is returned as zero
    denormals_are_zero: bool  # a subnormal operand is read as zero
    rounding: str  # "nearest", "upward", "downward" or "toward zero"

    def differences(self, other: State) -> str:
        found = [f"{name.replace('_', '-')} {'on' if getattr(other, name) else 'off'}"
                 for name in ("flush_to_zero", "denormals_are_zero") if getattr(self, name) != getattr(other, name)]
        if self.rounding != other.rounding:
            found.append(f"rounding {other.rounding}")
        return ", ".join(found)


def state() -> State:
    """The calling thread's environment, read by what three operations on it return."""
    with np.errstate(all="ignore"):
        ftz = float((_TINY * _HALF)[0]) == 0.0
        daz = float((_SUBNORMAL + _ZERO)[0]) == 0.0
        up, down = (_ONE + _NUDGE).tolist()  # 1 + 2^-60 and -1 - 2^-60
    if up > 1.0:
        rounding = "upward"
    elif down < -1.0:
        rounding = "downward"
    else:  # nearest and toward zero agree on both: 1 - 2^-60 tells them apart
        rounding = "nearest" if float((_ONE[:1] - _NUDGE[:1])[0]) == 1.0 else "toward zero"
    return State(ftz, daz, rounding)


@functools.cache
def _libm():
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        lib.fegetenv.argtypes = lib.fesetenv.argtypes = [ctypes.c_void_p]
        return lib
    except (OSError, AttributeError):
        return None


class Saved(NamedTuple):
    state: State
    raw: object  # the libm environment (a ctypes buffer), or None where libm's fegetenv is missing


def capture() -> Saved:
    """The calling thread's environment, to compare with and to restore (``changed``)."""
    lib, raw = _libm(), None
    if lib is not None:
        raw = ctypes.create_string_buffer(_FENV_BYTES)
        if lib.fegetenv(raw) != 0:
            raw = None
    return Saved(state(), raw)


def changed(before: Saved) -> str:
    """"" when the calling thread's environment is as ``before`` found it; else what changed ("flush-to-zero
    on"), after putting ``before`` back (where libm allows)."""
    now = state()
    if now == before.state:
        return ""
    lib = _libm()
    if lib is not None and before.raw is not None:
        lib.fesetenv(before.raw)
    return before.state.differences(now)


DEFAULT = State(False, False, "nearest")  # the C default: what a process starts with


def make_default() -> str:
    """Put the calling thread's environment to the C default (no flush-to-zero or denormals-are-zero, rounding to
    nearest) where it is not, through glibc's ``fesetenv(FE_DFL_ENV)``; "" when it is the default now, else what
    is still set. The audit's checker thread computes the oracle under it: a thread inherits its creator's
    environment, and a kernel may have left flush-to-zero on the thread that started it."""
    if state() == DEFAULT:
        return ""
    lib = _libm()
    if lib is not None:
        lib.fesetenv(ctypes.c_void_p(-1))  # FE_DFL_ENV on glibc: ((const fenv_t *) -1)
    now = state()
    return "" if now == DEFAULT else DEFAULT.differences(now)
