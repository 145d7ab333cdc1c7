"""The Triton kernels of the emitted Triton candidates (``gpu_triton``): readable templates, one function each.

Imported only where Triton imports (``gpu_triton.kernels()``). Every tile size and flag is a ``tl.constexpr``;
``gpu_triton`` compiles one specialization per (parameter set, dtype, epilogue, unit strides, 16-divisibility)
and launches it through the compiled kernel's own launcher. Products accumulate in float32 and round once, at
the store; the epilogue (bias, activation, residual) runs on the float32 accumulator in registers.
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _activate(v, ACTIVATION: tl.constexpr):
    """``arbiter.synth.ACTIVATIONS`` in float32, by ``gpu_triton.ACTIVATION_CODES``. tanh-GELU as ``v * sigmoid(2u)``
    (= 0.5 v (1 + tanh u))."""
    if ACTIVATION == 1:
        v = tl.where(v < 0.0, 0.0, v)  # not tl.maximum, which drops a NaN: relu(NaN) is NaN, as in the oracle
    elif ACTIVATION == 2:
        v = 0.5 * v * (1.0 + tl.math.erf(v * 0.7071067811865476))
    elif ACTIVATION == 3:
        u = 0.7978845608028654 * (v + 0.044715 * v * v * v)
        v = v / (1.0 + tl.exp(-2.0 * u))
    elif ACTIVATION == 4:
        v = v / (1.0 + tl.exp(-v))
    return v


@triton.jit
def _tile_ids(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of this program: blocks ordered in groups of GROUP_M block rows, so consecutive programs
    share the same columns of B while they sit in L2."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * num_pid_n
    group = pid // in_group
    first_m = group * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % in_group) % group_m)
    pid_n = (pid % in_group) // group_m
    return pid_m, pid_n


@triton.jit
def _k_slice(ptrs, k_mask, step, EVEN_K: tl.constexpr):
    """The K-slice of an operand at ``ptrs``, and the pointers advanced to the next (``step``: BLOCK_K times the
    operand's K stride). The K tail, where ``k_mask`` is False, reads as zeros; EVEN_K (no tail) loads unmasked."""
    if EVEN_K:
        v = tl.load(ptrs)
    else:
        v = tl.load(ptrs, mask=k_mask, other=0.0)
    return v, ptrs + step


@triton.jit
def gemm(a_ptr, b_ptr, c_ptr, bias_ptr, res_ptr, M, N, K,
         stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_rm, stride_rn,
         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
         ACTIVATION: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, EVEN_K: tl.constexpr):
    """``c = act(a @ b + bias) + residual``; ``c`` C-contiguous rows of ``stride_cm``; any strides for the rest.

    Rows and columns past M and N are read wrapped (``% M``, ``% N``: in bounds, never stored); the K tail is
    masked to zeros unless EVEN_K (K a multiple of BLOCK_K)."""
    pid_m, pid_n = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (rm % M)[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + (rn % N)[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kk in range(0, tl.cdiv(K, BLOCK_K)):
        left = K - kk * BLOCK_K
        a, a_ptrs = _k_slice(a_ptrs, rk[None, :] < left, BLOCK_K * stride_ak, EVEN_K)
        b, b_ptrs = _k_slice(b_ptrs, rk[:, None] < left, BLOCK_K * stride_bk, EVEN_K)
        acc = tl.dot(a, b, acc)
    in_n = rn < N
    mask = (rm < M)[:, None] & in_n[None, :]
    if HAS_BIAS:
        acc += tl.load(bias_ptr + rn, mask=in_n, other=0.0).to(tl.float32)[None, :]
    acc = _activate(acc, ACTIVATION)
    if HAS_RESIDUAL:
        res = tl.load(res_ptr + rm[:, None] * stride_rm + rn[None, :] * stride_rn, mask=mask, other=0.0)
        acc += res.to(tl.float32)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :], acc.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def gated(x_ptr, wg_ptr, wu_ptr, out_ptr, M, N, K,
          stride_xm, stride_xk, stride_gk, stride_gn, stride_uk, stride_un, stride_om,
          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
          EVEN_K: tl.constexpr):
    """``out = silu(x @ w_gate) * (x @ w_up)``: one read of each x tile feeds both products; the gate is applied
    to the two float32 accumulators in registers, neither product is written to memory."""
    pid_m, pid_n = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    wrapped_n = (rn % N)[None, :]
    x_ptrs = x_ptr + (rm % M)[:, None] * stride_xm + rk[None, :] * stride_xk
    g_ptrs = wg_ptr + rk[:, None] * stride_gk + wrapped_n * stride_gn
    u_ptrs = wu_ptr + rk[:, None] * stride_uk + wrapped_n * stride_un
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kk in range(0, tl.cdiv(K, BLOCK_K)):
        left = K - kk * BLOCK_K
        x, x_ptrs = _k_slice(x_ptrs, rk[None, :] < left, BLOCK_K * stride_xk, EVEN_K)
        g, g_ptrs = _k_slice(g_ptrs, rk[:, None] < left, BLOCK_K * stride_gk, EVEN_K)
        u, u_ptrs = _k_slice(u_ptrs, rk[:, None] < left, BLOCK_K * stride_uk, EVEN_K)
        acc_g = tl.dot(x, g, acc_g)
        acc_u = tl.dot(x, u, acc_u)
    y = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u
    mask = (rm < M)[:, None] & (rn < N)[None, :]
    tl.store(out_ptr + rm[:, None] * stride_om + rn[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)


KERNELS = {"gemm": gemm, "gated": gated}
