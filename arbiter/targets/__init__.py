"""Targets: where candidates run (``cpu``, ``nvidia``, ``rocm``).

A target knows which arrays it owns, whether it is available (and why not),
how to move probe data to and from the host, how to time one call
(``timer()``, repeated by ``arbiter.timing``), and which fields make up its environment key. One file a
target; nothing here imports a GPU library until that target is asked for.
"""
from __future__ import annotations

import contextlib
import importlib
import time
from collections.abc import Callable

import numpy as np

from arbiter.errors import unknown

TARGET_NAMES = ("cpu", "nvidia", "rocm")
_targets: dict[str, Target] = {}
# type(array) -> (target name, adopt function); filled as array types are first seen,
# so a warm region construction costs one dict lookup to find its target.
_by_type: dict[type, tuple[str, Callable]] = {}


def register_array_type(array_type: type, name: str, adopt) -> None:
    """Region construction finds target ``name`` for ``array_type`` by one lookup (``adopt(array)`` gives the
    native array and the conversion back); a target whose array type exists only once its module is imported
    announces it here."""
    _by_type[array_type] = (name, adopt)


class Timer:
    """Times one call of a zero-argument function on a target (``arbiter.timing`` runs the repetitions).

    This base is the host clock, right for the CPU (the CPU being the device); a GPU target's timer records
    events on its stream and flushes its last-level cache between repetitions."""

    cache_bytes = 32 << 20  # working sets under this are rotated (``timing.input_sets``)

    def flush_cache(self) -> None:
        pass

    def time(self, fn, mode: str, calls: int = 1) -> float:
        """Seconds per call of ``fn`` in ``mode`` (``calls`` back to back in stream mode, else one)."""
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        return (time.perf_counter_ns() - t0) * 1e-9 / calls


class Target:
    """The contract of a target. Subclasses live one per file beside this one (or in a plug-in, ``register``).

    Besides arrays, availability and timing, a target answers the questions the core would otherwise ask by
    its name (the hooks below, with the answers of a GPU target as defaults; the CPU overrides them):
    how its timings are taken (``host_clock``), whether it shares the host's cores with the arbiter
    (``host_cores``), which variable pins a worker process to one device (``visible_devices``), whether a
    CUDA-graph capture can follow a dispatched call (``captures_graphs``), which torch device type it serves
    (``torch_device``), and where the float64 oracle and large probe operands are computed
    (``device_float64``, ``device_draw``).
    """

    name: str = ""
    # Its timer is the host clock around a call that returns when it is done: device, latency and stream time are
    # one figure, so one run is timed and recorded under both modes (see ``arbiter.timing``), and a key is
    # tuned in ``device`` mode. False: a device timed by events, each mode timed apart.
    host_clock: bool = False
    # Its kernels run on the cores the arbiter itself runs on: a BLAS's spinning threads linger after a call
    # (the tuner settles before timing the next), a close margin is decided by interleaved re-timing, the gate's
    # skinny checks take one BLAS thread, and other processes' load is warned about.
    host_cores: bool = False
    # The environment variable that restricts a process to one device (a parallel tuning worker sets it before
    # any device library is imported); None: the target has no devices to pin.
    visible_devices: str | None = None
    # Whether dispatch may prepare CUDA-graph stand-ins for its keys (a capture records device work; host code
    # has nothing to capture).
    captures_graphs: bool = True
    # The ``torch.device.type`` of the tensors it serves through ``arbiter.torch`` (None: no torch tensors).
    torch_device: str | None = None
    # Whether its candidates were verified on its device against the special-value families (``Family.special``:
    # non-finite, huge, subnormal values, masked blocks, zero ends) and the gate's one-element pointer shift: only
    # then are these drawn for its keys (a target's own word, not a list of names in the core; issue 41 item 3).
    special_values_verified: bool = False

    def available(self) -> bool | str:
        """True, or a string saying why this target cannot run anything here."""
        raise NotImplementedError

    def owns(self, array) -> bool:
        raise NotImplementedError

    def adopt(self, array):
        """Return ``(native_array, back)``: the array in this target's native type and a
        function converting a result back to the caller's type (None when no conversion)."""
        return array, None

    def to_host(self, array) -> np.ndarray:
        raise NotImplementedError

    def from_host(self, array: np.ndarray, dtype: str, order: str = "C"):
        raise NotImplementedError

    def full(self, shape, value, dtype: str):
        raise NotImplementedError

    def empty(self, shape, dtype: str):
        """A new C-contiguous array, contents unspecified (a dispatched call's output: no fill pass)."""
        raise NotImplementedError

    def synchronize(self) -> None:
        pass

    def capturing(self) -> bool:
        """True while this thread's current stream is being captured into a graph (never on the CPU)."""
        return False

    def timer(self) -> Timer:
        """This target's timer (made once; a GPU's needs the device)."""
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        """The fields of this target's environment key (see ``arbiter.env``)."""
        raise NotImplementedError

    def native_bfloat16(self) -> bool:
        """Whether its array type holds bfloat16 (a torch caller's bfloat16 tensors are then handed over as they
        are, not widened to float32)."""
        return False

    def caller_view(self, array):
        """A zero-copy view, in this target's kernel array type, of a caller's array that ``adopt`` keeps as it is
        and converts results back to (a torch tensor beside a CuPy caller's arrays); the array itself by default."""
        return array

    def caller_empty(self, shape, dtype: str, like):
        """``(kernel array, caller array)`` of a new output for a caller whose arrays ``adopt`` keeps (see
        ``caller_view``), on ``like``'s device: both views of one allocation."""
        raise NotImplementedError(f"target {self.name!r} keeps no caller arrays")

    def caller_stream(self):
        """A context that runs this target's kernels in order with a kept caller's work (its stream), or None
        when they already are."""
        return None

    def device_float64(self, array):
        """``array`` as float64 on its device, for the oracle inside ``oracles.on_device()``; None where the
        oracle computes on the host (the default: no device array library the NumPy calls dispatch to)."""
        return None

    def follow_torch(self, torch, allocate: bool):
        """A context in which this target's kernel arrays follow torch's current stream (and, with ``allocate``,
        torch's caching allocator), so a ``torch.cuda.graph`` capture records them; a no-op by default."""
        return contextlib.nullcontext()

    def device_draw(self, shape, dtype: str, scale: float, rng, order: str = "C"):
        """A large real operand drawn on the device: uniform of variance ``scale**2`` (as the host draws above
        ``regions.UNIFORM_ABOVE`` elements), seeded from ``rng``, in ``order``; None where the host draws it."""
        return None


def register(target: Target) -> Target:
    """Add a target defined outside this package (a plug-in, a test) under ``target.name``; its array types are
    announced with ``register_array_type``, its candidates with ``arbiter.candidates.register`` (or a
    ``arbiter.candidates.<name>`` folder). Returns the target."""
    if not isinstance(target, Target):
        raise TypeError(f"target: expected a Target instance, got {type(target).__name__}")
    if not target.name:
        raise ValueError("target: a registered target needs a name")
    _targets[target.name] = target
    return target


def names() -> tuple[str, ...]:
    """The built-in targets' names, then those of targets added with ``register``."""
    return TARGET_NAMES + tuple(n for n in _targets if n not in TARGET_NAMES)


def get(name: str) -> Target:
    """The target called ``name``; ValueError naming it when there is no such target."""
    target = _targets.get(name)
    if target is None:
        if name not in TARGET_NAMES:
            raise ValueError(f"target: {unknown('target', name, names())}")
        module = importlib.import_module(f"arbiter.targets.{name}")
        target = _targets[name] = module.TARGET
    return target


def serving_torch(device_type: str) -> Target | None:
    """The target serving torch tensors on ``device_type`` (``"cpu"``, ``"cuda"``), or None."""
    for name in names():
        target = get(name)
        if target.torch_device == device_type:
            return target
    return None


def to_host(array) -> np.ndarray:
    """Any target's array on the host, by the target that owns it (a NumPy array as it is)."""
    if isinstance(array, np.ndarray):
        return array
    for target in list(_targets.values()):
        if target.owns(array):
            return target.to_host(array)
    return np.asarray(array)


def adopt(array):
    """``(target name, native array, back)`` for an operand, or None when no target owns it."""
    hit = _by_type.get(type(array))
    if hit is not None:
        name, adopt_fn = hit
        native, back = adopt_fn(array)
        return name, native, back
    module = type(array).__module__.split(".", 1)[0]
    candidates = {"numpy": ("cpu",), "cupy": ("nvidia",), "torch": ("nvidia", "cpu")}.get(module, ())
    for name in candidates:
        target = get(name)
        if target.owns(array):
            if module != "torch":  # torch tensors pick a target by device, so never cache them by type
                _by_type[type(array)] = (name, target.adopt)
            native, back = target.adopt(array)
            return name, native, back
    return None
