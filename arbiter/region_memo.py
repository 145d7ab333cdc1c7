"""Region construction memo: a region built again for operands of the same signature skips validation.

A region's validation and problem key depend only on its operands' signatures (array type, shape, dtype,
strides, device) and its scalar arguments, never on the data. So the first construction for a signature
records a *recipe*: the slots it computed (target, dtype, key, dims, attrs, scalars, ...) and, for each
operand slot, which argument it holds. The next construction with the same signature copies those slots
and puts this call's arrays in place: no per-operand target lookup, layout test or key build. Measured on
an H200 this is what a user's ``run_arbitrated("rmsnorm", RMSNorm(x, w))`` spends most of its host time on.

A signature is memoized only when every operand slot holds one of the arguments as it was passed (a
converted operand, such as a torch CPU tensor seen as NumPy or a torch tensor among CuPy arrays, keeps
the full path), no other slot holds an array, and every non-array argument is a plain scalar, string or
None. ``out=`` always takes the full path (its writability and aliasing are per call). A recipe holds no
array, so the memo keeps no operand alive. Errors are never memoized: a failing construction raises each
time.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from arbiter.memo import Memo

_SCALARS = frozenset((type(None), bool, int, float, str, np.float16, np.float32, np.float64, np.int32, np.int64,
                      np.bool_))
_MAX = 65536  # recipes; the memo is cleared when full (a shape-churning caller must not grow it forever)


def operand_signature(a) -> tuple | None:
    """(array type, shape, dtype, strides, device) of an operand; None for a type the memo does not know.

    Cheap on purpose: every construction with a memo hit computes it for every operand."""
    kind = type(a)
    family = _families.get(kind)
    if family is None:
        module = kind.__module__
        family = _families[kind] = ("torch" if module.startswith("torch") else "cupy" if module.startswith("cupy")
                                    else "numpy" if isinstance(a, np.ndarray) else "")
    if family == "torch":
        return (kind, a.shape, a.dtype, a.stride(), a.device)
    if family == "cupy":
        return (kind, a.shape, a.dtype, a.strides, a.data.device_id)
    if family == "numpy":
        return (kind, a.shape, a.dtype, a.strides, None)
    return None


_families: Memo = Memo()  # array type -> "torch" | "cupy" | "numpy" | "" (not an array the memo knows)


class Recipe:
    """How to rebuild a region of one signature from new arguments (see the module docstring)."""

    __slots__ = ("cls", "fixed", "places", "torch_names")

    def __init__(self, cls, fixed, places, torch_names):
        self.cls, self.fixed, self.places, self.torch_names = cls, fixed, places, torch_names

    def build(self, values):
        region = object.__new__(self.cls)
        put = object.__setattr__
        for slot, value in self.fixed:
            put(region, slot, value)
        for index, slot in self.places:
            put(region, slot, values[index])
        if self.torch_names is not None:  # a torch caller's tensors, this call's own
            region.torch_in = {name: values[index] for name, index in self.torch_names}
        return region


def recipe_of(region, values: tuple, arrays: frozenset) -> Recipe | None:
    """The recipe that rebuilds ``region`` from arguments ``values`` (``arrays``: the indices of the array
    arguments), or None when it cannot be rebuilt that way (a converted operand, a derived array)."""
    fixed: list[tuple[str, Any]] = []
    places: list[tuple[int, str]] = []
    placed: set[int] = set()
    for slot in slots_of(type(region)):
        if slot in ("torch_in", "torch_out") or not hasattr(region, slot):
            continue
        value = getattr(region, slot)
        index = next((i for i in arrays if values[i] is value), None)
        if index is not None:
            places.append((index, slot))
            placed.add(index)
        elif hasattr(value, "shape") or (isinstance(value, (tuple, list, dict)) and _holds_array(value)):
            return None  # an array the arguments do not give (converted, or derived from them)
        else:
            fixed.append((slot, value))
    if placed != set(arrays):
        return None  # an argument the region keeps only in a converted form
    torch_names = None
    given = getattr(region, "torch_in", None)
    if given is not None:
        names = []
        for name, tensor in given.items():
            index = next((i for i in arrays if values[i] is tensor), None)
            if index is None:
                return None
            names.append((name, index))
        torch_names = tuple(names)
    fixed.append(("torch_out", None))
    if given is None:
        fixed.append(("torch_in", None))
    return Recipe(type(region), tuple(fixed), tuple(places), torch_names)


def _holds_array(value) -> bool:
    items = value.values() if isinstance(value, dict) else value
    return any(hasattr(v, "shape") or (isinstance(v, (tuple, list, dict)) and _holds_array(v)) for v in items)


_slots: Memo = Memo()


def slots_of(cls) -> tuple[str, ...]:
    """Every slot name of ``cls`` and its bases (what a copy of a region must carry)."""
    names = _slots.get(cls)
    if names is None:
        names = _slots[cls] = tuple(s for c in cls.__mro__ for s in getattr(c, "__slots__", ()))
    return names


class Memoized(type):
    """The metaclass of regions: ``Region(...)`` consults the recipe memo before validating.

    State outside the arguments that a region's key reads (the caller's consent to looser accuracy) clears
    the memo when it changes (``regions.consent_to_looser``)."""

    recipes: Memo = Memo()  # signature -> Recipe, or None for a signature that takes the full path

    def __call__(cls, *args, **kwargs):
        if kwargs.get("out") is not None or not cls.memoizable:  # type: ignore[attr-defined]  # Region's
            return super().__call__(*args, **kwargs)
        values = args + tuple(kwargs.values()) if kwargs else args
        parts: list = [cls, tuple(kwargs) if kwargs else ()]
        arrays = []
        for i, v in enumerate(values):
            kind = type(v)
            if kind in _SCALARS:
                parts.append((kind, v))
                continue
            sig = operand_signature(v)
            if sig is None:  # a sequence, a foreign object: the full path validates (and refuses) it
                return super().__call__(*args, **kwargs)
            parts.append(sig)
            arrays.append(i)
        signature = tuple(parts)
        recipes = Memoized.recipes
        try:
            recipe = recipes.get(signature, False)
        except TypeError:  # an unhashable part (a scalar subclass with odd hashing): the full path
            return super().__call__(*args, **kwargs)
        if recipe:
            return recipe.build(values)
        region = super().__call__(*args, **kwargs)
        if recipe is False:
            if len(recipes) >= _MAX:
                recipes.clear()
            recipes[signature] = recipe_of(region, values, frozenset(arrays))
        return region
