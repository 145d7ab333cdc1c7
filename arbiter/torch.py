"""PyTorch as a first-class caller: the arbiter's op kinds as ``torch.library`` custom ops.

``import arbiter.torch`` (needs only the ``torch`` extra) defines one custom op per op kind:

==========================  ====================================================================
``arbiter::matmul``          ``(a, b, bias=None, residual=None, activation="none")``: ``activation(a @ b + bias) + residual``
``arbiter::softmax``         ``(x, dim=-1)``
``arbiter::rmsnorm``         ``(x, weight, eps=1e-6)`` over the last dimension
``arbiter::layernorm``       ``(x, weight, bias=None, eps=1e-5)`` over the last dimension
``arbiter::attention``       ``(q, k, v, causal=False, scale=None)``, ``[batch, heads, len, d]``
``arbiter::gated``           ``(x, w_gate, w_up)``: ``silu(x @ w_gate) * (x @ w_up)``
``arbiter::fft``             ``(x, kind="c2c", inverse=False, n=None)`` over the last dimension
``arbiter::pointwise``       ``(x, chain, tensors=[], scalars=[])``, e.g. ``"mul[t]>add[s]>relu>tanh"``
``arbiter::rope``            ``(x, cos, sin)``: ``x * cos + rotate_half(x) * sin``, x ``[..., S, D]`` (its ``TorchOp``)
==========================  ====================================================================

Each is callable as ``torch.ops.arbiter.<op>(...)`` or ``arbiter.torch.<op>(...)``. At run time it
builds the op's region from the tensors and calls ``arbiter.run_arbitrated``: the F4 gate, the
registry, the miss policy and the counters all apply, and the stored winner serves the key. Each op
has a fake (meta) kernel giving the output's shape, dtype, device and strides (always C-contiguous:
the real op makes its output so, whichever candidate serves), so a module calling them compiles under
``torch.compile(fullgraph=True)``: the op is one opaque node of the graph, dispatched through the
arbiter when the compiled code runs. ``arbiter.torch.<op>`` called eagerly on plain tensors skips
torch's dispatcher (about 100 µs a call on the CPU): straight to the arbiter, or through an
``autograd.Function`` when gradients are needed; compiled, traced and transformed calls take the
custom op.

* **Batched inputs**: ``matmul``'s ``a`` and ``gated``'s ``x`` may be ``[..., K]`` (the leading
  dimensions are rows, viewed as one 2-D operand without a copy when they merge); the row ops work on
  the last dimension of any rank.

* **Devices**: CPU tensors go to the ``cpu`` target (zero copy both ways); CUDA tensors to the
  ``nvidia`` target, results coming back as torch tensors on the same device.
* **bfloat16**: on CUDA the tensors go to the target as bfloat16 (the key says bfloat16) where its
  arrays have that dtype (CuPy >= 14 with ml_dtypes). NumPy has no bfloat16, so on the CPU (and on a
  CuPy without it) they are computed in float32 (the key says float32) and rounded to bfloat16: at
  least as accurate as bfloat16 arithmetic; float16 stays float16.
* **Autograd**: inputs that require grad get gradients. The forward pass is the arbitrated op; the
  backward pass (``BACKWARD``) is torch's own backward kernel or the closed form for matmul, softmax,
  rmsnorm and layernorm, and the vector-Jacobian product of the op's reference formulation in torch
  (``REFERENCE`` below, the same definitions as the float64 oracles) for the others. An eager ``matmul``
  with an activation, under autograd, arbitrates its GEMM + bias and applies the activation (and
  residual) in torch, keeping the pre-activation its backward needs. So training works and stays
  correct, but the backward pass is torch's, not a measured candidate.
"""  # noqa: E501 (the table of ops is wider than 120 columns)
from __future__ import annotations

import importlib
import math
import operator
from collections.abc import Callable
from types import FunctionType, MethodType
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.library import custom_op

import arbiter
from arbiter import audit, dispatch, keys, regions, targets
from arbiter.ops import kind as op_kinds
from arbiter.ops.attention.torch_ref import ref_attention  # noqa: F401 (re-exported: arbiter.torch.ref_attention)
from arbiter.ops.fft.torch_ref import ref_fft  # noqa: F401 (re-exported: arbiter.torch.ref_fft)
from arbiter.ops.gated.torch_ref import ref_gated  # noqa: F401 (re-exported: arbiter.torch.ref_gated)
from arbiter.ops.layernorm.torch_ref import ref_layernorm  # noqa: F401 (re-exported: arbiter.torch.ref_layernorm)
from arbiter.ops.matmul.torch_ref import apply_activation as _activation
from arbiter.ops.matmul.torch_ref import ref_matmul  # noqa: F401 (re-exported: arbiter.torch.ref_matmul)
from arbiter.ops.pointwise.torch_ref import ref_pointwise  # noqa: F401 (re-exported: arbiter.torch.ref_pointwise)
from arbiter.ops.pointwise.torch_ref import steps as _steps
from arbiter.ops.rmsnorm.torch_ref import ref_rmsnorm  # noqa: F401 (re-exported: arbiter.torch.ref_rmsnorm)
from arbiter.ops.softmax.torch_ref import ref_softmax  # noqa: F401 (re-exported: arbiter.torch.ref_softmax)

# -- the reference formulations (forward in torch; their VJPs are the backward passes) ---------------


def _reference(kind: op_kinds.OpKind) -> Callable:
    module, _, name = (kind.torch_reference or "").partition(":")
    return getattr(importlib.import_module(module), name)


# Each op kind's torch reference (``OpKind.torch_reference``, in ``arbiter/ops/<op>/torch_ref.py``): what a kernel's
# backward replays, and what the tests compare with.
REFERENCE: dict[str, Callable] = {name: _reference(kind) for name, kind in op_kinds.OPS.items()
                                  if kind.torch_reference}


# -- dispatch through the arbiter -----------------------------------------------------------------------

_native_bf16: dict[str, bool] = {}


def _takes_bfloat16(device_type: str) -> bool:
    """Whether the target serving ``device_type`` tensors has a bfloat16 array type (NumPy has none;
    CuPy >= 14 with ml_dtypes has)."""
    found = _native_bf16.get(device_type)
    if found is None:
        serving = targets.serving_torch(device_type)
        found = serving is not None and serving.native_bfloat16()
        _native_bf16[device_type] = found
    return found


def _arbitrated(op: str, make_region, tensors: list, result_dtype, attrs: tuple | None = None):
    """Run ``make_region(*ready operands)`` through the arbiter; the result as a fresh C-contiguous tensor
    (what every fake kernel promises, whichever candidate serves).

    CPU tensors are handed over as NumPy views (zero copy; bfloat16 as float32, NumPy having none), so the
    region is built from NumPy arrays and its construction memo (``arbiter.region_memo``) serves a warm
    shape; CUDA tensors are handed over as they are (detached: the op's autograd is ours). ``attrs``: the
    call's other arguments (hashable; None: no fast path), for ``_on_tensors``."""
    first = tensors[0]
    if first.device.type == "cpu":
        work = torch.float32 if first.dtype == torch.bfloat16 else None
        sig = None
        same, views = keys.shared_pairs(tensors, [None if t is None else t if t._base is None else t._base
                                                  for t in tensors])
        if work is None and attrs is not None:
            # views of one tensor's memory (matmul(a, a.t())) key apart: their signature says so too
            sig = _signature(op, attrs, tensors, same + ("views", *views) if views else same)
            found = _on_tensors.get(sig)
            if found is not None:
                y = found(tensors)
                if y is not None:
                    return y if y.dtype == result_dtype else y.to(result_dtype)
        # (detach only where needed: it makes a new tensor, and .numpy() refuses only a tensor needing grad)
        ready = [None if t is None else (t if not t.requires_grad else t.detach()).numpy() if work is None
                 else t.detach().to(work).numpy() for t in tensors]
        for i, j in same:  # one tensor passed twice is one array to the region (its key says so)
            ready[i] = ready[j]
        region = make_region(*ready)
        region.back = regions.converted_by_caller  # a torch caller: its own route and pools (cpu_threads)
        y = arbiter.run_arbitrated(op, region)
        if sig is not None:
            _on_tensors.learn(sig, region, ready)
        if y.base is not None and any(r is not None and np.may_share_memory(y, r) for r in ready):
            y = y.copy()  # a custom op's output may not alias an input
        out = torch.from_numpy(y)
    else:
        work = torch.float32 if first.dtype == torch.bfloat16 and not _takes_bfloat16(first.device.type) else None
        ready = [None if t is None else t.detach() if work is None else t.detach().to(work) for t in tensors]
        out = arbiter.run_arbitrated(op, make_region(*ready))
        if not torch.is_tensor(out):
            out = torch.as_tensor(out, device=first.device)
        if any(t is not None and out.data_ptr() == t.data_ptr() for t in ready):
            out = out.clone()  # a custom op's output may not alias an input
    if not out.is_contiguous():  # a candidate that kept its input's layout: the fakes say C-contiguous
        out = out.contiguous()
    return out.to(result_dtype) if out.dtype != result_dtype else out


def _signature(op: str, attrs: tuple, tensors, same: tuple) -> tuple:
    """A CPU call's signature: the op, its other arguments, each tensor's shape, strides and dtype (None: absent),
    and ``same`` (``keys.shared_pairs(tensors)``: one tensor passed twice, then ``"views"`` and views of one
    tensor's memory; their key says so)."""
    sig = (op, attrs, *[None if t is None else (t.shape, t.stride(), t.dtype) for t in tensors])  # (Size: a tuple)
    return sig + same if same else sig


class _TensorCall:
    """A torch caller's region seen on its own CPU tensors: the first call's region values (its arrays dropped)
    with this call's tensors in place of them (as ``torch_in``, and under the operand names themselves). A
    torch-native winner reads its operands through ``torch_in`` (``candidates.nvidia._torch.tensor``) and gives
    its own tensor back (``deliver``). One per call, its values a fresh dict: concurrent callers share nothing
    but the template. The region class's methods and properties run on it (``__getattr__``)."""

    def __init__(self, template, values: dict):
        self._template = template
        self.__dict__.update(values)

    def __getattr__(self, name):
        on_class = getattr(type(self._template), name, None)  # a method or property reads this call's operands
        if isinstance(on_class, property):
            return on_class.__get__(self)
        if isinstance(on_class, FunctionType):
            return MethodType(on_class, self)
        return getattr(self._template, name)


class _OnTensors:
    """The fast path of a warm signature whose winner is torch's own kernel (issue 39 item 4): no NumPy views,
    no region built, no conversion back. A signature (op, attributes, each tensor's shape, strides and dtype)
    learns its route from a first call through ``run_arbitrated``; later calls run the route's candidate on
    their tensors while that route is still the one installed (a re-decision, a reset or a closed dispatch
    takes it out) and no audit samples it, counting a hit as ``run_arbitrated`` does. Any other winner (NumPy,
    numba: they take NumPy arrays) keeps the full path: the signature learns None."""

    def __init__(self):
        self.entries: dict[tuple, Any] = {}
        self.routes: dict[tuple, Any] = {}  # the signature's (key id, route) as last served (torch.compile)

    def get(self, sig):
        return self.entries.get(sig)

    def learn(self, sig, region, ready: list) -> None:
        route = dispatch.route(region.key, torch_caller=True)
        if len(self.entries) >= 4096:  # shapes seen once (a growing sequence): start again, never grow
            self.entries.clear()
            self.routes.clear()
        candidate = None if route is None else route.candidate
        self.routes[sig] = (region.key.id, route)
        if route is None or candidate is None or not route.native or region.nd_shape is not None \
                or region.out is not None or not audit.unaudited(route.run, candidate):  # sampled
            self.entries[sig] = None
            return
        own = route.run  # the candidate's own run (or behind the first-call check: this signature's is taken)
        names = {}  # operand name -> position among the call's tensors: the region must hold them as given
        for name, array in region.operands().items():
            at = next((i for i, r in enumerate(ready) if r is array), None)
            if at is None:  # the region keeps a view or copy of an operand (a reshape): not one tensor's
                self.entries[sig] = None
                return
            names[name] = at
        values = {slot: None if slot in names else getattr(region, slot) for slot in _slots(type(region))
                  if hasattr(region, slot)}
        template = object.__new__(type(region))
        for slot, value in values.items():
            object.__setattr__(template, slot, value)
        values.update(out=None, torch_out=None)
        served: dispatch.Route = route
        kernel: Any = candidate  # (not None: checked above; a closure does not keep the narrowing)
        params, key_id, where = route.params, region.key.id, tuple(names.items())

        def run(tensors):
            # still the installed route, and no audit armed on it since (one replaces route.run)
            if dispatch.route(key_id, torch_caller=True) is not served or served.run is not own:
                return None
            served.hits += 1
            # (no detach: grad mode is off here, under _Arbitrated's forward or for tensors needing none)
            operands = {name: tensors[i] for name, i in where}
            call = _TensorCall(template, values)
            call.__dict__.update(operands, torch_in=operands)
            y = kernel.run(call, params)
            if not torch.is_tensor(y):  # a Fallback, or an array: the full path
                served.hits -= 1
                return None
            at = y.data_ptr()
            for t in tensors:
                if t is not None and t.data_ptr() == at:
                    y = y.clone()  # a custom op's output may not alias an input
                    break
            return y if y.is_contiguous() else y.contiguous()

        self.entries[sig] = run


def _slots(cls) -> list[str]:
    return [slot for klass in cls.__mro__ for slot in getattr(klass, "__slots__", ())]


_on_tensors = _OnTensors()


def _rows2d(t, width: int):
    """``t [..., width]`` as a 2-D ``[rows, width]`` tensor: a view for contiguous leading dimensions."""
    return t if t is None or t.dim() == 2 else t.reshape(-1, width)


def _matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
            residual: torch.Tensor | None = None, activation: str = "none") -> torch.Tensor:
    lead = a.shape[:-1] if a.dim() != 2 and b.dim() == 2 else None  # [..., K] @ [K, N]: rows of a batch
    if lead is not None:
        a, residual = _rows2d(a, a.shape[-1]), _rows2d(residual, b.shape[-1])
    y = _arbitrated("matmul", lambda a_, b_, bias_, res_: regions.Matmul(a_, b_, bias=bias_, activation=activation,
                                                                        residual=res_),
                    [a, b, bias, residual], a.dtype, (activation,))
    return y if lead is None else y.view(*lead, y.shape[-1])


def _matmul_fake(a, b, bias=None, residual=None, activation="none"):
    return a.new_empty((*a.shape[:-1], b.shape[-1]))


def _softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return _arbitrated("softmax", lambda x_: regions.Softmax(x_, axis=dim), [x], x.dtype, (dim,))


def _rows_fake(x, *args, **kwargs):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return _arbitrated("rmsnorm", lambda x_, w_: regions.RMSNorm(x_, w_, eps=eps), [x, weight], x.dtype,
                       (eps,))


def _layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
               eps: float = 1e-5) -> torch.Tensor:
    return _arbitrated("layernorm", lambda x_, w_, b_: regions.LayerNorm(x_, w_, bias=b_, eps=eps), [x, weight, bias],
                       x.dtype, (eps,))


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
               scale: float | None = None) -> torch.Tensor:
    return _arbitrated("attention", lambda q_, k_, v_: regions.Attention(q_, k_, v_, causal=causal, scale=scale),
                       [q, k, v], q.dtype, (causal, scale))


def _attention_fake(q, k, v, causal=False, scale=None):
    return q.new_empty((*q.shape[:-1], v.shape[-1]))


def _gated(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    lead = x.shape[:-1] if x.dim() != 2 else None
    if lead is not None:
        x = _rows2d(x, x.shape[-1])
    y = _arbitrated("gated", lambda x_, g_, u_: regions.Gated(x_, g_, u_), [x, w_gate, w_up], x.dtype, ())
    return y if lead is None else y.view(*lead, y.shape[-1])


def _gated_fake(x, w_gate, w_up):
    return x.new_empty((*x.shape[:-1], w_gate.shape[-1]))


_COMPLEX = {torch.float32: torch.complex64, torch.float64: torch.complex128}
_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64}


def _fft_out(x, kind, inverse, n):
    length = x.shape[-1]
    if kind == "c2c":
        return tuple(x.shape), x.dtype
    if inverse:
        return tuple(x.shape[:-1]) + (n if n is not None else 2 * (length - 1),), _REAL.get(x.dtype, x.dtype)
    return tuple(x.shape[:-1]) + (length // 2 + 1,), _COMPLEX.get(x.dtype, x.dtype)


def _fft(x: torch.Tensor, kind: str = "c2c", inverse: bool = False, n: int | None = None) -> torch.Tensor:
    _, dtype = _fft_out(x, kind, inverse, n)
    return _arbitrated("fft", lambda x_: regions.FFT(x_, kind=kind, inverse=inverse, n=n), [x], dtype,
                       (kind, inverse, n))


def _fft_fake(x, kind="c2c", inverse=False, n=None):
    shape, dtype = _fft_out(x, kind, inverse, n)
    return x.new_empty(shape, dtype=dtype)


def _pointwise(x: torch.Tensor, chain: str, tensors: list[torch.Tensor], scalars: list[float]) -> torch.Tensor:
    def make(x_, *ts):
        return regions.Pointwise(x_, _steps(chain, ts, scalars))

    return _arbitrated("pointwise", make, [x, *tensors], x.dtype)


IMPL: dict[str, Callable] = {
    "matmul": _matmul, "softmax": _softmax, "rmsnorm": _rmsnorm, "layernorm": _layernorm,
    "attention": _attention, "gated": _gated, "fft": _fft, "pointwise": _pointwise}
_FAKE: dict[str, Callable] = {
    "matmul": _matmul_fake, "softmax": _rows_fake, "rmsnorm": _rows_fake, "layernorm": _rows_fake,
    "attention": _attention_fake, "gated": _gated_fake, "fft": _fft_fake, "pointwise": _rows_fake}


# -- backward passes ------------------------------------------------------------------------------------
# Each takes the op's arguments, its output, the output's gradient and which arguments need one, and gives
# the gradients in the arguments' order (a list of them for a list argument, None where none is needed).
# The ops below use torch's own backward kernels or a closed form; the others the VJP of REFERENCE.


def _bwd_softmax(args, y, grad, need):
    x, dim = args
    return [torch._softmax_backward_data(grad, y, dim, x.dtype) if need[0] else None, None]


def _bwd_matmul(args, y, grad, need):
    a, b, bias, residual, activation = args
    k, n = b.shape[-2], b.shape[-1]
    a2, g2 = a.reshape(-1, k), grad.reshape(-1, n)
    if activation != "none":  # the pre-activation again (the arbitrated forward fused it away)
        z = (a2 @ b if bias is None else torch.addmm(bias, a2, b)).requires_grad_()
        with torch.enable_grad():
            (g2,) = torch.autograd.grad(_activation(activation, z), z, g2)
    return [(g2 @ b.mT).view(a.shape) if need[0] else None,
            a2.mT @ g2 if need[1] else None,
            g2.sum(0) if bias is not None and need[2] else None,
            grad if residual is not None and need[3] else None, None]


def _bwd_rmsnorm(args, y, grad, need):
    x, weight, eps = args
    r = torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)
    gw = grad * weight
    gx = r * gw - x * (r * r * r) * (gw * x).mean(-1, keepdim=True) if need[0] else None
    gweight = (grad * x * r).reshape(-1, x.shape[-1]).sum(0) if need[1] else None
    return [gx, gweight, None]


def _bwd_layernorm(args, y, grad, need):
    x, weight, bias, eps = args
    var, mean = torch.var_mean(x, -1, correction=0, keepdim=True)
    gx, gw, gb = torch.ops.aten.native_layer_norm_backward(
        grad, x, [x.shape[-1]], mean, torch.rsqrt(var + eps), weight, bias,
        [need[0], need[1], bias is not None and need[2]])
    return [gx, gw, gb, None]


def _bwd_reference(op: str):
    reference = REFERENCE[op]

    def backward(args, y, grad, need):
        spec, flat = _flatten(args)
        _, vjp = torch.func.vjp(lambda *ts: reference(*_unflatten(spec, ts)), *flat)
        return _unflatten(spec, vjp(grad), const=None)

    return backward


BACKWARD: dict[str, Callable] = {
    "matmul": _bwd_matmul, "softmax": _bwd_softmax, "rmsnorm": _bwd_rmsnorm, "layernorm": _bwd_layernorm,
    **{op: _bwd_reference(op) for op in ("attention", "gated", "fft", "pointwise")}}


def _flatten(args) -> tuple[tuple, list]:
    """(spec, flat tensors) of an argument tuple: a list of tensors becomes its items (autograd sees each)."""
    flat: list = []
    spec: list[tuple[str, Any]] = []
    for value in args:
        if torch.is_tensor(value):
            spec.append(("t", len(flat)))
            flat.append(value)
        elif isinstance(value, (list, tuple)) and value and all(torch.is_tensor(v) for v in value):
            spec.append(("list", tuple(range(len(flat), len(flat) + len(value)))))
            flat.extend(value)
        else:
            spec.append(("const", value))
    return tuple(spec), flat


_KEEP = object()


def _unflatten(spec, flat, const=_KEEP) -> list:
    """The arguments again from ``_flatten``'s spec and (new) flat tensors; constants as they were, or ``const``."""
    return [flat[where] if kind == "t" else [flat[i] for i in where] if kind == "list"
            else (where if const is _KEEP else const) for kind, where in spec]


def _needs(spec, flat_needs) -> list[bool]:
    return [flat_needs[where] if kind == "t" else any(flat_needs[i] for i in where) if kind == "list" else False
            for kind, where in spec]


class _Arbitrated(torch.autograd.Function):
    """An eager call that needs gradients: the arbitrated forward, ``BACKWARD[op]`` behind it (no custom-op
    dispatch on the way: ``torch.ops.arbiter.*`` serves compiled and traced callers)."""

    @staticmethod
    def forward(ctx, op, spec, *flat):
        y = IMPL[op](*_unflatten(spec, flat))
        ctx.op, ctx.spec = op, spec
        ctx.save_for_backward(*flat, y)
        return y

    @staticmethod
    def backward(ctx, *grads):
        *flat, y = ctx.saved_tensors
        spec = ctx.spec
        got = BACKWARD[ctx.op](_unflatten(spec, flat), y, grads[0], _needs(spec, ctx.needs_input_grad[2:]))
        out: list = [None] * len(flat)
        for (kind, where), g in zip(spec, got):
            if kind == "t":
                out[where] = g
            elif kind == "list":
                for i, gi in zip(where, g if g is not None else [None] * len(where)):
                    out[i] = gi
        return (None, None, *out)


def _register(op: str, schema: str | None = None):
    """``arbiter::<op>`` as a torch.library custom op with its fake kernel and ``BACKWARD[op]`` as its backward
    (``schema``: the op's, where its implementation's annotations do not give it)."""
    lib_op = custom_op(f"arbiter::{op}", IMPL[op], mutates_args=(), schema=schema)
    lib_op.register_fake(_FAKE[op])
    backward_of = BACKWARD.get(op)
    if backward_of is None:
        return lib_op

    def setup_context(ctx, inputs, output):
        spec, flat = _flatten(inputs)
        ctx.save_for_backward(*flat, output)
        ctx.spec = spec

    def backward(ctx, grad):
        *flat, y = ctx.saved_tensors
        need = [bool(n) if not isinstance(n, (list, tuple)) else any(n) for n in ctx.needs_input_grad]
        return tuple(backward_of(_unflatten(ctx.spec, flat), y, grad, need))

    lib_op.register_autograd(backward, setup_context=setup_context)
    return lib_op


CUSTOM_OPS = {op: _register(op) for op in IMPL}

# -- torch.compile: the winner traced -------------------------------------------------------------------
# Under torch.compile an op whose key's winner, for the traced shapes, strides and dtypes of CPU tensors, is torch's
# own kernel is traced as that kernel's torch code (``TRACED``), so Inductor compiles and fuses it as it would in the
# plain model. The decision is made when the op is traced (``_decided_native``, run eagerly by dynamo: a key not
# decided yet is decided then, on random tensors of the traced layout, as its first eager call would decide it) and
# holds for the compiled graph: dynamo recompiles on another shape or stride, and a re-decision later does not
# reach code already compiled. The traced op's sizes are specialized: a size dynamo made dynamic after a recompile
# becomes static there again, so each new size compiles its own graph (up to dynamo's recompile limit); under
# ``torch.compile(dynamic=True)`` the op stays opaque. Any other winner (NumPy, numba), CUDA tensors, bfloat16 on
# the CPU and pointwise chains stay the opaque ``torch.ops.arbiter`` op, dispatched at run time. What the gate
# verified is torch's eager kernel for the key; the code Inductor generates from the traced formulation is torch's
# compiler's (docs/architecture.md, "torch.compile").

def _traced_attention(q, k, v, causal, scale):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def _traced_rmsnorm(x, weight, eps):
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


TRACED: dict[str, Callable] = {**REFERENCE, "attention": _traced_attention, "rmsnorm": _traced_rmsnorm}
_TRACEABLE = ("matmul", "softmax", "rmsnorm", "layernorm", "attention", "gated", "fft")


def _sig_parts(op: str, args: tuple) -> tuple[list, tuple]:
    """(the tensors, the other arguments) of ``op(*args)`` as ``_arbitrated`` sees them (``IMPL``'s reshapes)."""
    if op == "matmul":
        a, b, bias, residual, activation = args
        return [_rows2d(a, a.shape[-1]), b, bias, _rows2d(residual, b.shape[-1])], (activation,)
    if op == "gated":
        return [_rows2d(args[0], args[0].shape[-1]), args[1], args[2]], ()
    n = {"softmax": 1, "rmsnorm": 2, "layernorm": 3, "attention": 3, "fft": 1}[op]
    return list(args[:n]), tuple(args[n:])


@torch._dynamo.assume_constant_result
def _decided_native(op: str, descs: tuple, others: tuple) -> bool:
    """Whether ``op`` is served by torch's own kernel on tensors laid out as ``descs`` ((shape, strides, dtype) per
    tensor argument), its arguments in order being ``others`` (("t", index into descs) or ("v", the value)): run
    by dynamo, eagerly, when it traces the op."""
    with torch.no_grad():
        real = [torch.empty_strided(d[0], d[1], dtype=d[2]).normal_() for d in descs]
        args = tuple(real[value] if kind == "t" else value for kind, value in others)
        tensors, attrs = _sig_parts(op, args)
        sig = _signature(op, attrs, tensors, keys.shared_pairs(tensors)[0])  # (fresh tensors: no views)
        known = _on_tensors.routes.get(sig)
        if known is None or known[1] is None or dispatch.route(known[0], torch_caller=True) is not known[1]:
            IMPL[op](*args)  # the decision its first eager call would make (the gate draws its own probes)
            known = _on_tensors.routes.get(sig)
        route = None if known is None else known[1]
        return route is not None and route.candidate is not None and bool(route.native)


def _compiled(op: str, args: tuple):
    """``op(*args)`` under torch.compile: the winner's torch code where it is torch's kernel, else the custom op."""
    if op in _TRACEABLE and torch._dynamo.config.assume_static_by_default:  # (False under dynamic=True)
        descs: list[tuple] = []
        others: list[tuple] = []
        for arg in args:
            if isinstance(arg, torch.Tensor):
                if arg.device.type != "cpu" or arg.dtype == torch.bfloat16:
                    break
                others.append(("t", len(descs)))  # (operator.index: an automatically dynamic size is specialized)
                descs.append((tuple(operator.index(v) for v in arg.shape),
                              tuple(operator.index(v) for v in arg.stride()), arg.dtype))
            else:  # an int or float argument dynamo made dynamic after a recompile is specialized too (index and
                # fsum are evaluated by dynamo on the value, float() is not)
                others.append(("v", operator.index(arg) if type(arg) is int
                               else math.fsum((arg,)) if type(arg) is float else arg))
        else:
            if _decided_native(op, tuple(descs), tuple(others)):
                return TRACED[op](*args)
    return getattr(torch.ops.arbiter, op)(*args)


# -- the public calls -----------------------------------------------------------------------------------
# torch's dispatcher and a custom op's autograd wrapper cost about 100 µs a call on the CPU, several times a
# small op's own work. An eager call on plain tensors (no compile, no tracing or dispatch mode, no functorch
# transform) skips them: straight to the arbiter, or through ``_Arbitrated`` when gradients are needed. Every
# other call goes through ``torch.ops.arbiter.<op>``, which is what torch.compile sees.

_PLAIN = (torch.Tensor, torch.nn.Parameter)
_dispatch_depth = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._is_torch_function_mode_enabled
_functorch_level = torch._C._functorch.peek_interpreter_stack


def _call(op: str, args: tuple, tensors: tuple):
    """``op(*args)`` by the cheapest route that is correct for this call (see above)."""
    grad = False
    for t in tensors:  # (a loop, not any(): a generator is a Python call per tensor on a path of microseconds)
        if t is not None:
            if type(t) not in _PLAIN:
                return getattr(torch.ops.arbiter, op)(*args)
            grad = grad or t.requires_grad
    if torch.compiler.is_compiling() or _dispatch_depth() or _function_modes() or _functorch_level() is not None:
        return getattr(torch.ops.arbiter, op)(*args)
    if grad and torch.is_grad_enabled():
        spec, flat = _flatten(args)
        return _Arbitrated.apply(op, spec, *flat)
    return IMPL[op](*args)


def matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
           residual: torch.Tensor | None = None, activation: str = "none") -> torch.Tensor:
    """``activation(a @ b + bias) + residual``; ``a`` is ``[..., K]`` (leading dimensions are rows), ``b`` ``[K, N]``.

    When an eager caller needs gradients and ``activation`` is not ``none``, the arbitrated op is the GEMM with
    its bias, and the activation and residual run in torch: the backward pass needs the pre-activation, which a
    fused kernel does not keep (recomputing it would cost one more GEMM)."""
    if torch.compiler.is_compiling():
        return _compiled("matmul", (a, b, bias, residual, activation))
    tensors = (a, b, bias, residual)
    if activation != "none" and torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors) \
            and not (_dispatch_depth() or _function_modes() or _functorch_level() is not None) \
            and all(t is None or type(t) in _PLAIN for t in tensors):
        z = _call("matmul", (a, b, bias, None, "none"), (a, b, bias))
        z = _activation(activation, z)
        return z if residual is None else z + residual
    return _call("matmul", (a, b, bias, residual, activation), tensors)


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax of ``x`` along ``dim``."""
    if torch.compiler.is_compiling():
        return _compiled("softmax", (x, dim))
    return _call("softmax", (x, dim), (x,))


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm of ``x [..., N]`` over its last dimension, times ``weight [N]``."""
    if torch.compiler.is_compiling():
        return _compiled("rmsnorm", (x, weight, eps))
    return _call("rmsnorm", (x, weight, eps), (x, weight))


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
              eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm of ``x [..., N]`` over its last dimension (biased variance), times ``weight``, plus ``bias``."""
    if torch.compiler.is_compiling():
        return _compiled("layernorm", (x, weight, bias, eps))
    return _call("layernorm", (x, weight, bias, eps), (x, weight, bias))


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              scale: float | None = None) -> torch.Tensor:
    """Scaled dot-product attention on ``[batch, heads, len, d]`` tensors (any strides)."""
    if torch.compiler.is_compiling():
        return _compiled("attention", (q, k, v, causal, scale))
    return _call("attention", (q, k, v, causal, scale), (q, k, v))


def gated(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    """``silu(x @ w_gate) * (x @ w_up)``; ``x`` is ``[..., K]`` (leading dimensions are rows)."""
    if torch.compiler.is_compiling():
        return _compiled("gated", (x, w_gate, w_up))
    return _call("gated", (x, w_gate, w_up), (x, w_gate, w_up))


def fft(x: torch.Tensor, kind: str = "c2c", inverse: bool = False, n: int | None = None) -> torch.Tensor:
    """1-D FFT over the last dimension (``kind`` c2c or r2c; ``inverse`` for c2r)."""
    if torch.compiler.is_compiling():
        return _compiled("fft", (x, kind, inverse, n))
    return _call("fft", (x, kind, inverse, n), (x,))


def pointwise(x: torch.Tensor, chain: str, tensors: list[torch.Tensor] | tuple = (),
              scalars: list[float] | tuple = ()) -> torch.Tensor:
    """The elementwise ``chain`` (``"mul[t]>add[s]>relu"``) on ``x``, its operands from ``tensors`` and ``scalars``."""
    tensors, scalars = list(tensors), list(scalars)
    if torch.compiler.is_compiling():
        return torch.ops.arbiter.pointwise(x, chain, tensors, scalars)
    return _call("pointwise", (x, chain, tensors, scalars), (x, *tensors))


OPS = {"matmul": matmul, "softmax": softmax, "rmsnorm": rmsnorm, "layernorm": layernorm, "attention": attention,
       "gated": gated, "fft": fft, "pointwise": pointwise}


# -- an op kind of one's own: its folder's TorchOp ----------------------------------------------------------
# A kind that declares ``OpKind.torch_op`` (``arbiter.ops.TorchOp``) is offered as ``torch.ops.arbiter.<op>`` and
# ``OPS[op]`` when it is registered, before or after this module is imported (``arbiter.ops.kind.on_register``).
# Its implementation reads the kind as registered at call time, so a kind replaced later serves through the same
# torch op (torch.library cannot define one name twice).


def _kind_impl(op: str) -> Callable:
    def impl(*args):
        spec = op_kinds.op_kind(op).torch_op
        if spec is None:
            raise RuntimeError(f"arbiter::{op}: the op kind registered now declares no torch_op")
        at = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]

        def make(*arrays):
            full = list(args)
            for i, array in zip(at, arrays):
                full[i] = array
            return spec.region(*full)

        tensors = [args[i] for i in at]
        return _arbitrated(op, make, tensors, tensors[0].dtype)

    return impl


def _kind_fake(op: str) -> Callable:
    def fake(*args):
        spec = op_kinds.op_kind(op).torch_op
        first = next(a for a in args if isinstance(a, torch.Tensor))
        return first.new_empty(tuple(spec.output_shape(*args)))  # type: ignore[union-attr]

    return fake


def _kind_call(op: str) -> Callable:
    def call(*args):
        return _call(op, args, tuple(a for a in args if isinstance(a, torch.Tensor)))

    call.__name__ = call.__qualname__ = op
    call.__doc__ = f"``torch.ops.arbiter.{op}`` through the cheapest correct route (``_call``)."
    return call


def _offer(kind: op_kinds.OpKind) -> None:
    """``kind``'s ``TorchOp`` as ``torch.ops.arbiter.<op>`` (once a name: later kinds of it reuse the op)."""
    if kind.torch_op is None or kind.name in CUSTOM_OPS:
        return
    op = kind.name
    IMPL[op], _FAKE[op] = _kind_impl(op), _kind_fake(op)
    if kind.torch_reference:
        REFERENCE[op] = _reference(kind)
        BACKWARD[op] = _bwd_reference(op)
    CUSTOM_OPS[op] = _register(op, kind.torch_op.schema)
    OPS[op] = _kind_call(op)
    globals().setdefault(op, OPS[op])  # arbiter.torch.<op>, as the built-ins' (never over a name of this module)


op_kinds.on_register(_offer)
