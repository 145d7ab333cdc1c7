"""Regions: one problem instance each (an op's attributes plus its operands).

A region validates its operands once, at construction, and raises
``RegionError`` naming the argument at fault. It then carries its
``ProblemKey``, computed from shapes, dtypes and strides only.

Every region type also knows how to build a fresh random instance of itself at
other dimensions (``resized``): the F4 gate probes the real shape and the
bucket's edge shapes with it.
"""
from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from arbiter import targets
from arbiter.errors import RegionError
from arbiter.keys import POW2, ProblemKey, bucket_of, layout_class

DTYPES = ("float16", "bfloat16", "float32", "float64")
# dtype -> name, filled as dtypes are seen: str(dtype) costs microseconds, a dict hit 50 ns.
_dtype_names: dict = {}
# (target, op, dtype, layout, attrs, dims) -> ProblemKey: a warm shape builds no key.
_keys: dict = {}
_KEYS_MAX = 65536


def dtype_name(dtype) -> str:
    name = _dtype_names.get(dtype)
    if name is None:
        name = _dtype_names[dtype] = str(dtype)
    return name
ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")


class Region:
    """Base of all region types. Subclasses set ``op`` and fill the slots via ``_finish``."""

    op: ClassVar[str] = ""
    DIMS: ClassVar[tuple[str, ...]] = ()  # the named dimensions, in the order `--shape AxBxC` gives them
    # Per-dimension bucket policies; a dimension not named here uses POW2.
    bucket_policy: ClassVar[dict] = {}

    __slots__ = ("target", "dtype", "key", "out", "back", "dims", "attrs", "layout")

    # -- construction helpers -------------------------------------------------
    def _adopt(self, argument: str, array, target: str | None = None):
        """Validate one operand: an array of a supported dtype on the region's target."""
        if not hasattr(array, "shape") or not hasattr(array, "dtype"):
            raise RegionError(argument, f"expected an array, got {type(array).__name__}")
        found = targets.adopt(array)
        if found is None:
            raise RegionError(argument, f"no target owns arrays of type {type(array).__module__}."
                                        f"{type(array).__name__}")
        name, native, back = found
        if target is not None and name != target:
            raise RegionError(argument, f"lives on target {name!r}, but the first operand is on {target!r}; "
                                        "move all operands to one device")
        dtype = dtype_name(native.dtype)
        if dtype not in DTYPES:
            raise RegionError(argument, f"dtype {dtype} is not supported; use one of {', '.join(DTYPES)}")
        return name, native, back

    def _same_dtype(self, argument: str, array):
        if dtype_name(array.dtype) != self.dtype:
            raise RegionError(argument, f"dtype {array.dtype} differs from the region's {self.dtype}; "
                                        "cast operands to one dtype")

    def _check_out(self, out, shape):
        if out is None:
            self.out = None
            return
        _, native, _ = self._adopt("out", out, self.target)
        self._same_dtype("out", native)
        if tuple(native.shape) != tuple(shape):
            raise RegionError("out", f"shape {tuple(native.shape)} should be {tuple(shape)}")
        if not native.flags.c_contiguous:
            raise RegionError("out", "must be C-contiguous")
        self.out = native

    def _finish(self, layout: str, dims: dict, attrs: tuple):
        self.layout = layout
        self.dims = dims
        self.attrs = attrs
        sig = (self.target, self.op, self.dtype, layout, attrs, tuple(dims.values()))
        key = _keys.get(sig)
        if key is None:
            if len(_keys) >= _KEYS_MAX:
                _keys.clear()
            key = _keys[sig] = ProblemKey.make(self.target, self.op, self.dtype, layout, attrs,
                                               bucket_of(dims, self.bucket_policy))
        self.key = key

    # -- what every region type provides --------------------------------------
    def operands(self) -> dict:
        """The named input arrays, in the order the oracle takes them."""
        raise NotImplementedError

    def output_shape(self) -> tuple[int, ...]:
        raise NotImplementedError

    @classmethod
    def random(cls, target: str, dtype: str, dims: dict, attrs: dict | None = None, layout: str | None = None,
               rng: np.random.Generator | None = None) -> "Region":
        """A random instance (seeded, never zeros) described by target, dtype, dims, attrs and layout."""
        raise NotImplementedError

    def resized(self, dims: dict, rng: np.random.Generator) -> "Region":
        """A fresh random region with the same attributes, dtype, target and layout, at ``dims``."""
        raise NotImplementedError

    def fresh(self, rng: np.random.Generator) -> "Region":
        return self.resized(self.dims, rng)

    def with_out(self, out) -> "Region":
        """A shallow copy of this region that writes into ``out`` (used for poisoning)."""
        clone = object.__new__(type(self))
        for cls in type(self).__mro__:
            for slot in getattr(cls, "__slots__", ()):
                if hasattr(self, slot):
                    object.__setattr__(clone, slot, getattr(self, slot))
        clone.out = out
        return clone

    @property
    def has_epilogue(self) -> bool:
        """True when the region fuses work after its root op (a root_only delegate can't serve it)."""
        return False

    def alloc_out(self):
        """The output buffer: ``out`` when the caller (or the gate) gave one, else a new C-contiguous array."""
        if self.out is not None:
            return self.out
        return _empty_like_target(self.target, self.output_shape(), self.dtype)

    def shape_text(self) -> str:
        return "x".join(str(v) for v in self.dims.values())

    def __repr__(self):
        return f"{type(self).__name__}({self.shape_text()} {self.dtype} on {self.target}, key={self.key.id})"


def _empty_like_target(target: str, shape, dtype: str):
    t = targets.get(target)
    return t.full(shape, np.nan, dtype) if target != "cpu" else np.empty(shape, dtype=_np(dtype))


def _np(dtype: str):
    from arbiter.targets.cpu import np_dtype

    return np_dtype(dtype)


def random_operand(target: str, shape, dtype: str, layout: str, rng, scale: float = 1.0):
    """Seeded random data (never zeros) of ``shape`` in the given layout class on ``target``."""
    t = targets.get(target)
    if layout == "S" and len(shape) >= 1:
        # A strided view: every other element of a wider buffer along the last axis.
        wide = tuple(shape[:-1]) + (max(1, shape[-1] * 2),)
        base = t.from_host(scale * rng.standard_normal(wide), dtype)
        return base[..., ::2][..., : shape[-1]]
    data = scale * rng.standard_normal(shape)
    return t.from_host(data, dtype, order="F" if layout == "C" else "C")


# ---------------------------------------------------------------------------
class Matmul(Region):
    """``out = activation(a @ b + bias) + residual`` for 2-D ``a [M,K]``, ``b [K,N]``.

    ``bias`` is ``[N]``, ``residual`` is ``[M,N]``; ``activation`` is one of
    ``none``, ``relu``, ``gelu`` (exact erf form, PyTorch's default),
    ``gelu_tanh`` (tanh approximation), ``silu``.
    """

    op = "matmul"
    DIMS = ("m", "n", "k")
    __slots__ = ("a", "b", "bias", "activation", "residual")

    def __init__(self, a, b, bias=None, activation: str = "none", residual=None, *, out=None):
        self.target, self.a, self.back = self._adopt("a", a)
        self.dtype = dtype_name(self.a.dtype)
        _, self.b, _ = self._adopt("b", b, self.target)
        self._same_dtype("b", self.b)
        if self.a.ndim != 2:
            raise RegionError("a", f"must be 2-D [M, K], got shape {tuple(self.a.shape)}")
        if self.b.ndim != 2:
            raise RegionError("b", f"must be 2-D [K, N], got shape {tuple(self.b.shape)}")
        m, k = self.a.shape
        k2, n = self.b.shape
        if k != k2:
            raise RegionError("b", f"shape {tuple(self.b.shape)} does not match a's inner dimension K={k}")
        if activation not in ACTIVATIONS:
            raise RegionError("activation", f"{activation!r} is not one of {', '.join(ACTIVATIONS)}")
        self.activation = activation
        self.bias = None
        if bias is not None:
            _, self.bias, _ = self._adopt("bias", bias, self.target)
            self._same_dtype("bias", self.bias)
            if tuple(self.bias.shape) != (n,):
                raise RegionError("bias", f"shape {tuple(self.bias.shape)} should be ({n},)")
        self.residual = None
        if residual is not None:
            _, self.residual, _ = self._adopt("residual", residual, self.target)
            self._same_dtype("residual", self.residual)
            if tuple(self.residual.shape) != (m, n):
                raise RegionError("residual", f"shape {tuple(self.residual.shape)} should be ({m}, {n})")
        self._check_out(out, (m, n))
        layout = layout_class(self.a) + layout_class(self.b)
        if self.residual is not None and layout_class(self.residual) != "R":
            layout += "S"  # a strided residual is its own layout class
        self._finish(layout, {"m": m, "n": n, "k": k},
                     (("activation", activation), ("bias", "1" if bias is not None else "0"),
                      ("residual", "1" if residual is not None else "0")))

    @property
    def has_epilogue(self):
        return self.activation != "none" or self.bias is not None or self.residual is not None

    def operands(self):
        ops = {"a": self.a, "b": self.b}
        if self.bias is not None:
            ops["bias"] = self.bias
        if self.residual is not None:
            ops["residual"] = self.residual
        return ops

    def output_shape(self):
        return (self.dims["m"], self.dims["n"])

    @classmethod
    def random(cls, target: str, dtype: str, dims: dict, attrs: dict | None = None, layout: str = "RR",
               rng: np.random.Generator | None = None) -> "Matmul":
        """A random instance: ``dims`` has m, n, k; ``attrs`` may set activation, bias, residual."""
        attrs = dict(attrs or {})
        rng = rng if rng is not None else np.random.default_rng(0)
        m, n, k = dims["m"], dims["n"], dims["k"]
        # Scale b so every output has unit variance whatever K is.
        a = random_operand(target, (m, k), dtype, layout[0], rng)
        b = random_operand(target, (k, n), dtype, layout[1], rng, scale=1.0 / math.sqrt(max(k, 1)))
        bias = random_operand(target, (n,), dtype, "R", rng) if _flag(attrs.get("bias")) else None
        res = (random_operand(target, (m, n), dtype, "S" if len(layout) > 2 else "R", rng)
               if _flag(attrs.get("residual")) else None)
        return cls(a, b, bias=bias, activation=attrs.get("activation", "none"), residual=res)

    def resized(self, dims, rng):
        return self.random(self.target, self.dtype, dims, dict(self.attrs), self.layout, rng)


def _flag(value) -> bool:
    return value in (True, 1, "1", "true", "yes")


class _RowRegion(Region):
    """Shared validation of ops that reduce over one axis of ``x`` (softmax, norms)."""

    DIMS = ("rows", "cols")
    __slots__ = ("x", "axis")

    def _rows(self, x, axis: int):
        self.target, self.x, self.back = self._adopt("x", x)
        self.dtype = dtype_name(self.x.dtype)
        if self.x.ndim < 1:
            raise RegionError("x", "must have at least one dimension")
        if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
            raise RegionError("axis", f"must be an int, got {type(axis).__name__}")
        if not -self.x.ndim <= axis < self.x.ndim:
            raise RegionError("axis", f"{axis} is out of range for x with {self.x.ndim} dimensions")
        self.axis = int(axis) % self.x.ndim
        cols = self.x.shape[self.axis]
        rows = math.prod(self.x.shape) // cols if cols else math.prod(
            s for i, s in enumerate(self.x.shape) if i != self.axis)
        return rows, cols

    @property
    def axis_last(self) -> bool:
        return self.axis == self.x.ndim - 1

    def output_shape(self):
        return tuple(self.x.shape)

    @classmethod
    def _random_x(cls, target, dtype, dims, axis_last: bool, layout: str, rng):
        rows, cols = dims["rows"], dims["cols"]
        shape = (rows, cols) if axis_last else (cols, rows)
        return random_operand(target, shape, dtype, "R" if layout == "R" else "S", rng, scale=2.0)


class Softmax(_RowRegion):
    """``out = exp(x - max) / sum(exp(x - max))`` along ``axis``."""

    op = "softmax"
    __slots__ = ()

    def __init__(self, x, axis: int = -1, *, out=None):
        rows, cols = self._rows(x, axis)
        self._check_out(out, self.x.shape)
        self._finish(layout_class(self.x), {"rows": rows, "cols": cols},
                     (("axis", "last" if self.axis_last else "inner"),))

    def operands(self):
        return {"x": self.x}

    @classmethod
    def random(cls, target: str, dtype: str, dims: dict, attrs: dict | None = None, layout: str = "R",
               rng: np.random.Generator | None = None) -> "Softmax":
        """A random instance: ``dims`` has rows, cols; ``attrs`` may set axis ('last' or 'inner')."""
        last = (attrs or {}).get("axis", "last") == "last"
        rng = rng if rng is not None else np.random.default_rng(0)
        return cls(cls._random_x(target, dtype, dims, last, layout, rng), axis=-1 if last else 0)

    def resized(self, dims, rng):
        return self.random(self.target, self.dtype, dims, dict(self.attrs), self.layout, rng)


class RMSNorm(_RowRegion):
    """``out = x / sqrt(mean(x**2, axis=-1) + eps) * weight`` over the last axis.

    ``eps`` is a runtime scalar, not part of the problem key: it changes no kernel's structure.
    """

    op = "rmsnorm"
    __slots__ = ("weight", "eps")

    def __init__(self, x, weight, eps: float = 1e-6, *, out=None):
        rows, cols = self._rows(x, -1)
        _, self.weight, _ = self._adopt("weight", weight, self.target)
        self._same_dtype("weight", self.weight)
        if tuple(self.weight.shape) != (cols,):
            raise RegionError("weight", f"shape {tuple(self.weight.shape)} should be ({cols},), "
                                        "the size of x's last axis")
        if isinstance(eps, bool) or not isinstance(eps, (int, float, np.floating)) or not eps > 0 \
                or not math.isfinite(eps):
            raise RegionError("eps", f"must be a finite number > 0, got {eps!r}")
        self.eps = float(eps)
        self._check_out(out, self.x.shape)
        self._finish(layout_class(self.x), {"rows": rows, "cols": cols}, ())

    def operands(self):
        return {"x": self.x, "weight": self.weight}

    @classmethod
    def random(cls, target: str, dtype: str, dims: dict, attrs: dict | None = None, layout: str = "R",
               rng: np.random.Generator | None = None, eps: float = 1e-6) -> "RMSNorm":
        """A random instance: ``dims`` has rows, cols."""
        rng = rng if rng is not None else np.random.default_rng(0)
        x = cls._random_x(target, dtype, dims, True, layout, rng)
        return cls(x, random_operand(target, (dims["cols"],), dtype, "R", rng), eps=eps)

    def resized(self, dims, rng):
        return self.random(self.target, self.dtype, dims, None, self.layout, rng, eps=self.eps)
