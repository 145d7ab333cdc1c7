"""Targets: where candidates run (``cpu``, ``nvidia``, ``rocm``).

A target knows which arrays it owns, whether it is available (and why not),
how to move probe data to and from the host, how to time one call
(``timer()``, repeated by ``arbiter.timing``), and which fields make up its environment key. One file a
target; nothing here imports a GPU library until that target is asked for.
"""
from __future__ import annotations

import importlib
import time
from collections.abc import Callable

import numpy as np

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
    """The contract of a target. Subclasses live one per file beside this one."""

    name: str = ""

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


def get(name: str) -> Target:
    """The target called ``name``; ValueError naming it when there is no such target."""
    target = _targets.get(name)
    if target is None:
        if name not in TARGET_NAMES:
            raise ValueError(f"target: unknown target {name!r}; known: {', '.join(TARGET_NAMES)}")
        module = importlib.import_module(f"arbiter.targets.{name}")
        target = _targets[name] = module.TARGET
    return target


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
