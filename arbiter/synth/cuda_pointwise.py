"""The synthesized tier's pointwise generator (CUDA): a ``Pointwise`` region's chain as one fused kernel.

``pointwise_kernel(steps, dtype, vec)`` writes one CUDA C line per step of the chain (``mul[t]``,
``add[s]``, ``relu``, ...) into a ``chain`` device function: each element is read once, carried
through the whole chain in a float register, and written once, where composed CuPy makes one pass
over memory per step. Tensor operands become arguments ``t0, t1, ...`` and scalar operands ``s0, s1,
...`` (runtime floats: one kernel serves every scalar value). ``vec`` is 1, or the 16-byte vector width
(every operand then 16-byte aligned; the tail past the last whole vector is done element by element).
The result is a ``arbiter.synth.cuda.Kernel``: its identity is the content hash of its source.
"""
from __future__ import annotations

from arbiter.synth.cuda import DTYPES, Kernel
from arbiter.targets.kernels import VEC16
from arbiter.targets.nvrtc import BACKEND

# Each unary step as a CUDA expression in v (float).
UNARY = {
    "neg": "-v",
    "abs": "fabsf(v)",
    "relu": "pw_max(v, 0.0f)",
    "exp": "expf(v)",
    "tanh": "tanhf(v)",
    "sigmoid": "1.0f / (1.0f + expf(-v))",
    "silu": "v / (1.0f + expf(-v))",
    "gelu_tanh": "0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)))",
    "square": "v * v",
}
# Each binary step as an expression in v and its operand r. max/min propagate NaN as NumPy does.
BINARY = {"add": "v + {r}", "sub": "v - {r}", "mul": "v * {r}", "max": "pw_max(v, {r})", "min": "pw_min(v, {r})"}

TEMPLATE = """\
// Synthesized by arbiter.synth.cuda_pointwise from the chain below; regenerated, never edited.
// chain: {chain}
// dtype: {dtype}, {vec} element(s) a load
__device__ __forceinline__ float pw_max(float a, float b) {{ return (a > b || a != a) ? a : b; }}
__device__ __forceinline__ float pw_min(float a, float b) {{ return (a < b || a != a) ? a : b; }}

__device__ __forceinline__ float chain(float v{chain_params})
{{
{body}
    return v;
}}

extern "C" __global__ void synth_pointwise(const T* __restrict__ x, T* __restrict__ out{kernel_params}, long long n)
{{
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long start = (long long)blockIdx.x * blockDim.x + threadIdx.x;
#if VEC > 1
    // Whole 16-byte vectors: VEC elements of x and of every tensor operand a load.
    for (long long i = start; i < n / VEC; i += stride) {{
        float xv[VEC]{vec_decls};
        unpack16(__ldg(reinterpret_cast<const uint4*>(x) + i), xv);
{vec_loads}        #pragma unroll
        for (int e = 0; e < VEC; ++e) xv[e] = chain(xv[e]{vec_args});
        reinterpret_cast<uint4*>(out)[i] = pack16(xv);
    }}
    // The tail past the last whole vector, element by element.
    for (long long i = (n / VEC) * VEC + start; i < n; i += stride)
        out[i] = from_f(chain(to_f(x[i]){scalar_args}));
#else
    for (long long i = start; i < n; i += stride)
        out[i] = from_f(chain(to_f(x[i]){scalar_args}));
#endif
}}
"""


def pointwise_kernel(steps, dtype: str, vec: int) -> Kernel:
    """The fused kernel for ``steps`` (a ``Pointwise`` region's ``ops``: (name, operand) pairs, the operand
    None, a float or an array) in ``dtype`` with ``vec``-element loads. Raises ValueError naming the argument."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype: {dtype} is not one of {', '.join(DTYPES)}")
    if vec not in (1, VEC16[dtype]):
        raise ValueError(f"vec: {vec} should be 1 or {VEC16[dtype]} (16 bytes of {dtype})")
    lines, chain, tensors, scalars = [], [], 0, 0
    for name, operand in steps:
        if operand is None:
            if name not in UNARY:
                raise ValueError(f"steps: unknown unary op {name!r}")
            lines.append(f"    v = {UNARY[name]};  // {name}")
            chain.append(name)
            continue
        if name not in BINARY:
            raise ValueError(f"steps: unknown binary op {name!r}")
        if isinstance(operand, float):
            read, scalars = f"s{scalars}", scalars + 1
            chain.append(f"{name}[s]")
        else:
            read, tensors = f"r{tensors}", tensors + 1
            chain.append(f"{name}[t]")
        lines.append(f"    v = {BINARY[name].format(r=read)};  // {chain[-1]}")
    t_names, s_names = [f"t{i}" for i in range(tensors)], [f"s{i}" for i in range(scalars)]
    text = TEMPLATE.format(
        chain=">".join(chain) or "copy", dtype=dtype, vec=vec,
        body="\n".join(lines) or "    // copy",
        chain_params="".join(f", float r{i}" for i in range(tensors)) + "".join(f", float {s}" for s in s_names),
        kernel_params="".join(f", const T* __restrict__ {t}" for t in t_names)
        + "".join(f", float {s}" for s in s_names),
        vec_decls="".join(f", {t}v[VEC]" for t in t_names),
        vec_loads="".join(f"        unpack16(__ldg(reinterpret_cast<const uint4*>({t}) + i), {t}v);\n"
                          for t in t_names),
        vec_args="".join(f", {t}v[e]" for t in t_names) + "".join(f", {s}" for s in s_names),
        scalar_args="".join(f", to_f({t}[i])" for t in t_names) + "".join(f", {s}" for s in s_names),
    )
    return Kernel("synth_pointwise", BACKEND.source(dtype, {"VEC": vec}, (), prelude=text))


def arguments(region) -> tuple:
    """The kernel's arguments after x and out and before n: tensors, then scalars (as float32)."""
    import numpy as np

    return tuple(region.tensors()) + tuple(np.float32(s) for s in region.scalars())
