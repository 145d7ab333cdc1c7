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
==========================  ====================================================================

Each is callable as ``torch.ops.arbiter.<op>(...)`` or ``arbiter.torch.<op>(...)``. At run time it
builds the op's region from the tensors and calls ``arbiter.run_arbitrated``: the F4 gate, the
registry, the miss policy and the counters all apply, and the stored winner serves the key. Each op
has a fake (meta) kernel giving the output's shape, dtype and device, so a module calling them
compiles under ``torch.compile(fullgraph=True)``: the op is one opaque node of the graph, dispatched
through the arbiter when the compiled code runs.

* **Devices**: CPU tensors go to the ``cpu`` target (zero copy both ways); CUDA tensors to the
  ``nvidia`` target, results coming back as torch tensors on the same device.
* **bfloat16**: on CUDA the tensors go to the target as bfloat16 (the key says bfloat16) where its
  arrays have that dtype (CuPy >= 14 with ml_dtypes). NumPy has no bfloat16, so on the CPU (and on a
  CuPy without it) they are computed in float32 (the key says float32) and rounded to bfloat16: at
  least as accurate as bfloat16 arithmetic; float16 stays float16.
* **Autograd**: inputs that require grad get gradients. The forward pass is the arbitrated op; the
  backward pass is the vector-Jacobian product of the op's reference formulation in torch
  (``REFERENCE`` below, the same definitions as the float64 oracles), recomputed from the saved inputs.
  So training works and stays correct, but the backward pass is torch's, not a measured candidate.
"""  # noqa: E501 (the table of ops is wider than 120 columns)
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.library import custom_op

import arbiter
from arbiter import regions, targets

# -- the reference formulations (forward in torch; their VJPs are the backward passes) ---------------


def _activation(name: str, z):
    if name == "none":
        return z
    if name == "relu":
        return torch.relu(z)
    if name == "gelu":
        return F.gelu(z)
    if name == "gelu_tanh":
        return F.gelu(z, approximate="tanh")
    if name == "silu":
        return F.silu(z)
    raise ValueError(f"activation: {name!r} is not one of none, relu, gelu, gelu_tanh, silu")


def ref_matmul(a, b, bias, residual, activation):
    z = a @ b
    if bias is not None:
        z = z + bias
    z = _activation(activation, z)
    return z if residual is None else z + residual


def ref_softmax(x, dim):
    return torch.softmax(x, dim)


def ref_rmsnorm(x, weight, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * weight


def ref_layernorm(x, weight, bias, eps):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def ref_attention(q, k, v, causal, scale):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = scale * (q @ k.transpose(-1, -2))
    if causal:  # top-left aligned, as the region and the oracle
        sq, sk = scores.shape[-2:]
        mask = torch.ones(sq, sk, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, -1) @ v


def ref_gated(x, w_gate, w_up):
    return F.silu(x @ w_gate) * (x @ w_up)


def ref_fft(x, kind, inverse, n):
    if kind == "c2c":
        return torch.fft.ifft(x, dim=-1) if inverse else torch.fft.fft(x, dim=-1)
    return torch.fft.irfft(x, n=n, dim=-1) if inverse else torch.fft.rfft(x, dim=-1)


_UNARY = {"neg": torch.neg, "abs": torch.abs, "relu": torch.relu, "exp": torch.exp, "tanh": torch.tanh,
          "sigmoid": torch.sigmoid, "silu": F.silu, "gelu_tanh": lambda v: F.gelu(v, approximate="tanh"),
          "square": torch.square}
_BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "max": torch.maximum, "min": torch.minimum}


def _steps(chain: str, tensors, scalars) -> list[tuple]:
    """``mul[t]>add[s]>relu`` with its operands in order -> the region's steps ``[("mul", t0), ...]``."""
    steps: list[tuple] = []  # (name,) or (name, operand)
    t, s = iter(tensors), iter(scalars)
    for part in filter(None, chain.split(">")):
        name, _, kind = part.partition("[")
        if kind == "t]":
            steps.append((name, next(t, None)))
        elif kind == "s]":
            steps.append((name, next(s, None)))
        elif part == "copy":
            continue
        else:
            steps.append((name,))
        if len(steps[-1]) == 2 and steps[-1][1] is None:
            raise ValueError(f"chain: step {part!r} has no operand left in "
                             f"{'tensors' if kind == 't]' else 'scalars'}")
    if next(t, None) is not None or next(s, None) is not None:
        raise ValueError(f"chain: {chain!r} uses fewer operands than given in tensors/scalars")
    return steps


def ref_pointwise(x, chain, tensors, scalars):
    v = x
    for step in _steps(chain, tensors, scalars):
        if len(step) == 1:
            v = _UNARY[step[0]](v)
        else:
            operand = step[1]
            v = _BINARY[step[0]](v, operand if torch.is_tensor(operand) else torch.tensor(operand, dtype=v.dtype,
                                                                                         device=v.device))
    return v


REFERENCE: dict[str, Callable] = {
    "matmul": ref_matmul, "softmax": ref_softmax, "rmsnorm": ref_rmsnorm, "layernorm": ref_layernorm,
    "attention": ref_attention, "gated": ref_gated, "fft": ref_fft, "pointwise": ref_pointwise}


# -- dispatch through the arbiter -----------------------------------------------------------------------


def _host_ready(t: torch.Tensor | None, work_dtype):
    """A tensor the region can adopt: detached (the custom op's autograd is ours), and on the CPU in a
    dtype NumPy has (bfloat16 -> float32)."""
    if t is None:
        return None
    t = t.detach()
    return t if work_dtype is None else t.to(work_dtype)


_native_bf16: dict[str, bool] = {}


def _takes_bfloat16(device_type: str) -> bool:
    """Whether the target serving ``device_type`` tensors has a bfloat16 array type (NumPy has none;
    CuPy >= 14 with ml_dtypes has)."""
    found = _native_bf16.get(device_type)
    if found is None:
        found = device_type == "cuda" and targets.get("nvidia").bfloat16() is not None  # type: ignore[attr-defined]  # the nvidia target's
        _native_bf16[device_type] = found
    return found


def _arbitrated(op: str, make_region, tensors: list, result_dtype):
    """Run ``make_region(*ready tensors)`` through the arbiter; the result as a fresh tensor."""
    first = tensors[0]
    bf16_in_f32 = first.dtype == torch.bfloat16 and not _takes_bfloat16(first.device.type)
    work = torch.float32 if bf16_in_f32 else None
    ready = [_host_ready(t, work) for t in tensors]
    y = arbiter.run_arbitrated(op, make_region(*ready))
    if not torch.is_tensor(y):
        y = torch.as_tensor(y, device=first.device)
    if any(t is not None and y.data_ptr() == t.data_ptr() for t in ready):
        y = y.clone()  # a custom op's output may not alias an input
    return y.to(result_dtype) if y.dtype != result_dtype else y


def _register(op: str, fn, fake):
    """Register ``fn`` as ``arbiter::<op>`` with its fake kernel and the reference VJP as its backward."""
    lib_op = custom_op(f"arbiter::{op}", mutates_args=())(fn)
    lib_op.register_fake(fake)
    reference = REFERENCE[op]

    def setup_context(ctx, inputs, output):
        flat: list = []
        spec: list[tuple[str, Any]] = []
        for value in inputs:
            if torch.is_tensor(value):
                spec.append(("t", len(flat)))
                flat.append(value)
            elif isinstance(value, (list, tuple)) and value and all(torch.is_tensor(v) for v in value):
                spec.append(("list", list(range(len(flat), len(flat) + len(value)))))
                flat.extend(value)
            else:
                spec.append(("const", value))
        ctx.save_for_backward(*flat)
        ctx.spec = spec

    def backward(ctx, grad):
        flat = ctx.saved_tensors

        def rebuild(*ts):
            args = []
            for kind, where in ctx.spec:
                args.append(ts[where] if kind == "t" else [ts[i] for i in where] if kind == "list" else where)
            return reference(*args)

        _, vjp = torch.func.vjp(rebuild, *flat)
        grads = vjp(grad)
        out = []
        for kind, where in ctx.spec:
            out.append(grads[where] if kind == "t" else [grads[i] for i in where] if kind == "list" else None)
        return tuple(out)

    lib_op.register_autograd(backward, setup_context=setup_context)
    return lib_op


def _matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
            residual: torch.Tensor | None = None, activation: str = "none") -> torch.Tensor:
    return _arbitrated("matmul", lambda a_, b_, bias_, res_: regions.Matmul(a_, b_, bias=bias_, activation=activation,
                                                                           residual=res_),
                       [a, b, bias, residual], a.dtype)


def _matmul_fake(a, b, bias=None, residual=None, activation="none"):
    return a.new_empty((a.shape[0], b.shape[1]))


def _softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return _arbitrated("softmax", lambda x_: regions.Softmax(x_, axis=dim), [x], x.dtype)


def _rows_fake(x, *args, **kwargs):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return _arbitrated("rmsnorm", lambda x_, w_: regions.RMSNorm(x_, w_, eps=eps), [x, weight], x.dtype)


def _layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
               eps: float = 1e-5) -> torch.Tensor:
    return _arbitrated("layernorm", lambda x_, w_, b_: regions.LayerNorm(x_, w_, bias=b_, eps=eps), [x, weight, bias],
                       x.dtype)


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
               scale: float | None = None) -> torch.Tensor:
    return _arbitrated("attention", lambda q_, k_, v_: regions.Attention(q_, k_, v_, causal=causal, scale=scale),
                       [q, k, v], q.dtype)


def _gated(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    return _arbitrated("gated", lambda x_, g_, u_: regions.Gated(x_, g_, u_), [x, w_gate, w_up], x.dtype)


def _gated_fake(x, w_gate, w_up):
    return x.new_empty((x.shape[0], w_gate.shape[1]))


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
    return _arbitrated("fft", lambda x_: regions.FFT(x_, kind=kind, inverse=inverse, n=n), [x], dtype)


def _fft_fake(x, kind="c2c", inverse=False, n=None):
    shape, dtype = _fft_out(x, kind, inverse, n)
    return x.new_empty(shape, dtype=dtype)


def _pointwise(x: torch.Tensor, chain: str, tensors: list[torch.Tensor], scalars: list[float]) -> torch.Tensor:
    def make(x_, *ts):
        return regions.Pointwise(x_, _steps(chain, ts, scalars))

    return _arbitrated("pointwise", make, [x, *tensors], x.dtype)


matmul = _register("matmul", _matmul, _matmul_fake)
softmax = _register("softmax", _softmax, _rows_fake)
rmsnorm = _register("rmsnorm", _rmsnorm, _rows_fake)
layernorm = _register("layernorm", _layernorm, _rows_fake)
attention = _register("attention", _attention, _rows_fake)
gated = _register("gated", _gated, _gated_fake)
fft = _register("fft", _fft, _fft_fake)
pointwise = _register("pointwise", _pointwise, _rows_fake)

OPS = {"matmul": matmul, "softmax": softmax, "rmsnorm": rmsnorm, "layernorm": layernorm, "attention": attention,
       "gated": gated, "fft": fft, "pointwise": pointwise}
