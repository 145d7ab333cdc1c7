"""The caller's operand layouts and ``out=`` aliasing, as the problem key carries them and the gate reproduces them.

A kernel may branch on how each operand lies in memory, so the key says it, per operand (bias, weights and
residual included), as a short token ``<class><rank>[detail]``:

====== ===========================================================================================
``R``  C-contiguous (``R2``: a row-major matrix)
``C``  reversed axis order, dense (a Fortran-order matrix: ``W.T`` of a contiguous ``W``)
``P``  axis order kept, unit inner stride, gaps between rows (a padded leading dimension: ``W[:, :K]``)
``T``  reversed axis order with gaps (a transposed padded matrix: ``W[:, :K].T``)
``M``  any other axis order (``M4o0213d``: a ``[B, S, H, D]`` buffer seen as ``[B, H, S, D]``; the digits are
       the logical axes from the outermost physical one; ``d`` dense)
``S``  no unit stride at all (``x[:, ::2]``)
``N``  negative strides on the listed axes (``N2n1``: ``x[:, ::-1]``), probed as a reversed view of dense data
``B``  broadcast: a zero stride on an axis of extent > 1 (``B2z0``: a residual broadcast over rows)
====== ===========================================================================================

``P``, ``T`` and a non-dense ``M`` end in an alignment class: ``a`` when every non-unit stride is a multiple of 16
bytes (rows start 16-byte aligned whenever the first does), ``u`` otherwise. The data pointer's own alignment is
not keyed (reading it costs 1.5 us per NumPy operand on a warm call, and the GPU kernels choose their vector path
per call): the gate probes every key with 64-byte-aligned operands (``arbiter.aligned``: what torch's allocator
gives every tensor; NumPy's own are 16-byte aligned) and, on alternate probes, with every operand and the output
one element off (``shifted``), so both paths are checked under one verdict.

An operand is *plain* when it is ``R`` (or ``C``, which the coarse layout letters already carry) at the rank the op
draws it (matrices 2, vectors 1, attention's q/k/v 4; a pointwise operand at any rank); the key lists only the
others, as the attribute ``layouts`` (``a-T2u+bias-S1``), so the keys of plain calls are unchanged.

One array passed as two operands (``attention(q, k, k)``, ``matmul(a, a)``) is keyed too (attribute ``shares``,
``v@k``: v is k), and so is a view overlapping another operand's memory (``b~a``: ``matmul(a, a.T)``; told by the
identity of the memory's owner, ``keys.memory_root``, then bounds only where the owners match), and so are the two
halves of one array (``b>a``: ``w_up`` continues ``w_gate`` along the last axis, a concatenated gate/up weight,
``keys.follows``; a kernel may read them as one). Every probe of such a key passes one array twice, the other
operand's transpose or a view of it, or the two halves of one array, where its shapes allow (``_share``).

Aliasing contract (``aliased``; docs/architecture.md): ``out=`` may be exactly an input (same memory, shape and
strides) where the op reads each input element before writing the output element at the same index: a
matmul's ``residual`` (in-place residual add), the ``x`` of softmax, rmsnorm and layernorm (in-place norm), and
any tensor operand of a pointwise chain. The key says so (attribute ``inplace``) and the gate probes it with the
same aliasing. Any other overlap of ``out`` with an input is refused with a ``RegionError`` naming ``out``.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from arbiter import aligned
from arbiter.errors import RegionError
from arbiter.keys import shared_pairs

# The rank each op draws an operand at: an operand of another rank is listed in the key.
DEFAULT_RANK = {"a": 2, "b": 2, "bias": 1, "residual": 2, "x": 2, "weight": 1, "q": 4, "k": 4, "v": 4,
                "w_gate": 2, "w_up": 2}
# (op, operand) pairs that ``out=`` may be exactly (see the module docstring).
LAYOUTS_ATTR, INPLACE_ATTR, SHARES_ATTR = "layouts", "inplace", "shares"


def _strides(array) -> tuple[int, ...]:
    """Strides in bytes (a torch tensor's are in elements)."""
    if hasattr(array, "flags") or not hasattr(array, "stride"):
        return tuple(int(s) for s in array.strides)
    return tuple(int(s) * array.element_size() for s in array.stride())


def _itemsize(array) -> int:
    return int(array.element_size()) if hasattr(array, "element_size") else int(array.dtype.itemsize)


def token(array) -> str:
    """The layout token of one operand (see the module docstring); from shape and strides only."""
    flags = getattr(array, "flags", None)
    if flags is not None and flags.c_contiguous:  # the common case, at the cost of one flag read
        return f"R{array.ndim}"
    shape = tuple(int(s) for s in array.shape)
    strides = _strides(array)
    item = _itemsize(array)
    rank = len(shape)
    live = [i for i in range(rank) if shape[i] > 1]
    zero = [i for i in live if strides[i] == 0]
    if zero:
        return f"B{rank}z" + "".join(str(i) for i in zero)
    if not live:
        return f"R{rank}"
    negative = [i for i in live if strides[i] < 0]
    if negative:  # x[:, ::-1]: the probes reverse the same axes (a kernel may read |stride| from the pointer)
        return f"N{rank}n" + "".join(str(i) for i in negative)
    order = sorted(live, key=lambda i: -strides[i])  # physical order, outermost first
    if strides[order[-1]] != item:
        return f"S{rank}"
    dense = all(strides[order[j]] == strides[order[j + 1]] * shape[order[j + 1]] for j in range(len(order) - 1))
    align = "a" if all(strides[i] % 16 == 0 for i in order[:-1]) else "u"
    if order == live:
        return f"R{rank}" if dense else f"P{rank}{align}"
    if order == live[::-1]:
        return f"C{rank}" if dense else f"T{rank}{align}"
    return f"M{rank}o" + "".join(str(i) for i in order) + ("d" if dense else align)


def plain(op: str, name: str, tok: str, rank: int | None = None) -> bool:
    """Whether operand ``name`` with token ``tok`` is what the op draws by default (left out of the key); ``rank``:
    the op's own rank for it (``Region.OPERAND_RANKS``), else ``DEFAULT_RANK``'s."""
    if op == "pointwise":  # probed 1-D: an operand in another order than x's walks apart from it in memory
        return tok[0] == "R"
    if op == "fft":
        return tok[0] == "R" or tok == "C2"
    rank = rank if rank is not None else DEFAULT_RANK.get(name)
    return rank is not None and tok in (f"R{rank}", f"C{rank}")


def key_attrs(region) -> tuple[tuple[str, str], ...]:
    """The attributes a region's key gets from its operands' layouts and its ``out=`` aliasing (none when every
    operand is plain and ``out`` overlaps nothing). Raises ``RegionError`` naming ``out`` for an illegal overlap."""
    try:
        operands = region.operands()
    except NotImplementedError:  # a region type that names no operands (a bare subclass): nothing to key
        return ()
    parts = []
    ranks = type(region).OPERAND_RANKS
    for name, array in operands.items():
        tok = token(array)
        if not plain(region.op, name, tok, ranks.get(name)):
            parts.append(f"{name}-{tok}")
    attrs: tuple[tuple[str, str], ...] = ((LAYOUTS_ATTR, "+".join(parts)),) if parts else ()
    aliased = aliased_operands(region)
    if aliased:
        attrs += ((INPLACE_ATTR, "+".join(aliased)),)
    same = shared_operands(operands)
    if same:
        attrs += ((SHARES_ATTR, "+".join(same)),)
    return attrs


def shared_operands(operands: dict) -> list[str]:
    """``["v@k"]`` where operand ``v`` is the very array ``k`` is (``attention(q, k, k)``, ``matmul(a, a)``), and
    ``["b~a"]`` where ``b`` is a view overlapping ``a``'s memory (``matmul(a, a.T)``): a kernel may exploit or be
    broken by the sharing, so the key says it and the probes reproduce it (``keys.shared_pairs``: the memory's
    owner by identity, the bounds compared only where the owners match)."""
    names = list(operands)
    arrays = list(operands.values())
    same, views = shared_pairs(arrays)
    return [f"{names[i]}@{names[j]}" for i, j in same] + [f"{names[v[0]]}{v[2] if len(v) > 2 else '~'}{names[v[1]]}"
                                                          for v in views]


def shares(attrs) -> list[tuple[str, str, str]]:
    """(operand, the operand it shares with, "@" the same array or "~" a view of its memory) from a key's
    ``shares`` attribute."""
    given = dict(attrs).get(SHARES_ATTR, "")
    found = []
    for part in given.split("+") if given else ():
        sep = next(c for c in "@>~" if c in part)
        name, other = part.split(sep, 1)
        found.append((name, other, sep))
    return found


# --- aliasing -----------------------------------------------------------------------------------------
def _pointer(array) -> int:
    if hasattr(array, "data_ptr"):  # torch
        return int(array.data_ptr())
    ptr = getattr(getattr(array, "data", None), "ptr", None)
    if ptr is not None:  # CuPy
        return int(ptr)
    return int(array.__array_interface__["data"][0])


def _extent(array) -> tuple[int, int]:
    """[lo, hi) bytes that ``array``'s elements may touch."""
    ptr = _pointer(array)
    lo = hi = 0
    for n, s in zip(array.shape, _strides(array)):
        if n == 0:
            return ptr, ptr
        lo += min(0, (n - 1) * s)
        hi += max(0, (n - 1) * s)
    return ptr + lo, ptr + hi + _itemsize(array)


def _legal(region, name: str) -> bool:
    """Whether ``out=`` may be exactly the operand ``name`` (the region type's ``INPLACE``)."""
    return any(name == p or (p.endswith("[") and name.startswith(p)) for p in type(region).INPLACE)


def aliased_operands(region) -> list[str]:
    """The operands ``region.out`` is exactly (legal in-place use), or raises ``RegionError('out', ...)`` when it
    overlaps an input any other way."""
    out = region.out
    if out is None or not math.prod(out.shape):
        return []
    numpy_out = isinstance(out, np.ndarray)
    o_lo, o_hi = (0, 0) if numpy_out else _extent(out)
    found = []
    for name, array in region.operands().items():
        if numpy_out and isinstance(array, np.ndarray):
            if not np.may_share_memory(out, array):  # bounds only, in C: the common case costs ~1 us
                continue
        else:
            lo, hi = _extent(array)
            if hi <= o_lo or o_hi <= lo:
                continue
        o_sig = (_pointer(out), tuple(out.shape), _strides(out))
        exact = (_pointer(array), tuple(array.shape), _strides(array)) == o_sig
        if exact and _legal(region, name):
            found.append(name)
            continue
        allowed = " or ".join(f"out={p}" if not p.endswith("[") else "out= a tensor operand of the chain"
                              for p in type(region).INPLACE) or "none"
        what = "is the same array as" if exact else "overlaps"
        raise RegionError("out", f"{what} input {name!r}; {region.op} writes its output while it still reads "
                                 f"that input, so the result would be wrong. In-place use allowed for "
                                 f"{region.op}: {allowed} (exactly the same array). Pass a separate out=")
    return found


def parse(attrs) -> tuple[dict[str, str], list[str]]:
    """(operand -> token, aliased operands) from a key's attributes."""
    found = dict(attrs)
    layouts = found.get(LAYOUTS_ATTR, "")
    tokens = dict(p.split("-", 1) for p in layouts.split("+")) if layouts else {}
    inplace = found.get(INPLACE_ATTR, "")
    return tokens, (inplace.split("+") if inplace else [])


# --- reproducing a layout at another shape ----------------------------------------------------------------
def _xp(array):
    if type(array).__module__.split(".", 1)[0] == "cupy":
        import cupy

        return cupy
    return np


def _rank(tok: str) -> int:
    digits = ""
    for c in tok[1:]:
        if not c.isdigit():
            break
        digits += c
    return int(digits)


def _ranked_shape(shape: tuple[int, ...], rank: int, flip: bool) -> tuple[int, ...]:
    """``shape`` as ``rank`` dimensions holding the same elements in the same order. A 2-D ``(rows, cols)`` keeps
    its last axis and splits the rows so that, where the row count has a factor, neither the first nor the
    next-to-last dimension is the row count (a kernel taking rows as ``shape[0]`` fails); ``flip`` alternates
    where a prime row count goes. A 1-D shape (a pointwise operand) is split whole."""
    if rank == len(shape) or not shape:
        return shape
    keep = (shape[-1],) if len(shape) > 1 else ()
    total = math.prod(shape[:-1]) if keep else shape[0]
    lead = rank - len(keep)
    if lead <= 0:
        return (math.prod(shape),)
    dims = [1] * lead
    p = next((f for f in range(2, math.isqrt(total) + 1) if total % f == 0), None)
    if lead == 1:
        dims[0] = total
    elif p is None:
        dims[0 if flip else lead - 1] = total
    else:
        dims[0], dims[lead - 1] = p, total // p
    return tuple(dims) + keep


def place(values, tok: str, shift: bool, poison=np.nan):
    """A new array holding ``values`` (reshaped to the token's rank where it differs) in the layout ``tok``
    describes; ``shift``: the data pointer one element past a 16-byte boundary. Padding and gaps hold ``poison``
    (NaN: a kernel that reads them as data fails)."""
    xp = _xp(values)
    kind = tok[0]
    shape = _ranked_shape(tuple(values.shape), _rank(tok), flip=shift)
    values = values.reshape(shape)
    item = values.dtype.itemsize
    if kind == "N":  # a dense copy of the values reversed on the axes, seen reversed again: negative strides there
        flipped = tuple(a for a in (int(c) for c in tok.split("n", 1)[1]) if a < len(shape))
        return xp.flip(place(xp.flip(values, axis=flipped), f"R{len(shape)}", shift, poison), axis=flipped)
    if kind == "B":
        axes = [int(c) for c in tok.split("z", 1)[1]]
        index = tuple(slice(0, 1) if i in axes else slice(None) for i in range(len(shape)))
        return xp.broadcast_to(place(values[index], f"R{len(shape)}", shift, poison), shape)
    if kind in ("C", "T"):
        order = list(range(len(shape)))[::-1]
    elif kind == "M":  # the token's physical order; axes it does not list (extent 1 there) outermost
        listed = [int(c) for c in tok.split("o", 1)[1].rstrip("dau")]
        order = [i for i in range(len(shape)) if i not in listed] + listed
    else:
        order = list(range(len(shape)))
    phys = [shape[i] for i in order]
    buf_shape, step = list(phys), 1
    padded = kind in ("P", "T") or (kind == "M" and tok[-1] in "au")
    if phys and kind == "S":
        buf_shape[-1], step = max(1, 2 * phys[-1]), 2
    elif phys and padded:
        per16 = max(1, 16 // item)
        inner = phys[-1]
        if tok[-1] == "a":
            buf_shape[-1] = (inner + per16) // per16 * per16
        else:  # a row pitch that is not a multiple of 16 bytes
            buf_shape[-1] = inner + 1 if ((inner + 1) * item) % 16 else inner + 2
    offset = 1 if shift and item < 16 else 0
    size = math.prod(buf_shape)
    if xp is np:  # 64-byte aligned as torch's tensors are, or one element past that (``arbiter.aligned``)
        flat = aligned.empty((offset + size,), values.dtype)
    else:  # (device allocations are 256-byte aligned)
        flat = xp.empty((offset + size,), dtype=values.dtype)
    if buf_shape == phys:  # dense: no gaps to poison (a fill pass costs as much as the copy at large shapes)
        flat[:offset] = poison
    else:
        flat[...] = poison
    buf = flat[offset:].reshape(buf_shape)
    if phys:
        buf = buf[tuple(slice(0, n) for n in phys[:-1]) + (slice(0, step * phys[-1], step),)]
    view = buf.transpose([order.index(i) for i in range(len(shape))])
    view[...] = values
    return view


def reproduce(fresh, attrs, shift: bool) -> dict:
    """Put ``fresh``'s operands (a probe drawn plain) in the layouts ``attrs`` names (a key's attributes);
    ``shift``: every operand one element off a 16-byte boundary. Returns the operands it replaced, by name."""
    tokens, _ = parse(attrs)
    if not tokens and not shift:
        return _share(fresh, attrs, {})
    axis_last = getattr(fresh, "axis_last", None)
    # a pointwise chain's operands share one shape: a listed rank applies to every operand
    chain_rank = _rank(next(iter(tokens.values()))) if fresh.op == "pointwise" and tokens else None
    replaced: dict[str, Any] = {}
    for name, array in fresh.operands().items():
        tok = tokens.get(name)
        if tok is None and chain_rank is not None and chain_rank != array.ndim:
            tok = f"R{chain_rank}"
        if tok is None:
            if not shift:
                continue
            tok = token(array)
            if tok[0] == "B":  # drawn plain: only the caller's broadcast is one
                continue
        if axis_last is False and _rank(tok) != array.ndim:  # softmax over an inner axis of x of another rank
            inner = dict(attrs).get("axis", "inner")[5:]
            if name == "x" and inner.isdigit() and _rank(tok) > 2:  # at its place in x's rank, as called
                array = _inner_axis(array, _rank(tok), int(inner), flip=shift)
                fresh.axis = int(inner)
            else:
                tok = tok[0] + str(array.ndim) + tok[1 + len(str(_rank(tok))):]
        replaced[name] = place(array, tok, shift)
    set_operands(fresh, replaced)
    if axis_last and "x" in replaced:  # a row op at another rank: still over the last axis
        fresh.axis = replaced["x"].ndim - 1
    return _share(fresh, attrs, replaced)


def _inner_axis(x, rank: int, axis: int, flip: bool):
    """A 2-D probe ``x`` (cols, rows) reduced over axis 0 as x of ``rank`` dimensions reduced over ``axis``: the
    rows split between the axes before it and after it (both of extent > 1 where the row count has a factor;
    ``flip`` alternates which side a prime count goes), the same values along each reduced column."""
    cols, rows = x.shape
    p = next((f for f in range(2, math.isqrt(rows) + 1) if rows % f == 0), None)
    outer = p if p is not None else (rows if flip and rows else 1)  # (no rows: an empty x of that rank)
    before = [outer] + [1] * (axis - 1) if axis else []
    after = [rows // outer] + [1] * (rank - axis - 2) if axis < rank - 1 else []
    if not before:  # the axis is the first: every row after it
        after = [rows] + [1] * (rank - 2)
    split = x.reshape(cols, math.prod(before), math.prod(after))
    return _xp(x).ascontiguousarray(split.transpose(1, 0, 2)).reshape(tuple(before) + (cols,) + tuple(after))


def _share(fresh, attrs, replaced: dict) -> dict:
    """Make the operands the key's ``shares`` names share memory as the caller's did, where the probe's shapes
    allow (a skewed probe of ``matmul(a, a)`` has m != k: drawn apart there): ``v@k`` one array; ``b>a`` the two
    halves of one array (``keys.follows``: ``a`` its first, ``b`` its second, in the caller's order); ``b~a`` the
    other operand's transpose where the shapes are transposed (``matmul(a, a.T)``), a view of it where they are
    equal, else drawn apart."""
    for name, first, sep in shares(attrs):
        operands = fresh.operands()
        a, b = operands.get(name), operands.get(first)
        if a is None or b is None or a.dtype != b.dtype:
            continue
        if sep == "@":
            if a.shape == b.shape:
                set_operands(fresh, {name: b})
                replaced[name] = b
        elif sep == ">":  # the halves of one array, as the caller's (one concatenated gate/up weight)
            if a.shape == b.shape and a.ndim:
                xp = _xp(b)
                whole = xp.concatenate([b, a], axis=-1)
                if b.ndim == 2 and b.strides[0] < b.strides[1]:  # column-major halves (a torch Linear weight's .T)
                    whole = xp.asfortranarray(whole)
                n = b.shape[-1]
                set_operands(fresh, {first: whole[..., :n], name: whole[..., n:]})
                replaced[first], replaced[name] = whole[..., :n], whole[..., n:]
        elif b.ndim == 2 and tuple(a.shape) == tuple(b.shape)[::-1]:
            set_operands(fresh, {name: b.T})
            replaced[name] = b.T
        elif a.shape == b.shape:  # another array object over the same memory (``q[:]``)
            set_operands(fresh, {name: b[...]})
            replaced[name] = b[...]
    return replaced


def set_operands(region, arrays: dict) -> None:
    """Replace ``region``'s operands by name (``ops[i]`` inside a pointwise chain)."""
    chain = {int(n[4:-1]): a for n, a in arrays.items() if n.startswith("ops[")}
    for name, array in arrays.items():
        if not name.startswith("ops["):
            object.__setattr__(region, name, array)
    if chain:
        region.ops = tuple((step, chain.get(i, operand)) for i, (step, operand) in enumerate(region.ops))


def packed_reason(region) -> bool | str:
    """True when every operand of ``region`` is C-contiguous (``R`` at any rank), else why a kernel that reads its
    operands as packed arrays through their pointers must decline (a strided bias or weight, a broadcast
    residual: it would read the wrong elements, or past a broadcast operand's one row)."""
    tokens, _ = parse(getattr(region, "attrs", ()))
    odd = [f"{name} {tok}" for name, tok in tokens.items() if tok[0] != "R"]
    if not odd:
        return True
    return (f"operand layouts {', '.join(odd)} (arbiter.layouts): the kernel reads packed operands through their "
            "pointers; the vendor candidates serve these")
