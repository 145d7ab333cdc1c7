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
def gemm_splitk(a_ptr, b_ptr, ws_ptr, M, N, K, K_PER, stride_am, stride_ak, stride_bk, stride_bn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                EVEN_K: tl.constexpr):
    """Split ``s = tl.program_id(1)`` of ``a @ b``: the float32 product over K columns [s K_PER, min(K, (s + 1)
    K_PER)) into ``ws[s]`` ([M, N], C-contiguous, one slab a split); no epilogue (``splitk_reduce`` applies it).
    K_PER is a multiple of BLOCK_K; EVEN_K: K a multiple of K_PER, so no slice has a tail."""
    pid_m, pid_n = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    split = tl.program_id(1)
    k0 = split * K_PER
    depth = tl.minimum(K - k0, K_PER)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (rm % M)[:, None] * stride_am + (k0 + rk)[None, :] * stride_ak
    b_ptrs = b_ptr + (k0 + rk)[:, None] * stride_bk + (rn % N)[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kk in range(0, tl.cdiv(depth, BLOCK_K)):
        left = depth - kk * BLOCK_K
        a, a_ptrs = _k_slice(a_ptrs, rk[None, :] < left, BLOCK_K * stride_ak, EVEN_K)
        b, b_ptrs = _k_slice(b_ptrs, rk[:, None] < left, BLOCK_K * stride_bk, EVEN_K)
        acc = tl.dot(a, b, acc)
    mask = (rm < M)[:, None] & (rn < N)[None, :]
    tl.store(ws_ptr + split * M * N + rm[:, None] * N + rn[None, :], acc, mask=mask)


@triton.jit
def splitk_reduce(ws_ptr, bias_ptr, res_ptr, c_ptr, M, N, SPLITS, stride_cm, stride_rm, stride_rn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACTIVATION: tl.constexpr, HAS_BIAS: tl.constexpr,
                  HAS_RESIDUAL: tl.constexpr):
    """``c = act(sum_s ws[s] + bias) + residual``: the splits summed in order 0, 1, ... (the same sum on every
    run: deterministic, no atomics), the epilogue as ``gemm``'s on the float32 sum, one rounding at the store."""
    pid = tl.program_id(0)
    num_n = tl.cdiv(N, BLOCK_N)
    rm = (pid // num_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = (pid % num_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    in_n = rn < N
    mask = (rm < M)[:, None] & in_n[None, :]
    ws_ptrs = ws_ptr + rm[:, None] * N + rn[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _split in range(0, SPLITS):
        acc += tl.load(ws_ptrs, mask=mask, other=0.0)
        ws_ptrs += M * N
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


# Row ops of the ``rows`` kernel (``gpu_templates/triton_rows.py``'s ``ROW_OPS``).
SOFTMAX: tl.constexpr = tl.constexpr(0)
RMSNORM: tl.constexpr = tl.constexpr(1)
LAYERNORM: tl.constexpr = tl.constexpr(2)


@triton.jit
def _row_tile(x_ptr, rows, cols, start, R, C, stride_xm, other):
    """The [ROWS, BLOCK] tile of rows ``rows`` and columns ``start + cols`` in float32, and its mask (rows past R
    and columns past C read as ``other``)."""
    c = start + cols
    mask = (rows < R)[:, None] & (c < C)[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_xm + c[None, :], mask=mask, other=other)
    return x.to(tl.float32), mask


@triton.jit
def _row_first(x_ptr, rows, R, stride_xm):
    """Each row's first element in float32 (rows past R: 0): layernorm's shift, one load a row."""
    return tl.load(x_ptr + rows * stride_xm, mask=rows < R, other=0.0).to(tl.float32)


@triton.jit
def _row_store(y_ptr, v, rows, cols, start, R, C, stride_ym, w_ptr, b_ptr, OP: tl.constexpr, HAS_BIAS: tl.constexpr):
    """Store ``v`` (softmax: final; norms: normalized, before the weight and bias) at the tile's place."""
    c = start + cols
    in_c = c < C
    if OP != SOFTMAX:
        v = v * tl.load(w_ptr + c, mask=in_c, other=0.0).to(tl.float32)[None, :]
        if HAS_BIAS:
            v += tl.load(b_ptr + c, mask=in_c, other=0.0).to(tl.float32)[None, :]
    mask = (rows < R)[:, None] & in_c[None, :]
    tl.store(y_ptr + rows[:, None] * stride_ym + c[None, :], v.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def rows(x_ptr, w_ptr, b_ptr, y_ptr, eps, R, C, stride_xm, stride_ym,
         OP: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr, LOOPED: tl.constexpr, HAS_BIAS: tl.constexpr):
    """One row op over each of the R rows of ``x`` (C columns, unit column stride, rows ``stride_xm`` apart) into
    ``y`` (rows ``stride_ym`` apart), ROWS rows a program, in float32:

    * OP == SOFTMAX: ``exp(x - max) / sum(exp(x - max))`` (``w_ptr``, ``b_ptr`` and ``eps`` unused);
    * OP == RMSNORM: ``x / sqrt(mean(x^2) + eps) * w``;
    * OP == LAYERNORM: ``(x - mean) / sqrt(var + eps) * w (+ b)``, biased variance.

    Not LOOPED: the row is one register tile (BLOCK >= C): one read, one write. LOOPED: BLOCK-wide chunks in two
    passes (statistics, then normalize and store), so any C: softmax keeps a running max and rescales its running
    sum (online softmax); layernorm merges each chunk's mean and squared deviations into the row's (Chan's
    formula), so the variance is never ``E[x^2] - mean^2`` (which cancels on rows with a large mean). Each element
    is read before its output is written, by the program that owns the row: ``y`` may be ``x`` (in place).

    Layernorm's statistics are of ``x - x[row, 0]`` (the row shifted by its first element, one extra load a row),
    the shift added back to the mean: the difference is exact wherever ``x`` is near ``x[row, 0]``, so a row that
    is exactly constant sums (and each chunk of it averages) to exactly 0, its mean is exactly its value and its
    answer exactly the bias. Unshifted, the float32 sum of a constant row at a non-integer value (131.325) rounds,
    the mean misses the constant by a few ulps and ``(x - mean) / sqrt(eps)`` magnifies the miss (issue 38 item 1;
    the gate's eps_dominated rows)."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    ninf = float("-inf")
    if not LOOPED:
        if OP == SOFTMAX:
            x, mask = _row_tile(x_ptr, rows, cols, 0, R, C, stride_xm, ninf)
            m = tl.max(x, 1)
            e = tl.exp(x - m[:, None])  # padding: exp(-inf) = 0 (a fully masked row is NaN, as in the oracle)
            v = e * (1.0 / tl.sum(e, 1))[:, None]
        elif OP == RMSNORM:
            x, mask = _row_tile(x_ptr, rows, cols, 0, R, C, stride_xm, 0.0)
            v = x * (1.0 / tl.sqrt(tl.sum(x * x, 1) / C + eps))[:, None]
        else:
            x, mask = _row_tile(x_ptr, rows, cols, 0, R, C, stride_xm, 0.0)
            shift = _row_first(x_ptr, rows, R, stride_xm)
            # IEEE division (div_rn): the compiled `/` is approximate (within 2 ulp), so a constant row's mean would
            # miss the constant and (x - mean) come out nonzero where the answer is exactly the bias (the gate's
            # eps_dominated rows; under the interpreter `/` is exact, which hid it)
            mean = shift + tl.div_rn(tl.sum(tl.where(mask, x - shift[:, None], 0.0), 1), C * 1.0)
            d = tl.where(mask, x - mean[:, None], 0.0)  # padding would count as (0 - mean)^2
            v = d * (1.0 / tl.sqrt(tl.sum(d * d, 1) / C + eps))[:, None]
        _row_store(y_ptr, v, rows, cols, 0, R, C, stride_ym, w_ptr, b_ptr, OP, HAS_BIAS)
    else:
        a = tl.zeros((ROWS,), dtype=tl.float32)  # softmax: running max; rmsnorm: sum of squares; layernorm: mean
        s = tl.zeros((ROWS,), dtype=tl.float32)  # softmax: running sum; layernorm: squared deviations
        shift = tl.zeros((ROWS,), dtype=tl.float32)  # layernorm: x[row, 0]; the loop's `a` is the mean of x - shift
        if OP == SOFTMAX:
            a = tl.full((ROWS,), ninf, tl.float32)
        elif OP == LAYERNORM:
            shift = _row_first(x_ptr, rows, R, stride_xm)
        for start in range(0, C, BLOCK):
            if OP == SOFTMAX:
                x, mask = _row_tile(x_ptr, rows, cols, start, R, C, stride_xm, ninf)
                m_new = tl.maximum(a, tl.max(x, 1))
                # rows masked so far keep max -inf: shift by 0 there, not by -inf (exp(-inf + inf) is NaN)
                shift = tl.where(m_new == ninf, 0.0, m_new)
                s = s * tl.exp(a - shift) + tl.sum(tl.exp(x - shift[:, None]), 1)
                a = m_new
            elif OP == RMSNORM:
                x, mask = _row_tile(x_ptr, rows, cols, start, R, C, stride_xm, 0.0)
                a += tl.sum(x * x, 1)
            else:
                x, mask = _row_tile(x_ptr, rows, cols, start, R, C, stride_xm, 0.0)
                xs = tl.where(mask, x - shift[:, None], 0.0)
                n_b = tl.minimum(C - start, BLOCK).to(tl.float32)
                mean_b = tl.div_rn(tl.sum(xs, 1), n_b)  # exactly 0 on constant rows (see the unlooped branch)
                d = tl.where(mask, xs - mean_b[:, None], 0.0)
                n_a = start * 1.0  # columns merged so far (an int in the interpreter, a tensor compiled)
                delta = mean_b - a
                a += delta * tl.div_rn(n_b, n_a + n_b)
                s += tl.sum(d * d, 1) + delta * delta * (n_a * n_b / (n_a + n_b))
        if OP == SOFTMAX:
            inv = 1.0 / s
        elif OP == RMSNORM:
            inv = 1.0 / tl.sqrt(a / C + eps)
        else:
            inv = 1.0 / tl.sqrt(s / C + eps)
            a = shift + a  # the mean of x
        for start in range(0, C, BLOCK):
            if OP == SOFTMAX:
                x, mask = _row_tile(x_ptr, rows, cols, start, R, C, stride_xm, ninf)
                v = tl.exp(x - a[:, None]) * inv[:, None]
            elif OP == RMSNORM:
                x, mask = _row_tile(x_ptr, rows, cols, start, R, C, stride_xm, 0.0)
                v = x * inv[:, None]
            else:
                x, mask = _row_tile(x_ptr, rows, cols, start, R, C, stride_xm, 0.0)
                v = (x - a[:, None]) * inv[:, None]
            _row_store(y_ptr, v, rows, cols, start, R, C, stride_ym, w_ptr, b_ptr, OP, HAS_BIAS)


KERNELS = {"gemm": gemm, "gemm_splitk": gemm_splitk, "splitk_reduce": splitk_reduce, "gated": gated, "rows": rows}
