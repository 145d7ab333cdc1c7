"""What the numba candidates of the CPU target share: dtype coverage and the other applies_to reasons, a
base class for one-kernel candidates, a vectorisable exp, compile bookkeeping.

numba 0.68 has no float16 (or bfloat16) loads, stores or arithmetic on the CPU
(``NotImplementedError: float16``), so every numba candidate serves float32 and
float64 only and says so in ``applies_to``; the vendor candidates serve the rest.
"""
from __future__ import annotations

import functools
import inspect
import math
import sys
import time
from typing import ClassVar

import numpy as np

from arbiter import cpu_threads
from arbiter.candidates import Candidate, Tier

try:
    import numba
except ModuleNotFoundError as exc:  # numba is the optional ``cpu-jit`` extra
    if exc.name != "numba":
        raise
    numba = None

# Why the numba candidates cannot run here (their ``available()``), or None when they can.
NUMBA_MISSING = None if numba is not None else "needs numba: pip install 'kernel-arbiter[cpu-jit]'"

if numba is not None:
    from numba import prange, types
    from numba.extending import intrinsic, overload

    # numba's njit, except that cache=True caches in the project's private folder, never in one numba finds
    # ($NUMBA_CACHE_DIR, __pycache__, $XDG_CACHE_HOME/numba) that another user may write (it unpickles from it).
    from arbiter.targets.numba_cache import njit
else:
    # Without numba the kernels below stay plain Python functions (``prange`` is ``range``): they are
    # never run, because every numba candidate answers ``available()`` with NUMBA_MISSING.
    prange = range

    def njit(*args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return lambda fn: fn

DTYPES = ("float32", "float64")

# Reassociation lets LLVM vectorise reductions (sum of squares, softmax denominators) across SIMD
# lanes, which is also more accurate than one sequential sum; contraction allows FMA. No nnan/ninf:
# softmax relies on -inf and comparisons behaving.
FASTMATH = {"reassoc", "contract", "arcp", "nsz"}


def dtype_reason(region) -> bool | str:
    """True when numba can compute ``region.dtype`` on the CPU, else the reason it cannot."""
    if region.dtype in DTYPES:
        return True
    return (f"dtype {region.dtype}: numba has no {region.dtype} arithmetic on the CPU; "
            "the vendor candidate serves it")


def contiguous_reason(argument: str, array) -> bool | str:
    if array is None or array.flags.c_contiguous:
        return True
    return f"{argument}: strided; this kernel reads C-contiguous memory (the vendor candidate handles any layout)"


def layout_reason(region, layout: str, reads: str) -> bool | str:
    """True when ``region.layout`` is ``layout``, else the reason; ``reads`` says what the kernel reads."""
    if region.layout == layout:
        return True
    return f"layout {region.layout}: the kernel {reads}; needs layout {layout}"


def product_only_reason(region) -> bool | str:
    """True for a matmul region without an epilogue: the emitted kernels compute ``a @ b`` only."""
    if region.has_epilogue:
        return "epilogue: this kernel computes a @ b only; the synthesized tier fuses epilogues"
    return True


def first_reason(*answers) -> bool | str:
    """The first of ``answers`` (applies_to checks, in order) that is a reason, or True when all are True."""
    return next((a for a in answers if a is not True), True)


def code_of(module_name: str) -> str:
    """The code identity text of a numba candidate: its whole module (kernels included) and this one."""
    return inspect.getsource(sys.modules[module_name]) + inspect.getsource(sys.modules[__name__])


class CompileLog:
    """Compile (or on-disk cache load) seconds per signature of one numba dispatcher.

    ``ensure(args)`` compiles explicitly the first time a dtype is seen, so that the first
    timed call never includes compilation; the seconds it took are kept in ``seconds`` and
    ``last_s``, and whether numba's disk cache served it in ``from_disk``.
    """

    def __init__(self, dispatcher):
        self.dispatcher = dispatcher
        self.seconds: dict[str, float] = {}
        self.from_disk: dict[str, bool] = {}
        self.last_s = 0.0

    def ensure(self, tag: str, args) -> None:
        if tag in self.seconds:
            return
        from numba import typeof

        signature = tuple(typeof(a) for a in args)
        hits = sum(self.dispatcher.stats.cache_hits.values())
        t0 = time.perf_counter()
        self.dispatcher.compile(signature)
        self.last_s = self.seconds[tag] = time.perf_counter() - t0
        self.from_disk[tag] = sum(self.dispatcher.stats.cache_hits.values()) > hits


@njit(parallel=True, cache=True, fastmath={"contract"})
def gelu_exact_inplace(flat):
    """Exact GELU, ``v * (1 + erf(v / sqrt 2)) / 2``, in place on a flat array: one parallel pass (libm's erf),
    where ``scipy.special.erf`` and NumPy's passes cost as much as the product before it (issue 31)."""
    for i in prange(flat.size):
        v = flat[i]
        flat[i] = v * 0.5 * (1.0 + math.erf(v * 0.7071067811865476))


def moved_bytes(region) -> int:
    """The bytes a call reads and writes at least: its operands and its output."""
    item = np.dtype(region.out_dtype).itemsize
    return sum(int(a.nbytes) for a in region.operands().values() if a is not None) + item * math.prod(
        region.output_shape())


class SerialLaunches:
    """A numba candidate: its ``run`` holds ``cpu_threads.LAUNCH_LOCK`` (numba's workqueue layer, the one
    ``import arbiter`` asks for, terminates the process on concurrent parallel launches from two threads), and runs
    on one thread for a torch caller (``cpu_threads.guest_threads``)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        run = cls.__dict__.get("run")
        if run is not None and not getattr(run, "serial", False):
            @functools.wraps(run)
            def serial_run(self, region, params):
                # one thread for a torch caller: torch's pool owns the cores, unless the call moves much memory
                # (cpu_threads.guest_threads)
                guest = region.torch_caller
                threads = cpu_threads.guest_threads(guest, None, moved_bytes(region) if guest else 0)
                with cpu_threads.LAUNCH_LOCK, cpu_threads.numba_threads(threads):
                    return run(self, region, params)

            serial_run.serial = True  # type: ignore[attr-defined]
            setattr(cls, "run", serial_run)  # noqa: B010 (the subclass's own run, replaced)


class NumbaKernelCandidate(SerialLaunches, Candidate):
    """An emitted CPU candidate around one numba kernel: ``kernel = staticmethod(<the @njit function>)``.

    ``compile_log`` compiles it explicitly on first use of a dtype (see ``CompileLog``) and
    ``last_compile_s`` reports the latest such compile; the identity is the subclass's whole module
    (its kernel included) and this one.
    """

    target = "cpu"
    tier = Tier.EMITTED
    kernel: ClassVar

    def __init__(self):
        self.compile_log = CompileLog(self.kernel)

    def available(self):
        return NUMBA_MISSING or True

    @property
    def last_compile_s(self) -> float:
        return self.compile_log.last_s

    def source(self):
        return code_of(type(self).__module__)


# --- a vectorisable exp ------------------------------------------------------
# Without Intel SVML, numba's math.exp is a scalar libm call per element, which keeps a fused
# softmax several times slower than NumPy's SIMD exp. This one is plain arithmetic (Cody-Waite
# range reduction, a Taylor polynomial on |r| <= ln2/2, 2**n built from its bits), so LLVM
# vectorises loops that call it. Error: < 3e-7 relative in float32 (degree 6), < 2e-15 in float64
# (degree 12). Inputs are clamped to the finite range: exp(-inf) gives the smallest normal, not 0,
# which is far under every budget next to a softmax denominator >= 1.


def fast_exp(x):
    """exp(x); the pure-Python meaning, for readers and for calls outside numba."""
    return math.exp(x)


if numba is not None:  # the vectorisable exp exists only where numba compiles it
    @intrinsic
    def _bits_as_float(typingctx, bits):
        ret = {types.int32: types.float32, types.int64: types.float64}.get(bits)
        if ret is None:
            return None

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], context.get_value_type(signature.return_type))

        return ret(bits), codegen


    _F32 = {k: np.float32(v) for k, v in dict(log2e=1.4426950408889634, ln2_hi=0.693359375, ln2_lo=-2.12194440e-4,
                                               lo=-87.3, hi=88.3).items()}
    _F64 = dict(log2e=1.4426950408889634, ln2_hi=6.93147180369123816490e-01, ln2_lo=1.90821492927058770002e-10,
                lo=-708.0, hi=709.0)
    _INV_FACT = [1.0 / math.factorial(i) for i in range(13)]


    @overload(fast_exp, inline="always", jit_options={"fastmath": {"contract"}})
    def _fast_exp_impl(x):
        if x == types.float32:
            log2e, hi_, lo_, clamp_lo, clamp_hi = (_F32[k] for k in ("log2e", "ln2_hi", "ln2_lo", "lo", "hi"))
            c = [np.float32(v) for v in _INV_FACT[:7]]
            c0, c1, c2, c3, c4, c5, c6 = c
            half = np.float32(0.5)

            def exp32(x):
                x = min(max(x, clamp_lo), clamp_hi)
                n = np.floor(x * log2e + half)
                r = x - n * hi_ - n * lo_
                p = ((((((c6 * r + c5) * r + c4) * r + c3) * r + c2) * r + c1) * r + c0)
                return p * _bits_as_float(np.int32((np.int64(n) + 127) << 23))

            return exp32
        if x == types.float64:
            log2e, hi_, lo_, clamp_lo, clamp_hi = (_F64[k] for k in ("log2e", "ln2_hi", "ln2_lo", "lo", "hi"))
            c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12 = _INV_FACT

            def exp64(x):
                x = min(max(x, clamp_lo), clamp_hi)
                n = np.floor(x * log2e + 0.5)
                r = x - n * hi_ - n * lo_
                p = c12
                p = p * r + c11
                p = p * r + c10
                p = p * r + c9
                p = p * r + c8
                p = p * r + c7
                p = p * r + c6
                p = p * r + c5
                p = p * r + c4
                p = p * r + c3
                p = p * r + c2
                p = p * r + c1
                p = p * r + c0
                return p * _bits_as_float((np.int64(n) + 1023) << 52)

            return exp64
        return None
