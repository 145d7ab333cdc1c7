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

import sys
from typing import Any

import numpy as np

from arbiter.keys import memory_root, shared_pairs
from arbiter.memo import Memo

# The memo is emptied when its recipes would hold more than this (a shape-churning caller, e.g. varying batch
# sizes, must not grow it forever: 65,536 recipes held about 240 MiB). A softmax recipe is about 3.4 KiB
# (tracemalloc), so this keeps some 4,000 to 5,000 signatures; ``_cost`` overestimates, never under.
_BUDGET = 16 << 20
SCALAR, TORCH, CUPY, NUMPY, OTHER = range(5)  # argument families: how a signature reads an argument
# type -> family; scalars are known from the start, array types are classified when first seen.
_families: Memo = Memo({t: SCALAR for t in (type(None), bool, int, float, str, np.float16, np.float32, np.float64,
                                             np.int32, np.int64, np.bool_)})
_MISSING = object()
# family -> an array's (shape, dtype, strides, device): what a signature holds for it. torch's strides are in
# elements; CuPy's device is its pointer's; NumPy's is None.
_FIELDS = {
    TORCH: lambda v: (v.shape, v.dtype, v.stride(), v.device),
    CUPY: lambda v: (v.shape, v.dtype, v.strides, v.data.device_id),
    NUMPY: lambda v: (v.shape, v.dtype, v.strides, None),
}


def _family_of(value) -> int:
    kind = type(value)
    family = _families.get(kind)
    if family is None:
        module = kind.__module__
        family = _families[kind] = (TORCH if module.startswith("torch") else CUPY if module.startswith("cupy")
                                    else NUMPY if isinstance(value, np.ndarray) else OTHER)
    return family


def operand_signature(array) -> tuple | None:
    """(array type, shape, dtype, strides, device) of a torch, CuPy or NumPy array; None for anything else.
    Cheap on purpose: a memo hit and a bound call compute it for every operand."""
    fields = _FIELDS.get(_family_of(array))
    return None if fields is None else (type(array), *fields(array))


def recipe_of(region, values: tuple, arrays: frozenset):
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
    return _builder(type(region), fixed, places, torch_names)


def _builder(cls, fixed, places, torch_names):
    """``build(values)``: a new ``cls`` with the ``fixed`` slot values and the operands of ``values`` in their
    ``places``, as straight-line code (one attribute store a slot: a memo hit's whole construction)."""
    namespace: dict[str, Any] = {"new": object.__new__, "cls": cls}
    lines = ["def build(values):", "    r = new(cls)"]
    for i, (slot, value) in enumerate(fixed):
        namespace[f"c{i}"] = value
        lines.append(f"    r.{slot} = c{i}")
    lines += [f"    r.{slot} = values[{index}]" for index, slot in places]
    if torch_names is not None:  # a torch caller's tensors: this call's own
        lines.append("    r.torch_in = {" + ", ".join(f"{name!r}: values[{i}]" for name, i in torch_names) + "}")
    lines.append("    return r")
    exec("\n".join(lines), namespace)  # slot names are identifiers and names are repr'd: nothing else enters
    return namespace.pop("build")  # not kept in its own globals: no cycle, freed as soon as the memo drops it


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


def _cost(sig: tuple, build) -> int:
    """Bytes a recipe holds, estimated from above: its signature and, for a build function, the function,
    its code, its namespace and the slot values it keeps (objects shared between recipes, such as small ints or
    a problem key, are counted again; the builtins and the class are not)."""
    n = sys.getsizeof(sig) + sum(sys.getsizeof(v) for v in sig)
    if build is not None:
        code, namespace = build.__code__, build.__globals__
        n += (sys.getsizeof(build) + sys.getsizeof(code) + sys.getsizeof(code.co_code)
              + sys.getsizeof(code.co_consts) + sys.getsizeof(code.co_names) + sys.getsizeof(namespace)
              + sum(sys.getsizeof(v) for k, v in namespace.items() if k[0] == "c" and k[1:].isdigit()))
    return n


class Recipes(Memo):
    """signature -> build function (None: the full path), bounded by the bytes they hold (``_BUDGET``):
    emptied when the next recipe would pass it. ``held`` is the estimate (``_cost``) of what it holds now."""

    __slots__ = ("held",)

    def __init__(self):
        super().__init__()
        self.held = 0

    def clear(self) -> None:
        super().clear()
        self.held = 0

    def put(self, sig: tuple, build) -> None:
        cost = _cost(sig, build)
        if self.held + cost > _BUDGET:
            self.clear()
        self[sig] = build
        self.held += cost


class Memoized(type):
    """The metaclass of regions: ``Region(...)`` consults the recipe memo before validating.

    A signature is a flat tuple: the class, the keyword names, then per argument its type followed by its
    value (a scalar) or its shape, dtype, strides and device (an array); the type says how many fields follow.
    State outside the arguments that a region's key reads (the caller's consent to looser accuracy) clears
    the memo when it changes (``regions.consent_to_looser``)."""

    recipes: Recipes = Recipes()  # signature -> build function, or None for a signature that takes the full path

    def __call__(cls, *args, **kwargs):
        if kwargs and kwargs.get("out") is not None:  # per-call checks (writability): never memoized
            return type.__call__(cls, *args, **kwargs)
        found = signature(cls, args, kwargs)
        if found is None:  # a sequence, a foreign object: the full path validates (and refuses) it
            return type.__call__(cls, *args, **kwargs)
        sig, values, arrays = found
        recipes = Memoized.recipes
        try:
            build = recipes.get(sig, _MISSING)
        except TypeError:  # an unhashable part (a scalar subclass with odd hashing): the full path
            return type.__call__(cls, *args, **kwargs)
        if build is not _MISSING and build is not None:
            return build(values)
        region = type.__call__(cls, *args, **kwargs)
        if build is _MISSING:
            recipes.put(sig, recipe_of(region, values, frozenset(arrays)))
            region.first_call = True  # a signature new to this process: its call is checked (arbiter.audit)
        return region


def signature(cls, args: tuple, kwargs: dict):
    """(signature, argument values, indices of the array arguments) of ``cls(*args, **kwargs)``, or None when
    an argument is neither a plain scalar nor an array the memo knows (see ``Memoized``)."""
    if kwargs:
        values = args + tuple(kwargs.values())
        sig = [cls, tuple(kwargs)]
    else:
        values, sig = args, [cls]
    extend = sig.extend
    arrays = []
    roots = []  # the memory's owner of each array (``keys.memory_root``), read inline: this is the hot path
    for i, v in enumerate(values):
        kind = type(v)
        family = _families.get(kind)
        if family is None:
            family = _family_of(v)
        if family == TORCH:  # a torch caller's tensors: the hot case, read inline (_FIELDS[TORCH])
            extend((kind, v.shape, v.dtype, v.stride(), v.device))
            arrays.append(i)
            base = v._base
            roots.append(v if base is None else base)
        elif family == SCALAR:
            extend((kind, v))
        else:
            fields = _FIELDS.get(family)
            if fields is None:
                return None
            extend((kind, *fields(v)))
            arrays.append(i)
            base = v.base  # (NumPy's and CuPy's; a NumPy view of something else: its own walk)
            roots.append(v if base is None else base if type(base) is np.ndarray else memory_root(v))
    if len(arrays) > 1:  # one array passed twice (attention(q, k, k)), or a view overlapping another (a, a.T),
        # key apart: the pairs (positions among the arrays) join the signature
        same, views = shared_pairs([values[i] for i in arrays], roots)
        if same:
            extend(("same", *same))
        if views:
            extend(("views", *views))
    return tuple(sig), values, arrays


def builder_for(cls, args: tuple, kwargs: dict):
    """The build function recorded for ``cls(*args, **kwargs)``'s signature (call ``cls`` with them first), or
    None where that signature takes the full path. ``build(values)`` reads only the array positions of
    ``values`` (positional arguments, then keyword values in ``kwargs``' order): a bound handle puts its new
    operands there (``arbiter.bind``)."""
    found = signature(cls, args, kwargs)
    if found is None:
        return None
    try:
        build = Memoized.recipes.get(found[0])
    except TypeError:
        return None
    return build or None
