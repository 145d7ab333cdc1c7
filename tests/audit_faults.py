"""Softmax candidates right on every gate probe whose fault starts later or elsewhere: what the audit of real calls
must catch (``tests/test_audit_context.py``) and what ``benchmarks/audit_catch.py`` times to removal. Each counts its
calls and remembers its first wrong one."""
from __future__ import annotations

import ctypes
import ctypes.util
import struct

import numpy as np

from arbiter import Candidate, Tier


def set_ftz(on: bool) -> None:
    """Flush-to-zero and denormals-are-zero on (or off) for this thread: x86-64 glibc's fenv_t holds MXCSR at
    byte 28."""
    lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    buf = ctypes.create_string_buffer(1024)
    lib.fegetenv(buf)
    raw = bytearray(buf.raw)
    mxcsr = struct.unpack_from("<I", raw, 28)[0]
    struct.pack_into("<I", raw, 28, (mxcsr | 0x8040) if on else (mxcsr & ~0x8040))
    lib.fesetenv(ctypes.create_string_buffer(bytes(raw), 1024))


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def into_out(region, y):
    """``y`` in ``region.alloc_out()``."""
    out = region.alloc_out()
    out[...] = y
    return out


class Fault(Candidate):
    """Right for its first ``after`` calls (the gate makes fewer), then wherever ``faulty`` says, ``wrong``."""

    target, op, tier, priority = "cpu", "softmax", Tier.HAND_TUNED, 100
    after = 200

    def __init__(self):
        self.calls, self.first_wrong, self.pool = 0, None, {}

    def faulty(self, region) -> bool:
        return self.calls > self.after

    def run(self, region, params):
        self.calls += 1
        if self.faulty(region):
            if self.first_wrong is None:
                self.first_wrong = self.calls
            return self.wrong(region)
        return into_out(region, softmax(region.x))


class Stale(Fault):
    """A stale workspace: zeros from then on."""

    name = "stale_after_n"

    def wrong(self, region):
        return into_out(region, 0.0)


class Quantized(Fault):
    """Wrong only when every logit is a small whole number (its exact-table path forgets to normalise)."""

    name = "wrong_on_quantized"

    def faulty(self, region):
        return bool(np.all(region.x == np.round(region.x)))

    def wrong(self, region):
        return into_out(region, np.exp(region.x - region.x.max(axis=-1, keepdims=True)))


class Pooled(Fault):
    """One output buffer per shape when no out= is given: the caller's kept result changes under it."""

    name = "pooled_output"

    def wrong(self, region):
        if region.out is not None:
            region.out[...] = softmax(region.x)
            return region.out
        buf = self.pool.setdefault(region.x.shape, np.empty(region.x.shape, region.x.dtype))
        buf[...] = softmax(region.x)
        return buf


class Flushes(Fault):
    """Turns flush-to-zero on for the calling thread at every call and leaves it on."""

    name = "flushes_to_zero"

    def wrong(self, region):
        set_ftz(True)
        return into_out(region, softmax(region.x))


class OneWidth(Fault):
    """Wrong at 777 columns only: a width inside the (512, 1024] bucket that the gate's probes do not draw."""

    name = "wrong_at_one_width"

    def faulty(self, region):
        return region.x.shape[-1] == 777

    def wrong(self, region):
        return into_out(region, softmax(region.x) * 1.01)
