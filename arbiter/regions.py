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
import os
from typing import Any, ClassVar

import numpy as np

from arbiter import aligned, layouts, targets
from arbiter.errors import RegionError
from arbiter.keys import EXACT, ProblemKey, bucket_of, layout_class
from arbiter.memo import Memo
from arbiter.region_memo import Memoized, slots_of

DTYPES = ("float16", "bfloat16", "float32", "float64")
# dtype -> name, filled as dtypes are seen: str(dtype) costs microseconds, a dict hit 50 ns.
_dtype_names: Memo = Memo()
# (target, op, dtype, layout, attrs, dims) -> ProblemKey: a warm shape builds no key.
_keys: Memo = Memo()
_KEYS_MAX = 65536


# The caller's consent to looser-than-budget candidates (``arbiter.configure(looser_accuracy=True)``).
LOOSER_ATTR = ("accuracy", "looser")


class _Consent:
    looser = False


_consent = _Consent()


def consent_to_looser(consent: bool) -> None:
    """Whether regions built from now on consent to candidates declaring accuracy looser than the op's budget
    (``arbiter.configure(looser_accuracy=...)``); the consent is part of their problem keys."""
    if consent != _consent.looser:
        Memoized.recipes.clear()  # a recipe's key was built under the other consent
    _consent.looser = consent


def dtype_name(dtype) -> str:
    name = _dtype_names.get(dtype)
    if name is None:
        name = str(dtype)
        name = _dtype_names[dtype] = name[6:] if name.startswith("torch.") else name  # torch.float16 -> float16
    return name

ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")


class Region(metaclass=Memoized):
    """Base of all region types. Subclasses set ``op`` and fill the slots via ``complete``.

    Constructing one goes through the recipe memo (``arbiter.region_memo``): operands of a signature seen
    before skip validation, which depends on signatures only."""

    op: ClassVar[str] = ""
    DIMS: ClassVar[tuple[str, ...]] = ()  # the named dimensions, in the order `--shape AxBxC` gives them
    # Per-dimension bucket policies; a dimension not named here uses POW2.
    bucket_policy: ClassVar[dict] = {}
    # The operand dtypes this op accepts (fft widens it to complex).
    dtypes: ClassVar[tuple[str, ...]] = DTYPES
    # The attributes ``random`` reads (``--attr name=value`` of the CLI); any other name would be ignored there, so
    # the CLI refuses it. ``accuracy`` (the looser-budget consent) is every op's.
    ATTRS: ClassVar[tuple[str, ...]] = ()
    # The caller's output shape where the region computes on a 2-D view of N-D operands (Matmul and Gated
    # with leading batch dimensions, see ``as_rows``): ``run_arbitrated`` reshapes the result to it.
    nd_shape: tuple[int, ...] | None = None  # a class default; Matmul and Gated have the slot
    # The rank an op kind's own region draws each operand at, where it is not ``layouts.DEFAULT_RANK``'s (an
    # operand at its rank, row-major, is left out of the key)
    OPERAND_RANKS: ClassVar[dict[str, int]] = {}
    # The operands ``out=`` may be exactly (legal in-place use: the kernel reads each element before it writes
    # it); "ops[" stands for any tensor operand of a pointwise chain. Any other overlap is refused
    # (``layouts.aliased_operands``).
    INPLACE: ClassVar[tuple[str, ...]] = ()

    # torch_in: a torch caller's CUDA tensors by argument name (None unless the first operand is a torch
    # CUDA tensor), so torch candidates run on them directly and outputs come from torch's caching allocator;
    # torch_out: (native view, torch tensor) of the output allocated last for such a caller.
    # first_call: True on the region the construction memo built for a signature it had not seen (a new exact
    # shape, dtype and layout in this process): the audit checks that call against the oracle (``arbiter.audit``).
    __slots__ = ("target", "dtype", "key", "out", "back", "dims", "attrs", "layout", "torch_in", "torch_out",
                 "first_call")
    # The slots' types (declared for the type checker; __slots__ makes the storage).
    target: str
    dtype: str
    key: ProblemKey
    out: Any  # the target's array, or None until allocated
    back: Any  # converts a result to the caller's array type; None when the caller's is the target's own
    dims: dict[str, int]
    attrs: tuple[tuple[str, str], ...]  # (name, value) pairs, as the key spells them
    layout: str
    torch_in: dict[str, Any] | None
    torch_out: tuple[Any, Any] | None
    first_call: bool

    # -- construction helpers: the public base API a new op kind's region builds on (docs/ops.md) ---------------
    # ``adopt`` each operand, ``same_dtype`` the others, ``check_out`` (``check_rows_out``) the caller's out=, then
    # ``complete``; a row op derives ``RowRegion`` (``adopt_rows``, ``random_x``) and checks eps with ``check_eps``.
    def adopt(self, argument: str, array, target: str | None = None):
        """Validate one operand: an array of a supported dtype on the region's target (``target``: the first
        operand's; None for the first). Returns (target name, the kernels' array, the caller's array or None)."""
        if not hasattr(array, "shape") or not hasattr(array, "dtype"):
            raise RegionError(argument, f"expected an array, got {type(array).__name__}")
        # ndarray subclasses whose meaning the kernels would drop: refused here, not failed (or ignored) later.
        if isinstance(array, np.ma.MaskedArray):
            raise RegionError(argument, "is a masked array, and its mask would be ignored; pass "
                                        f"{argument}.filled(value) (or np.asarray({argument}) to use every value)")
        if isinstance(array, np.matrix):
            raise RegionError(argument, f"is an np.matrix (always 2-D, * is a matrix product); pass "
                                        f"np.asarray({argument})")
        found = targets.adopt(array)
        if found is None:
            raise RegionError(argument, f"no target owns arrays of type {type(array).__module__}."
                                        f"{type(array).__name__}")
        name, native, back = found
        if target is not None and name != target:
            raise RegionError(argument, f"lives on target {name!r}, but the first operand is on {target!r}; "
                                        "move all operands to one device")
        # A torch caller (the first operand decides the framework, and ``back``) keeps its tensors as the
        # region's operands: torch candidates run on them as they are, and CuPy views are made only
        # when a CuPy kernel runs (``cupy_views``). A torch tensor among a CuPy caller's arrays is
        # viewed now.
        # (only a GPU target's adopt keeps the array itself and converts results back: torch CUDA tensors)
        torch_cuda = native is array and back is not None
        if target is None:
            self.torch_out = None
            self.torch_in = {argument: array} if torch_cuda else None
        elif torch_cuda:
            if self.torch_in is not None:
                self.torch_in[argument] = array
            else:
                native = targets.get(name).caller_view(array)
        dtype = dtype_name(native.dtype)
        if dtype not in self.dtypes:
            order = getattr(native.dtype, "byteorder", "=")
            if order in "<>" and dtype_name(native.dtype.newbyteorder("=")) in self.dtypes:  # >f4 on x86
                raise RegionError(argument, f"dtype {dtype}: byte order {'big' if order == '>' else 'little'}-endian "
                                            f"is not supported (only the host's); convert it first, e.g. "
                                            f"{argument}.astype({argument}.dtype.newbyteorder('='))")
            raise RegionError(argument, f"dtype {dtype} is not supported; use one of {', '.join(self.dtypes)}")
        # a broadcast view: cheap test first (a torch caller's tensor has stride() and no flags)
        strides = native.strides if hasattr(native, "flags") else native.stride()
        if 0 in strides and layout_class(native) != "R":
            _check_broadcast_size(argument, native)
        return name, native, back

    @property
    def torch_caller(self) -> bool:
        """Whether the caller passed torch tensors: CUDA ones kept as they are (``torch_in``), or CPU ones seen as
        NumPy whose results go back as tensors (``back``). Its winner is decided apart, in a tier order that puts
        torch's own kernels first (``select.tier_order``), and on the CPU torch's pool owns the cores
        (``cpu_threads.guest_threads``)."""
        return self.torch_in is not None or self.back is not None

    def same_dtype(self, argument: str, array):
        """RegionError naming ``argument`` unless ``array`` has the region's dtype."""
        if dtype_name(array.dtype) != self.dtype:
            raise RegionError(argument, f"dtype {array.dtype} differs from the region's {self.dtype}; "
                                        "cast operands to one dtype")

    def check_out(self, out, shape):
        """Adopt the caller's ``out=`` (None: a new output each call): the region's target and dtype, ``shape``,
        C-contiguous and writable, else RegionError naming ``out``."""
        if out is None:
            self.out = None
            return
        _, native, _ = self.adopt("out", out, self.target)
        self.same_dtype("out", native)
        if tuple(native.shape) != tuple(shape):
            raise RegionError("out", f"shape {tuple(native.shape)} should be {tuple(shape)}")
        if layout_class(native) != "R":
            raise RegionError("out", "must be C-contiguous")
        if not getattr(getattr(native, "flags", None), "writeable", True):  # CuPy and torch: always writable
            raise RegionError("out", "is read-only (its writeable flag is off); pass a writable array")
        self.out = native

    def check_rows_out(self, out, m: int, n: int):
        """``check_out`` for an ``[m, n]`` output computed for the caller's ``nd_shape`` (when set): ``out`` has
        the caller's shape, and the region writes it through its 2-D view."""
        nd = self.nd_shape
        self.check_out(out, (m, n) if nd is None else nd)
        if nd is not None and self.out is not None:
            self.out = as_rows(self, "out", self.out)

    def complete(self, layout: str, dims: dict, attrs: tuple):
        """The last step of a region's ``__init__``: its problem key from ``layout`` (the operands'
        ``keys.layout_class`` letters), ``dims`` (name -> size, bucketed) and ``attrs`` ((name, value) pairs), with
        what the layouts add (``arbiter.layouts``); shapes, dtypes and strides only, never the data."""
        # What the coarse layout letters do not say (bias/weight/residual layouts, ranks, padding, broadcast) and
        # a legal in-place out= (an illegal overlap raises here): ``arbiter.layouts``.
        attrs = attrs + layouts.key_attrs(self)
        if _consent.looser:  # arbiter.configure(looser_accuracy=True): the opt-in is part of every key
            attrs = attrs + (LOOSER_ATTR,)
        self.layout = layout
        self.dims = dims
        self.attrs = attrs
        self.first_call = False  # (the memo marks the first region of a new signature)
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
    def random(cls, target: str, dtype: str, dims: dict, attrs: dict | None = None, layout: str = "",
               rng: np.random.Generator | None = None) -> Region:
        """A random instance (seeded, never zeros) described by target, dtype, dims, attrs and layout."""
        raise NotImplementedError

    def runtime_args(self) -> dict:
        """Keyword arguments of ``random`` that carry this region's runtime scalars (not in the key:
        eps, scale, ...), so a rebuilt instance computes the same function."""
        return {}

    def resized(self, dims: dict, rng: np.random.Generator) -> Region:
        """A fresh random region with the same attributes, dtype, target, layout and runtime scalars, at ``dims``."""
        return self.random(self.target, self.dtype, dims, dict(self.attrs), self.layout, rng, **self.runtime_args())

    def fresh(self, rng: np.random.Generator) -> Region:
        return self.resized(self.dims, rng)

    def allow_looser(self) -> Region:
        """This region with the caller's consent to candidates that declare looser accuracy than the op's
        budget (``Contract(accuracy="bounded", ...)``). The consent is part of the problem key
        (attribute ``accuracy=looser``), so its decisions and verdicts never serve a key without it."""
        if LOOSER_ATTR in self.attrs:
            return self
        clone = self.with_out(self.out)
        clone.attrs = self.attrs + (LOOSER_ATTR,)
        clone.key = ProblemKey.make(self.key.target, self.key.op, self.key.dtype, self.key.layout, clone.attrs,
                                    self.key.bucket)
        return clone

    def with_out(self, out) -> Region:
        """A shallow copy of this region that writes into ``out`` (used for poisoning)."""
        clone = object.__new__(type(self))
        for slot in slots_of(type(self)):
            if hasattr(self, slot):
                object.__setattr__(clone, slot, getattr(self, slot))
        clone.out = out
        return clone

    @property
    def has_epilogue(self) -> bool:
        """True when the region fuses work after its root op (a root_only delegate can't serve it)."""
        return False

    @property
    def out_dtype(self) -> str:
        """The output's dtype: the region's own, unless the op changes it (fft r2c / c2r)."""
        return self.dtype

    def alloc_out(self):
        """The output buffer: ``out`` when the caller (or the gate) gave one, else a new C-contiguous array.

        A new output is plain ``empty`` (CuPy's memory pool; torch's caching allocator when the caller
        passed torch tensors): no fill pass in production. Poisoning is the gate's business
        (``poisoned_out``), never a dispatched call's.
        """
        if self.out is not None:
            return self.out
        return self._new_out(self.output_shape(), self.out_dtype)

    def _new_out(self, shape, dtype: str):
        if self.torch_in is not None:
            native, tensor = targets.get(self.target).caller_empty(shape, dtype, next(iter(self.torch_in.values())))
            self.torch_out = (native, tensor)
            return native
        return _empty_like_target(self.target, shape, dtype)

    def cupy_views(self) -> Region:
        """A torch caller's region with CuPy views in place of its tensors (what a CuPy kernel needs).

        Views are built from the tensors' pointers (no DLPack), only when a non-torch kernel runs."""
        as_kernel = targets.get(self.target).caller_view
        clone = self.with_out(self.out)
        views = {name: as_kernel(t) for name, t in self.torch_in.items()}  # type: ignore[union-attr]  # a torch caller's region: torch_in is set
        for name, view in views.items():
            if name.startswith("ops["):
                continue
            object.__setattr__(clone, "out" if name == "out" else name, view)
        if any(name.startswith("ops[") for name in views):  # Pointwise: operands inside the chain
            # only a Pointwise has ops, and only its views are named ops[i]
            clone.ops = tuple((step, views.get(f"ops[{i}]", operand))  # type: ignore[attr-defined]
                              for i, (step, operand) in enumerate(self.ops))  # type: ignore[attr-defined]
        return clone

    def poisoned_out(self):
        """A new output filled with NaN, for the F4 gate: every element must be written by the candidate."""
        return targets.get(self.target).full(self.output_shape(), np.nan, self.out_dtype)

    def for_caller(self, result):
        """``result`` as the caller's array type: a torch tensor for torch callers (the tensor allocated
        for the output when ``result`` is its view, so no DLPack conversion), else as it is."""
        if self.back is None:
            return result
        if self.torch_in is not None:
            if result is self.out and "out" in self.torch_in:
                return self.torch_in["out"]
            pair = self.torch_out
            if pair is not None and pair[0] is result:
                return pair[1]
            if type(result).__module__.startswith("torch"):  # a torch candidate's own output
                return result
        return self.back(result)

    def shape_text(self) -> str:
        return "x".join(str(v) for v in self.dims.values())

    def __repr__(self):
        return f"{type(self).__name__}({self.shape_text()} {self.dtype} on {self.target}, key={self.key.id})"


def converted_by_caller(result):
    """The ``back`` of a torch caller's region built from NumPy views of its CPU tensors, which takes the NumPy
    result back as a tensor itself (``arbiter.torch``: views keep the construction memo serving a warm shape): the
    result as it is, and the region marked as a torch caller's (``Region.torch_caller``)."""
    return result


def as_rows(region: Region, argument: str, array):
    """``array [..., W]`` (N-D) as the 2-D ``[rows, W]`` the kernels take: a view where the leading dimensions
    merge (a contiguous array's always do), else a copy. A torch caller's kept tensor is replaced by it too."""
    rows = array.reshape(-1, array.shape[-1])
    if region.torch_in is not None and argument in region.torch_in:
        region.torch_in[argument] = rows
    return rows


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 40


def _check_broadcast_size(argument: str, array) -> None:
    """A zero-stride (broadcast) view costs nothing to pass, but its output, and the gate's probes of its
    shape, are real arrays: refuse one whose logical size exceeds the machine's memory."""
    size = array.numel() if hasattr(array, "numel") else int(array.size)  # torch: numel(), itemsize
    logical = size * array.dtype.itemsize
    limit = _memory_bytes()
    if logical > limit:
        raise RegionError(argument, f"a zero-stride (broadcast) view of shape {tuple(array.shape)} stands for "
                                    f"{logical / 2**40:.1f} TiB; its output alone would not fit in this machine's "
                                    f"{limit / 2**30:.0f} GiB of memory. Materialise a smaller array.")


def _empty_like_target(target: str, shape, dtype: str):
    return targets.get(target).empty(shape, dtype)


def random_operand(target: str, shape, dtype: str, layout: str, rng, scale: float = 1.0):
    """Seeded random data (never zeros) of ``shape`` in the given layout class on ``target``.

    Layout class "S" (strided) has two forms: ``S``, every other element along the last axis (no unit
    stride anywhere), and ``P``, rows padded to a 16-byte multiple (unit inner stride, 16-byte aligned row
    starts: a permuted [B, S, H, D] view seen as [B, H, S, D] looks like this). A kernel may choose its path
    by strides, so the gate probes both (``verify.verify`` alternates them by probe); ``P`` falls back to ``S``
    where padding would leave the array contiguous (one row)."""
    t = targets.get(target)
    if layout == "P" and len(shape) >= 2 and math.prod(shape[:-1]) > 1 and shape[-1] >= 1:
        per16 = max(1, 16 // _ITEMSIZE[dtype])
        wide = tuple(shape[:-1]) + ((shape[-1] + per16) // per16 * per16,)  # at least one element of padding
        return _buffer(target, wide, dtype, scale, rng)[..., : shape[-1]]
    if layout in ("S", "P") and len(shape) >= 1:
        # A strided view: every other element of a wider buffer along the last axis.
        wide = tuple(shape[:-1]) + (max(1, shape[-1] * 2),)
        return _buffer(target, wide, dtype, scale, rng)[..., ::2][..., : shape[-1]]
    order = "F" if layout == "C" else "C"
    drawn = _device_draw(target, shape, dtype, scale, rng, order)
    if drawn is not None:
        return drawn
    return t.from_host(_normal(rng, shape, dtype, scale), dtype, order=order)


def _buffer(target: str, shape, dtype: str, scale: float, rng):
    """A C-contiguous random buffer on ``target`` that strided views are cut from: drawn on the device where
    ``_device_draw`` can, else on the host and moved there."""
    base = _device_draw(target, shape, dtype, scale, rng)
    return targets.get(target).from_host(_normal(rng, shape, dtype, scale), dtype) if base is None else base


_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "complex64": 8, "complex128": 16}


def _device_draw(target: str, shape, dtype: str, scale: float, rng, order: str = "C"):
    """Large real operands are drawn on the device where the target can (``Target.device_draw``: the nvidia
    target with CuPy), uniform of variance ``scale**2`` as ``_normal`` draws them on the host above UNIFORM_ABOVE.
    None where the host draws (other targets, small or complex operands)."""
    if math.prod(shape) <= UNIFORM_ABOVE or dtype.startswith("complex"):
        return None
    return targets.get(target).device_draw(shape, dtype, scale, rng, order)


# Above this many elements, operands are drawn uniform on [-sqrt(3), sqrt(3)) (mean 0, variance 1, as the
# normal draws below it): a normal draw costs 4x a uniform one, and the gate draws fresh data for every
# probe, so at large shapes drawing would otherwise cost more than running the candidate.
UNIFORM_ABOVE = 1 << 18
_SQRT3 = math.sqrt(3.0)


def _normal(rng, shape, dtype: str, scale: float = 1.0):
    """Zero-mean data of standard deviation ``scale`` (normal, or uniform above ``UNIFORM_ABOVE`` elements);
    complex dtypes get independent real and imaginary parts. Drawn in float32 for dtypes of 32 bits or fewer."""
    kind = np.float64 if dtype in ("float64", "complex128") else np.float32

    def draw():
        size = math.prod(shape)
        if size <= UNIFORM_ABOVE:  # (every draw lands 64-byte aligned: ``arbiter.aligned``)
            data = rng.standard_normal(dtype=kind, out=aligned.empty(shape, kind))
            if scale != 1.0:
                data *= scale
            return data
        if kind is np.float32:
            # 16 random bits per element, scaled in one pass: a third of the cost of rng.random plus an
            # affine pass. 65536 levels are more than bfloat16, float16 or TF32 hold, so a kernel that
            # rounds its inputs to those still shows its error. The bits are the generator's raw 64-bit words
            # (a fifth of what ``rng.bytes`` costs for the same bits: 3 ms per 2^22 elements).
            bits = rng.bit_generator.random_raw((size + 3) // 4).view(np.int16)[:size].reshape(shape)
            u = aligned.empty(shape, np.float32)
            np.multiply(bits, np.float32(_SQRT3 * scale / 32768.0), out=u, dtype=np.float32)
            return u
        u = rng.random(dtype=kind, out=aligned.empty(shape, kind))
        u *= 2 * _SQRT3 * scale
        u -= _SQRT3 * scale
        return u

    data = draw()
    return data + 1j * draw() if dtype.startswith("complex") else data


# ---------------------------------------------------------------------------
class Matmul(Region):
    """``out = activation(a @ b + bias) + residual`` for ``a [M,K]``, ``b [K,N]``.

    ``a`` may be N-D, ``[..., K]``: its leading dimensions are rows (``M`` their product), computed on a 2-D
    view (no copy when they merge, as a contiguous array's do), the output ``[..., N]``.
    ``bias`` is ``[N]``, ``residual`` is the output's shape; ``activation`` is one of
    ``none``, ``relu``, ``gelu`` (exact erf form, PyTorch's default),
    ``gelu_tanh`` (tanh approximation), ``silu``.
    """

    INPLACE: ClassVar[tuple[str, ...]] = ("residual",)

    op = "matmul"
    ATTRS = ("activation", "bias", "residual")
    DIMS = ("m", "n", "k")
    __slots__ = ("a", "b", "bias", "activation", "residual", "nd_shape")
    a: Any
    b: Any
    bias: Any
    activation: str
    residual: Any

    def __init__(self, a, b, bias=None, activation: str = "none", residual=None, *, out=None):
        self.target, self.a, self.back = self.adopt("a", a)
        self.dtype = dtype_name(self.a.dtype)
        _, self.b, _ = self.adopt("b", b, self.target)
        self.same_dtype("b", self.b)
        if self.a.ndim < 2:
            raise RegionError("a", f"must be [M, K] or [..., M, K], got shape {tuple(self.a.shape)}")
        if self.b.ndim != 2:
            raise RegionError("b", f"must be 2-D [K, N], got shape {tuple(self.b.shape)}")
        k2, n = self.b.shape
        if self.a.shape[-1] != k2:
            raise RegionError("b", f"shape {tuple(self.b.shape)} does not match a's inner dimension "
                                   f"K={self.a.shape[-1]}")
        self.nd_shape = None if self.a.ndim == 2 else (*self.a.shape[:-1], n)
        if self.nd_shape is not None:
            self.a = as_rows(self, "a", self.a)
        m, k = self.a.shape
        if activation not in ACTIVATIONS:
            raise RegionError("activation", f"{activation!r} is not one of {', '.join(ACTIVATIONS)}")
        self.activation = activation
        self.bias = None
        if bias is not None:
            _, self.bias, _ = self.adopt("bias", bias, self.target)
            self.same_dtype("bias", self.bias)
            if tuple(self.bias.shape) != (n,):
                raise RegionError("bias", f"shape {tuple(self.bias.shape)} should be ({n},)")
        self.residual = None
        if residual is not None:
            _, self.residual, _ = self.adopt("residual", residual, self.target)
            self.same_dtype("residual", self.residual)
            if tuple(self.residual.shape) != (self.nd_shape or (m, n)):
                raise RegionError("residual", f"shape {tuple(self.residual.shape)} should be "
                                              f"{self.nd_shape or (m, n)}, the output's")
            if self.nd_shape is not None:
                self.residual = as_rows(self, "residual", self.residual)
        self.check_rows_out(out, m, n)
        layout = layout_class(self.a) + layout_class(self.b)
        if self.residual is not None and layout_class(self.residual) != "R":
            layout += "S"  # a strided residual is its own layout class
        self.complete(layout, {"m": m, "n": n, "k": k},
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
               rng: np.random.Generator | None = None) -> Matmul:
        """A random instance: ``dims`` has m, n, k; ``attrs`` may set activation, bias, residual."""
        attrs = dict(attrs or {})
        rng = rng if rng is not None else np.random.default_rng(0)
        m, n, k = dims["m"], dims["n"], dims["k"]
        # Scale b so every output has unit variance whatever K is.
        a = random_operand(target, (m, k), dtype, layout[0], rng)
        b = random_operand(target, (k, n), dtype, layout[1], rng, scale=1.0 / math.sqrt(max(k, 1)))
        bias = random_operand(target, (n,), dtype, "R", rng) if _flag(attrs.get("bias"), "bias") else None
        res = (random_operand(target, (m, n), dtype, layout[2] if len(layout) > 2 else "R", rng)
               if _flag(attrs.get("residual"), "residual") else None)
        return cls(a, b, bias=bias, activation=attrs.get("activation", "none"), residual=res)


def _flag(value, name: str) -> bool:
    """An attribute flag (``--attr causal=1``); anything but a yes or a no is refused, naming the attribute."""
    if value in (True, 1, "1", "true", "yes"):
        return True
    if value in (None, False, 0, "0", "false", "no"):
        return False
    raise RegionError(name, f"{value!r} is not a flag; use 1 or 0")


class RowRegion(Region):
    """Shared validation of ops that reduce over one axis of ``x`` (softmax, norms)."""

    DIMS = ("rows", "cols")
    __slots__ = ("x", "axis")
    x: Any
    axis: int

    def adopt_rows(self, x, axis: int):
        """Adopt ``x`` (``Region.adopt``) and its reduced ``axis``: (rows, cols) of the op, cols along the axis."""
        self.target, self.x, self.back = self.adopt("x", x)
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
    def random_x(cls, target, dtype, dims, axis_last: bool, layout: str, rng):
        """A random ``x`` of ``dims`` rows by cols (reduced along its last axis, or its first when not
        ``axis_last``), of spread 2."""
        rows, cols = dims["rows"], dims["cols"]
        shape = (rows, cols) if axis_last else (cols, rows)
        return random_operand(target, shape, dtype, layout if layout in ("R", "P") else "S", rng, scale=2.0)


class Softmax(RowRegion):
    """``out = exp(x - max) / sum(exp(x - max))`` along ``axis``."""

    INPLACE: ClassVar[tuple[str, ...]] = ("x",)

    op = "softmax"
    ATTRS = ("axis",)
    __slots__ = ()

    def __init__(self, x, axis: int = -1, *, out=None):
        rows, cols = self.adopt_rows(x, axis)
        self.check_out(out, self.x.shape)
        # an inner axis of 3-D or 4-D x is keyed by its place (``inner1``: softmax(x, 1)), and probed there
        # (``layouts.reproduce``): a kernel may take the rows as shape[0] or the axis as 0
        where = "last" if self.axis_last else "inner" if self.x.ndim <= 2 else f"inner{self.axis}"
        self.complete(layout_class(self.x), {"rows": rows, "cols": cols}, (("axis", where),))

    def operands(self):
        return {"x": self.x}

    @classmethod
    def random(cls, target: str, dtype: str, dims: dict, attrs: dict | None = None, layout: str = "R",
               rng: np.random.Generator | None = None) -> Softmax:
        """A random instance: ``dims`` has rows, cols; ``attrs`` may set axis ('last', 'inner', or 'inner<i>': the
        inner axis i of x of a higher rank, drawn 2-D here and given that rank by ``layouts.reproduce``)."""
        axis = (attrs or {}).get("axis", "last")
        if axis not in ("last", "inner") and not (axis.startswith("inner") and axis[5:].isdigit()):
            raise RegionError("axis", f"{axis!r} is not 'last', 'inner' or 'inner<i>'")
        last = axis == "last"
        rng = rng if rng is not None else np.random.default_rng(0)
        return cls(cls.random_x(target, dtype, dims, last, layout, rng), axis=-1 if last else 0)


class RMSNorm(RowRegion):
    """``out = x / sqrt(mean(x**2, axis=-1) + eps) * weight`` over the last axis.

    ``eps`` is a runtime scalar, not part of the problem key: it changes no kernel's structure.
    """

    INPLACE: ClassVar[tuple[str, ...]] = ("x",)

    op = "rmsnorm"
    __slots__ = ("weight", "eps")
    weight: Any
    eps: float

    def __init__(self, x, weight, eps: float = 1e-6, *, out=None):
        rows, cols = self.adopt_rows(x, -1)
        _, self.weight, _ = self.adopt("weight", weight, self.target)
        self.same_dtype("weight", self.weight)
        if tuple(self.weight.shape) != (cols,):
            raise RegionError("weight", f"shape {tuple(self.weight.shape)} should be ({cols},), "
                                        "the size of x's last axis")
        self.eps = check_eps(eps, self.dtype)
        self.check_out(out, self.x.shape)
        self.complete(layout_class(self.x), {"rows": rows, "cols": cols}, ())

    def operands(self):
        return {"x": self.x, "weight": self.weight}

    @classmethod
    def random(cls, target: str, dtype: str, dims: dict, attrs: dict | None = None, layout: str = "R",
               rng: np.random.Generator | None = None, eps: float = 1e-6) -> RMSNorm:
        """A random instance: ``dims`` has rows, cols."""
        rng = rng if rng is not None else np.random.default_rng(0)
        x = cls.random_x(target, dtype, dims, True, layout, rng)
        return cls(x, random_operand(target, (dims["cols"],), dtype, "R", rng), eps=eps)

    def runtime_args(self):
        return {"eps": self.eps}


# --- more op kinds -----------------------------------------------------------
# The smallest positive (subnormal) value of each float dtype; bfloat16 has float32's exponent, 7 mantissa bits.
_SMALLEST = {"float16": 2.0**-24, "bfloat16": 2.0**-133, "float32": 2.0**-149, "float64": 2.0**-1074}


def check_eps(eps, dtype: str) -> float:
    """A finite eps > 0 that stays > 0 in ``dtype``: one that rounds to 0 there makes a row of zeros 0/0 = NaN
    in the kernels, where the float64 oracle gives 0; the smallest eps ``dtype`` holds gives 0 in both."""
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.floating)) or not eps > 0 \
            or not math.isfinite(eps):
        raise RegionError("eps", f"must be a finite number > 0, got {eps!r}")
    smallest = _SMALLEST.get(dtype, 0.0)
    if eps <= smallest / 2:  # rounds to 0 (half the smallest subnormal rounds to even: 0)
        raise RegionError("eps", f"{eps!r} rounds to 0 in {dtype} (whose smallest positive value is "
                                 f"{smallest:.3g}), so a row of zeros would give NaN; use eps >= {smallest:.3g}")
    return float(eps)


class LayerNorm(RowRegion):
    """``out = (x - mean) / sqrt(var + eps) * weight + bias`` over the last axis (biased variance).

    ``weight`` and ``bias`` are ``[cols]``; ``bias`` may be None (attribute ``bias=0``).
    ``eps`` is a runtime scalar, not part of the problem key.
    """

    INPLACE: ClassVar[tuple[str, ...]] = ("x",)

    op = "layernorm"
    ATTRS = ("bias",)
    __slots__ = ("weight", "bias", "eps")
    weight: Any
    bias: Any
    eps: float

    def __init__(self, x, weight, bias=None, eps: float = 1e-5, *, out=None):
        rows, cols = self.adopt_rows(x, -1)
        self.weight = self._row_vector("weight", weight, cols)
        self.bias = None if bias is None else self._row_vector("bias", bias, cols)
        self.eps = check_eps(eps, self.dtype)
        self.check_out(out, self.x.shape)
        self.complete(layout_class(self.x), {"rows": rows, "cols": cols},
                     (("bias", "1" if bias is not None else "0"),))

    def _row_vector(self, argument, array, cols):
        _, native, _ = self.adopt(argument, array, self.target)
        self.same_dtype(argument, native)
        if tuple(native.shape) != (cols,):
            raise RegionError(argument, f"shape {tuple(native.shape)} should be ({cols},), the size of x's last axis")
        return native

    def operands(self):
        ops = {"x": self.x, "weight": self.weight}
        if self.bias is not None:
            ops["bias"] = self.bias
        return ops

    @classmethod
    def random(cls, target: str, dtype: str, dims: dict, attrs: dict | None = None, layout: str = "R",
               rng: np.random.Generator | None = None, eps: float = 1e-5) -> LayerNorm:
        """A random instance: ``dims`` has rows, cols; ``attrs`` may set bias ('1' or '0', default '1')."""
        rng = rng if rng is not None else np.random.default_rng(0)
        x = cls.random_x(target, dtype, dims, True, layout, rng)
        x += 3.0  # an offset mean: a one-pass variance formula loses digits here, as it does on real activations
        weight = random_operand(target, (dims["cols"],), dtype, "R", rng)
        with_bias = _flag((attrs or {}).get("bias", "1"), "bias")
        bias = random_operand(target, (dims["cols"],), dtype, "R", rng) if with_bias else None
        return cls(x, weight, bias, eps=eps)

    def runtime_args(self):
        return {"eps": self.eps}


class Attention(Region):
    """Scaled dot-product attention: ``out = softmax(scale * q @ k^T + mask) @ v`` per (batch, head).

    ``q`` is ``[batch, heads, q_len, d]``; ``k`` and ``v`` are ``[batch, heads, k_len, d]``
    (``q_len`` and ``k_len`` may differ). ``causal``: query ``i`` attends keys ``j <= i``
    (top-left aligned, as ``torch.nn.functional.scaled_dot_product_attention(is_causal=True)``),
    so no row is ever fully masked. ``scale`` defaults to ``1/sqrt(d)``; it is a runtime scalar.
    The head size ``d`` is bucketed exactly (kernels specialise on it); the other sizes by powers of two.
    """

    op = "attention"
    ATTRS = ("causal",)
    DIMS = ("batch", "heads", "q", "k", "d")
    bucket_policy: ClassVar[dict] = {"d": EXACT}
    __slots__ = ("q", "k", "v", "causal", "scale")
    q: Any
    k: Any
    v: Any
    causal: bool
    scale: float

    def __init__(self, q, k, v, causal: bool = False, scale: float | None = None, *, out=None):
        self.target, self.q, self.back = self.adopt("q", q)
        self.dtype = dtype_name(self.q.dtype)
        _, self.k, _ = self.adopt("k", k, self.target)
        _, self.v, _ = self.adopt("v", v, self.target)
        self.same_dtype("k", self.k)
        self.same_dtype("v", self.v)
        if self.q.ndim != 4:
            raise RegionError("q", f"must be 4-D [batch, heads, q_len, d], got shape {tuple(self.q.shape)}")
        b, h, sq, d = self.q.shape
        if self.k.ndim != 4 or tuple(self.k.shape[:2]) != (b, h) or self.k.shape[3] != d:
            raise RegionError("k", f"shape {tuple(self.k.shape)} should be [{b}, {h}, k_len, {d}]")
        if tuple(self.v.shape) != tuple(self.k.shape):
            raise RegionError("v", f"shape {tuple(self.v.shape)} should equal k's {tuple(self.k.shape)}")
        sk = self.k.shape[2]
        if sk == 0 and sq > 0:
            raise RegionError("k", "k_len is 0: every query would attend to nothing")
        if not isinstance(causal, (bool, np.bool_)):
            raise RegionError("causal", f"must be a bool, got {type(causal).__name__}")
        self.causal = bool(causal)
        if scale is None:
            scale = 1.0 / math.sqrt(d) if d else 1.0
        elif isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating)) or not math.isfinite(scale):
            raise RegionError("scale", f"must be a finite number or None, got {scale!r}")
        self.scale = float(scale)
        self.check_out(out, self.q.shape)
        self.complete(layout_class(self.q) + layout_class(self.k) + layout_class(self.v),
                     {"batch": b, "heads": h, "q": sq, "k": sk, "d": d}, (("causal", "1" if self.causal else "0"),))

    def operands(self):
        return {"q": self.q, "k": self.k, "v": self.v}

    def output_shape(self):
        return tuple(self.q.shape)

    @classmethod
    def random(cls, target: str, dtype: str, dims: dict, attrs: dict | None = None, layout: str = "RRR",
               rng: np.random.Generator | None = None, scale: float | None = None) -> Attention:
        """A random instance: ``dims`` has batch, heads, q, k, d; ``attrs`` may set causal ('1' or '0')."""
        rng = rng if rng is not None else np.random.default_rng(0)
        b, h, sq, sk, d = (dims[n] for n in cls.DIMS)
        q = random_operand(target, (b, h, sq, d), dtype, layout[0], rng)
        k = random_operand(target, (b, h, sk, d), dtype, layout[1], rng)
        v = random_operand(target, (b, h, sk, d), dtype, layout[2], rng)
        return cls(q, k, v, causal=_flag((attrs or {}).get("causal"), "causal"), scale=scale)

    def runtime_args(self):
        return {"scale": self.scale}


_REAL_OF = {"complex64": "float32", "complex128": "float64"}
_COMPLEX_OF = {v: k for k, v in _REAL_OF.items()}


class FFT(Region):
    """Batched 1-D discrete Fourier transform over the last axis of ``x``, of any length ``n``.

    ``kind='c2c'``: complex ``x [..., n]`` to complex ``[..., n]``.
    ``kind='r2c'``: real ``x [..., n]`` to the half spectrum ``[..., n//2 + 1]``; with ``inverse=True``
    the converse (c2r): half spectrum ``x [..., n//2 + 1]`` to real ``[..., n]`` (pass ``n`` when it
    is odd; it defaults to ``2 * (x.shape[-1] - 1)``). As in numpy.fft, the imaginary parts of the
    zero (and, for even ``n``, the Nyquist) bins are ignored by c2r.
    Normalisation is NumPy's "backward": the forward transform is unscaled, the inverse scales by 1/n.
    The region's dtype is ``x``'s; ``out_dtype`` is the output's (complex for c2c and r2c, real for c2r).
    The length ``n`` is bucketed exactly (FFT algorithms depend on its factors); the batch by powers of two.
    """

    op = "fft"
    ATTRS = ("kind", "inverse")
    DIMS = ("batch", "n")
    bucket_policy: ClassVar[dict] = {"n": EXACT}
    dtypes = ("float32", "float64", "complex64", "complex128")
    KINDS = ("c2c", "r2c")
    __slots__ = ("x", "kind", "inverse", "n", "_out_dtype")
    x: Any
    kind: str
    inverse: bool
    n: int
    _out_dtype: str

    def __init__(self, x, kind: str = "c2c", inverse: bool = False, n: int | None = None, *, out=None):
        self.target, self.x, self.back = self.adopt("x", x)
        self.dtype = dtype_name(self.x.dtype)
        if kind not in self.KINDS:
            raise RegionError("kind", f"{kind!r} is not one of {', '.join(self.KINDS)}")
        if not isinstance(inverse, (bool, np.bool_)):
            raise RegionError("inverse", f"must be a bool, got {type(inverse).__name__}")
        self.kind, self.inverse = kind, bool(inverse)
        if self.x.ndim < 1:
            raise RegionError("x", "must have at least one dimension (the transform runs over the last)")
        length = self.x.shape[-1]
        wants_complex = kind == "c2c" or self.inverse
        if wants_complex and self.dtype not in _REAL_OF:
            raise RegionError("x", f"dtype {self.dtype}: {self._kind_text()} takes complex64 or complex128")
        if not wants_complex and self.dtype not in _COMPLEX_OF:
            raise RegionError("x", f"dtype {self.dtype}: {self._kind_text()} takes float32 or float64")
        if n is not None and (isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1):
            raise RegionError("n", f"must be a positive int or None, got {n!r}")
        if kind == "r2c" and self.inverse:
            n = 2 * (length - 1) if n is None else int(n)
            if n < 1 or n // 2 + 1 != length:
                raise RegionError("n", f"{n} does not fit a half spectrum of {length} bins "
                                       f"(needs n // 2 + 1 == {length}: n = {2 * length - 2} or {2 * length - 1})")
            self._out_dtype, out_shape = _REAL_OF[self.dtype], self.x.shape[:-1] + (n,)
        else:
            if n is not None and n != length:
                raise RegionError("n", f"{n} differs from x's last axis ({length}); pad or slice x instead")
            if length < 1:
                raise RegionError("x", "the last axis is empty; an FFT needs length >= 1")
            n = length
            self._out_dtype = self.dtype if kind == "c2c" else _COMPLEX_OF[self.dtype]
            out_shape = self.x.shape if kind == "c2c" else self.x.shape[:-1] + (n // 2 + 1,)
        self.n = n
        self._check_fft_out(out, out_shape)
        self.complete(layout_class(self.x), {"batch": math.prod(self.x.shape[:-1]), "n": n},
                     (("kind", kind), ("inverse", "1" if self.inverse else "0")))

    def _kind_text(self):
        return "c2r (kind='r2c', inverse=True)" if self.kind == "r2c" and self.inverse else f"kind={self.kind!r}"

    def _check_fft_out(self, out, shape):
        self.out = None
        if out is None:
            return
        _, native, _ = self.adopt("out", out, self.target)
        if dtype_name(native.dtype) != self._out_dtype:
            raise RegionError("out", f"dtype {native.dtype} should be {self._out_dtype} for {self._kind_text()}")
        if tuple(native.shape) != tuple(shape):
            raise RegionError("out", f"shape {tuple(native.shape)} should be {tuple(shape)}")
        if layout_class(native) != "R":
            raise RegionError("out", "must be C-contiguous")
        if not getattr(getattr(native, "flags", None), "writeable", True):  # CuPy and torch: always writable
            raise RegionError("out", "is read-only (its writeable flag is off); pass a writable array")
        self.out = native

    @property
    def out_dtype(self):
        return self._out_dtype

    @property
    def c2r(self) -> bool:
        return self.kind == "r2c" and self.inverse

    def operands(self):
        return {"x": self.x}

    def output_shape(self):
        if self.kind == "c2c":
            return tuple(self.x.shape)
        return tuple(self.x.shape[:-1]) + ((self.n,) if self.inverse else (self.n // 2 + 1,))

    @classmethod
    def random(cls, target: str, dtype: str, dims: dict, attrs: dict | None = None, layout: str = "R",
               rng: np.random.Generator | None = None) -> FFT:
        """A random instance: ``dims`` has batch, n; ``attrs`` may set kind ('c2c', 'r2c') and inverse ('1', '0').

        ``dtype`` is x's: complex for c2c and c2r, real for r2c. A real dtype given for c2c or c2r, or a
        complex one for r2c, is mapped to its partner of the same precision.
        """
        attrs = attrs or {}
        rng = rng if rng is not None else np.random.default_rng(0)
        kind, inverse = attrs.get("kind", "c2c"), _flag(attrs.get("inverse"), "inverse")
        wants_complex = kind == "c2c" or inverse
        dtype = (_COMPLEX_OF.get(dtype, dtype) if wants_complex else _REAL_OF.get(dtype, dtype))
        batch, n = dims["batch"], dims["n"]
        length = n // 2 + 1 if kind == "r2c" and inverse else n
        x = random_operand(target, (batch, length), dtype, layout, rng)
        return cls(x, kind=kind, inverse=inverse, n=n if kind == "r2c" and inverse else None)


class Gated(Region):
    """SwiGLU-style gated projection: ``out = silu(x @ w_gate) * (x @ w_up)``.

    ``x`` is ``[M, K]`` or N-D ``[..., K]`` (leading dimensions are rows, as ``Matmul``'s ``a``), ``w_gate`` and
    ``w_up`` are ``[K, N]``. The gate (silu and the product)
    is a fused epilogue of the two GEMMs, so a ``root_only`` delegate never applies.
    """

    op = "gated"
    DIMS = ("m", "n", "k")
    __slots__ = ("x", "w_gate", "w_up", "nd_shape")
    x: Any
    w_gate: Any
    w_up: Any

    def __init__(self, x, w_gate, w_up, *, out=None):
        self.target, self.x, self.back = self.adopt("x", x)
        self.dtype = dtype_name(self.x.dtype)
        _, self.w_gate, _ = self.adopt("w_gate", w_gate, self.target)
        _, self.w_up, _ = self.adopt("w_up", w_up, self.target)
        self.same_dtype("w_gate", self.w_gate)
        self.same_dtype("w_up", self.w_up)
        if self.x.ndim < 2:
            raise RegionError("x", f"must be [M, K] or [..., M, K], got shape {tuple(self.x.shape)}")
        k = self.x.shape[-1]
        if self.w_gate.ndim != 2 or self.w_gate.shape[0] != k:
            raise RegionError("w_gate", f"shape {tuple(self.w_gate.shape)} should be [{k}, N] (K from x)")
        if tuple(self.w_up.shape) != tuple(self.w_gate.shape):
            raise RegionError("w_up", f"shape {tuple(self.w_up.shape)} should equal w_gate's "
                                      f"{tuple(self.w_gate.shape)}")
        n = self.w_gate.shape[1]
        self.nd_shape = None if self.x.ndim == 2 else (*self.x.shape[:-1], n)
        if self.nd_shape is not None:
            self.x = as_rows(self, "x", self.x)
        m = self.x.shape[0]
        self.check_rows_out(out, m, n)
        self.complete(layout_class(self.x) + layout_class(self.w_gate) + layout_class(self.w_up),
                     {"m": m, "n": n, "k": k}, (("activation", "silu"),))

    @property
    def has_epilogue(self):
        return True

    def operands(self):
        return {"x": self.x, "w_gate": self.w_gate, "w_up": self.w_up}

    def output_shape(self):
        return (self.dims["m"], self.dims["n"])

    @classmethod
    def random(cls, target: str, dtype: str, dims: dict, attrs: dict | None = None, layout: str = "RRR",
               rng: np.random.Generator | None = None) -> Gated:
        """A random instance: ``dims`` has m, n, k."""
        rng = rng if rng is not None else np.random.default_rng(0)
        m, n, k = dims["m"], dims["n"], dims["k"]
        w_scale = 1.0 / math.sqrt(max(k, 1))  # unit-variance GEMM outputs whatever K is
        return cls(random_operand(target, (m, k), dtype, layout[0], rng),
                   random_operand(target, (k, n), dtype, layout[1], rng, scale=w_scale),
                   random_operand(target, (k, n), dtype, layout[2], rng, scale=w_scale))


POINTWISE_UNARY = ("neg", "abs", "relu", "exp", "tanh", "sigmoid", "silu", "gelu_tanh", "square")
POINTWISE_BINARY = ("add", "sub", "mul", "max", "min")


class Pointwise(Region):
    """A chain of elementwise steps applied to ``x``: ``out = f_n(... f_1(x))``.

    ``ops`` is a sequence of steps: ``(name,)`` for a unary op (one of ``POINTWISE_UNARY``),
    ``(name, operand)`` for a binary op (one of ``POINTWISE_BINARY``) whose other operand is a
    Python number or an array of ``x``'s shape and dtype; e.g.
    ``[("mul", y), ("add", 1.0), ("relu",), ("tanh",)]`` is ``tanh(relu(x * y + 1))``.
    The chain's structure (``mul[t]>add[s]>relu>tanh``: t a tensor, s a scalar) is part of the
    problem key; scalar values are runtime arguments. Only the element count is bucketed.
    """

    INPLACE: ClassVar[tuple[str, ...]] = ("x", "ops[")

    op = "pointwise"
    ATTRS = ("chain",)
    DIMS = ("size",)
    __slots__ = ("x", "ops", "chain")
    x: Any
    ops: tuple
    chain: str

    def __init__(self, x, ops, *, out=None):
        self.target, self.x, self.back = self.adopt("x", x)
        self.dtype = dtype_name(self.x.dtype)
        if isinstance(ops, (str, bytes)) or not hasattr(ops, "__iter__"):
            raise RegionError("ops", f"must be a sequence of steps like [('add', 1.0), ('relu',)], got {ops!r}")
        steps: list[tuple] = []  # (name, None) for a unary step, (name, operand) for a binary one
        layout = layout_class(self.x)
        for i, step in enumerate(ops):
            arg = f"ops[{i}]"
            if not isinstance(step, (tuple, list)) or not step or not isinstance(step[0], str):
                raise RegionError(arg, f"must be a tuple (name,) or (name, operand), got {step!r}")
            name = step[0]
            if name in POINTWISE_UNARY:
                if len(step) != 1:
                    raise RegionError(arg, f"{name!r} is unary and takes no operand")
                steps.append((name, None))
                continue
            if name not in POINTWISE_BINARY:
                raise RegionError(arg, f"unknown op {name!r}; unary: {', '.join(POINTWISE_UNARY)}; "
                                       f"binary: {', '.join(POINTWISE_BINARY)}")
            if len(step) != 2:
                raise RegionError(arg, f"{name!r} is binary: give (name, operand)")
            operand = step[1]
            if isinstance(operand, (int, float, np.floating, np.integer)) and not isinstance(operand, bool):
                if not math.isfinite(operand):
                    raise RegionError(arg, f"scalar operand must be finite, got {operand!r}")
                steps.append((name, float(operand)))
                continue
            _, native, _ = self.adopt(arg, operand, self.target)
            self.same_dtype(arg, native)
            if tuple(native.shape) != tuple(self.x.shape):
                raise RegionError(arg, f"shape {tuple(native.shape)} should equal x's {tuple(self.x.shape)} "
                                       "(or pass a Python number)")
            steps.append((name, native))
            layout += layout_class(native)
        self.ops = tuple(steps)
        self.chain = self.chain_of(self.ops)
        self.check_out(out, self.x.shape)
        self.complete(layout, {"size": math.prod(self.x.shape)}, (("chain", self.chain),))

    @staticmethod
    def chain_of(steps) -> str:
        """The chain's structure as key text: ``mul[t]>add[s]>relu`` (t: tensor operand, s: scalar)."""
        parts = []
        for name, operand in steps:
            parts.append(name if operand is None else f"{name}[{'s' if isinstance(operand, float) else 't'}]")
        return ">".join(parts) or "copy"

    def tensors(self) -> list:
        return [operand for _, operand in self.ops if operand is not None and not isinstance(operand, float)]

    def scalars(self) -> list[float]:
        return [operand for _, operand in self.ops if isinstance(operand, float)]

    def operands(self):
        ops = {"x": self.x}
        ops.update({f"ops[{i}]": operand for i, (_, operand) in enumerate(self.ops)
                    if operand is not None and not isinstance(operand, float)})
        return ops

    def output_shape(self):
        return tuple(self.x.shape)

    @classmethod
    def random(cls, target: str, dtype: str, dims: dict, attrs: dict | None = None, layout: str | None = None,
               rng: np.random.Generator | None = None, scalars: list[float] | None = None) -> Pointwise:
        """A random instance: ``dims`` has size; ``attrs['chain']`` is the chain text (``mul[t]>add[s]>relu``).

        Scalars come from ``scalars`` in order when given, else uniform in [0.5, 2).
        """
        rng = rng if rng is not None else np.random.default_rng(0)
        chain = (attrs or {}).get("chain", "copy")
        names = [] if chain == "copy" else chain.split(">")
        layout = layout or "R" * (1 + sum(n.endswith("[t]") for n in names))
        size = dims["size"]
        x = random_operand(target, (size,), dtype, layout[0], rng)
        values = list(scalars or [])
        steps: list[tuple] = []  # (name,) or (name, operand)
        t = 1
        for text in names:
            name = text.split("[", 1)[0]
            if text.endswith("[t]"):
                steps.append((name, random_operand(target, (size,), dtype, layout[t], rng)))
                t += 1
            elif text.endswith("[s]"):
                steps.append((name, values.pop(0) if values else float(rng.uniform(0.5, 2.0))))
            else:
                steps.append((name,))
        return cls(x, steps)

    def runtime_args(self):
        return {"scalars": self.scalars()}
