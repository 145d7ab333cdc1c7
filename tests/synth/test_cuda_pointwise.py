"""The CUDA pointwise generator writes one readable line per chain step; its identity is its content.

Source generation needs no GPU; compiling and running the kernels is covered by the GPU gate tests
(tests/candidates/nvidia/test_nvidia_ops.py).
"""
from __future__ import annotations

import numpy as np
import pytest

from arbiter.synth import cuda_pointwise

TENSOR = np.zeros(4, np.float32)  # stands for a tensor operand: the generator only looks at its kind


def test_each_step_is_one_line_in_chain_order_with_tensors_and_scalars_as_arguments():
    k = cuda_pointwise.pointwise_kernel([("mul", TENSOR), ("add", 1.5), ("relu", None), ("tanh", None)],
                                        "float32", 1)
    src = k.source
    lines = [src.index(s) for s in ("v = v * r0;  // mul[t]", "v = v + s0;  // add[s]",
                                    "v = pw_max(v, 0.0f);  // relu", "v = tanhf(v);  // tanh")]
    assert lines == sorted(lines)
    assert "// chain: mul[t]>add[s]>relu>tanh" in src
    assert "const T* __restrict__ t0, float s0, long long n" in src  # tensors, then scalars, then n
    assert "1.5" not in src  # scalar values are runtime arguments: one kernel serves every value
    assert "#define ARB_F32 1" in src and "#define VEC 1" in src


def test_identity_follows_structure_dtype_and_vector_width_not_scalar_values():
    def ident(steps, dtype="float16", vec=8):
        return cuda_pointwise.pointwise_kernel(steps, dtype, vec).identity

    base = ident([("add", 1.0), ("silu", None)])
    assert base == ident([("add", 7.0), ("silu", None)])
    assert base != ident([("add", TENSOR), ("silu", None)])
    assert base != ident([("add", 1.0), ("sigmoid", None)])
    assert base != ident([("add", 1.0), ("silu", None)], "bfloat16")
    assert base != ident([("add", 1.0), ("silu", None)], vec=1)


def test_every_region_op_has_a_cuda_expression():
    from arbiter.regions import POINTWISE_BINARY, POINTWISE_UNARY

    assert set(cuda_pointwise.UNARY) == set(POINTWISE_UNARY)
    assert set(cuda_pointwise.BINARY) == set(POINTWISE_BINARY)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="dtype"):
        cuda_pointwise.pointwise_kernel([("relu", None)], "float64", 1)
    with pytest.raises(ValueError, match="vec"):
        cuda_pointwise.pointwise_kernel([("relu", None)], "float32", 8)
    with pytest.raises(ValueError, match="steps"):
        cuda_pointwise.pointwise_kernel([("cube", None)], "float32", 1)
