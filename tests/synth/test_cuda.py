"""The CUDA backend of the synthesized tier generates readable source from a region's description.

Source generation needs no GPU; compiling and running the kernels is covered by the GPU gate tests
(tests/candidates/nvidia/test_nvidia_gate.py).
"""
from __future__ import annotations

import pytest

from arbiter.synth import Chain, Operand, Step, cuda

CHAIN = Chain((Operand("bias", "row"), Operand("residual", "full")),
              (Step("add", "bias"), Step("act", "gelu"), Step("add", "residual")))


def test_epilogue_renders_each_step_in_order_in_single_precision():
    src = cuda.epilogue_source(CHAIN, residual_col_stride=2)
    body = src[src.index("{"):]
    bias, gelu, res = (body.index(s) for s in ("bias[col]", "erff(", "residual[row * ldr + col * 2LL]"))
    assert bias < gelu < res
    assert "0.5f" in src and "0.5 " not in src  # float literals, no double arithmetic


def test_gemm_kernel_picks_the_template_by_dtype_and_hashes_its_content():
    k32 = cuda.gemm_kernel(CHAIN, "float32", (64, 64, 16, 4, 4))
    k16 = cuda.gemm_kernel(CHAIN, "float16", (64, 64, 32, 2, 2, 4))
    assert (k32.name, k16.name) == ("gemm_tiled", "gemm_mma")
    assert "#define ARB_F16 1" in k16.source and '"f16"' in k16.source
    assert "#define STAGES 4\n" in k16.source and "#define CP_ASYNC 0\n" in k16.source  # element loads unless asked
    fast = cuda.gemm_kernel(CHAIN, "float16", (64, 64, 32, 2, 2, 4), cp_async=True)
    assert "#define CP_ASYNC 1\n" in fast.source and fast.identity != k16.identity
    relu = Chain(CHAIN.operands, (Step("add", "bias"), Step("act", "relu"), Step("add", "residual")))
    assert cuda.gemm_kernel(relu, "float32", (64, 64, 16, 4, 4)).identity != k32.identity
    assert cuda.gemm_kernel(CHAIN, "float32", (64, 64, 16, 4, 4)).identity == k32.identity


def test_a_chain_needing_more_pointers_than_the_gemm_has_is_refused():
    two_rows = Chain((Operand("b1", "row"), Operand("b2", "row")), (Step("add", "b1"), Step("add", "b2")))
    with pytest.raises(ValueError, match="b2"):
        cuda.epilogue_source(two_rows)


@pytest.mark.parametrize("op", ["softmax", "rmsnorm"])
@pytest.mark.parametrize("cols,vec", [(1, 1), (1000, 8), (4097, 1), (16384, 4), (65536, 1)])
def test_row_kernel_is_specialised_on_the_exact_columns(op, cols, vec):
    k = cuda.row_kernel(op, "float32", cols, vec)
    threads, rpb, iters = cuda.row_shape(cols, vec)
    assert f"#define COLS {cols}\n" in k.source and f"#define ITERS {iters}\n" in k.source
    assert threads * iters * vec >= cols and iters * vec <= 64
    assert (rpb > 1) == (threads == 32)
    assert ("const T* __restrict__ W" in k.source) == (op == "rmsnorm")


def test_row_kernel_refuses_rows_beyond_the_register_budget():
    with pytest.raises(ValueError, match="cols"):
        cuda.row_shape(65537, 1)
