"""The synthesized tier's pointwise generator (CPU): a ``Pointwise`` region's chain as one fused numba kernel.

``source(steps, dtype)`` writes ``TEMPLATE`` with one line per step of the chain (``mul[t]``,
``add[s]``, ``relu``, ...): every element is read once, carried through the chain in a register,
and written once, where NumPy makes one pass over memory per step. Tensor operands become
arguments ``t0, t1, ...`` and scalar operands ``s0, s1, ...`` (runtime values: one kernel serves
every scalar). The kernel's identity is the content hash of its source; sources are written to
the synth cache directory (``arbiter.synth.cpu.cache_dir``) and imported from there so that numba's
disk cache keeps their machine code across processes.

The chain is carried in float64 whatever the dtype, as the oracle computes it: a float32 chain overflows in an
intermediate where the oracle does not (``mul`` by a large value, then ``silu`` gives ``-inf / inf = NaN`` where
the oracle's float64 gives -0; the gate's ``huge`` family probes it). In registers it costs no memory traffic:
each element is still read once and written once (rounded once, at the store).
"""
from __future__ import annotations

from arbiter.synth.cpu import SynthKernel, load_source

DTYPES = ("float32", "float64")

TEMPLATE = '''\
# Synthesized by arbiter.synth.pointwise from the chain below; regenerated, never edited.
# chain: {chain}
# dtype: {dtype}, parallel: {parallel}
import math

import numpy as np
from numba import prange

from arbiter.targets.numba_cache import njit  # cached in the private folder only

T = np.float64  # the chain's working type, whatever {dtype} is: see the module's docstring


@njit(parallel={parallel}, cache=True, fastmath={{"contract"}})
def kernel(x, out{params}):
    """out[i] = chain(x[i]) over 1-D C-contiguous arrays of one dtype, carried in float64 registers."""
    for i in {loop}(x.shape[0]):
        v = T(x[i])
{body}
        out[i] = v
'''

# Each unary step as an expression in v; literals are T(...), the working type.
UNARY = {
    "neg": "-v",
    "abs": "abs(v)",
    "relu": "max(v, T(0.0))",
    "exp": "math.exp(v)",
    "tanh": "math.tanh(v)",
    "sigmoid": "T(1.0) / (T(1.0) + math.exp(-v))",
    "silu": "v / (T(1.0) + math.exp(-v))",
    "gelu_tanh": "T(0.5) * v * (T(1.0) + math.tanh(T(0.7978845608028654) * (v + T(0.044715) * v * v * v)))",
    "square": "v * v",
}
# Each binary step as an expression in v and its operand r.
# max and min propagate a NaN from either side, as the oracle's np.maximum/np.minimum do (numba's max/min keep
# the first argument when the second is NaN).
BINARY = {"add": "v + {r}", "sub": "v - {r}", "mul": "v * {r}", "max": "max(v, {r}) if {r} == {r} else {r}",
          "min": "min(v, {r}) if {r} == {r} else {r}"}


def source(steps, dtype: str, parallel: bool = True) -> str:
    """The kernel source for ``steps`` (a ``Pointwise`` region's ``ops``: (name, operand) pairs, the operand
    None, a float, or an array) in ``dtype``, split across threads (``prange``) when ``parallel``. Raises
    ValueError for a dtype numba cannot compute."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype: {dtype} is not one of {', '.join(DTYPES)} (numba has no other CPU floats)")
    lines, params, tensors, scalars, chain = [], [], 0, 0, []
    for name, operand in steps:
        if operand is None:
            lines.append(f"v = {UNARY[name]}  # {name}")
            chain.append(name)
            continue
        if isinstance(operand, float):
            arg, read = f"s{scalars}", f"T(s{scalars})"
            scalars += 1
            chain.append(f"{name}[s]")
        else:
            arg = f"t{tensors}"
            read = f"T({arg}[i])"
            tensors += 1
            chain.append(f"{name}[t]")
        params.append(arg)
        lines.append(f"v = {BINARY[name].format(r=read)}  # {chain[-1]}")
    # Arguments: every tensor, then every scalar, each in chain order (what ``arguments`` passes).
    params.sort(key=lambda p: (p[0] != "t", int(p[1:])))
    body = "\n".join(" " * 8 + line for line in lines) or " " * 8 + "pass  # copy"
    return TEMPLATE.format(chain=">".join(chain) or "copy", dtype=dtype, body=body, parallel=bool(parallel),
                           loop="prange" if parallel else "range", params="".join(f", {p}" for p in params))


def arguments(region) -> tuple:
    """The kernel's arguments for ``region`` after x and out: tensors (flattened), then scalars."""
    return tuple(t.reshape(-1) for t in region.tensors()) + tuple(region.scalars())


_kernels: dict[str, SynthKernel] = {}


def kernel(steps, dtype: str, parallel: bool = True) -> SynthKernel:
    """The compiled kernel for ``steps`` in ``dtype``: generated, written and imported once per content hash."""
    return load_source(source(steps, dtype, parallel), "pw", "arbiter_synth_pointwise", _kernels)
