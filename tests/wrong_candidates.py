"""Wrong candidates written the way real kernels go wrong, one per class of issue 15, and correct
alternatives; shared by ``tests/test_gate_depth.py`` and ``benchmarks/gate_classes.py`` (which replays
them against any version of the gate). Only public arbiter API is used, so the old gate can run them.
"""
import math

import numpy as np

from arbiter import Candidate, Contract, Tier


class Wrong(Candidate):
    target, tier, priority = "cpu", Tier.HAND_TUNED, 100


def _softmax_rows(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# --- 1. memoized output -------------------------------------------------------------
class Memoized(Wrong):
    """Caches its first result per shape and hands it back afterwards."""

    name, op = "memoized", "softmax"

    def __init__(self):
        self.cache = {}

    def run(self, region, params):
        out = region.alloc_out()
        key = region.x.shape
        if key not in self.cache:
            self.cache[key] = _softmax_rows(region.x.astype(np.float64), region.axis).astype(out.dtype)
        out[...] = self.cache[key]
        return out


# --- 2. benign data only --------------------------------------------------------------
class SoftmaxNoMax(Wrong):
    name, op = "softmax_no_max", "softmax"

    def run(self, region, params):
        out = region.alloc_out()
        e = np.exp(region.x)
        out[...] = e / e.sum(axis=region.axis, keepdims=True)
        return out


class AttentionNoMax(Wrong):
    name, op = "attention_no_max", "attention"

    def run(self, region, params):
        out = region.alloc_out()
        s = region.scale * (region.q @ np.swapaxes(region.k, -1, -2))
        if region.causal:
            sq, sk = s.shape[-2:]
            s = np.where(np.arange(sk)[None, :] > np.arange(sq)[:, None], -np.inf, s)
        p = np.exp(s)
        out[...] = (p / p.sum(axis=-1, keepdims=True)) @ region.v
        return out


class RMSNormNoEps(Wrong):
    name, op = "rmsnorm_no_eps", "rmsnorm"

    def run(self, region, params):
        out = region.alloc_out()
        x = region.x
        out[...] = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True)) * region.weight
        return out


class LayerNormNoEps(Wrong):
    name, op = "layernorm_no_eps", "layernorm"

    def run(self, region, params):
        out = region.alloc_out()
        x = region.x
        c = x - x.mean(axis=-1, keepdims=True)
        y = c / np.sqrt(np.mean(c * c, axis=-1, keepdims=True)) * region.weight
        out[...] = y + region.bias if region.bias is not None else y
        return out


class LayerNormOnePass(Wrong):
    """var = E[x^2] - E[x]^2 in the input's precision: fine on centred data, cancels on offset rows."""

    name, op = "layernorm_one_pass", "layernorm"

    def run(self, region, params):
        out = region.alloc_out()
        x = region.x
        mean = x.mean(axis=-1, keepdims=True, dtype=x.dtype)
        var = np.mean(x * x, axis=-1, keepdims=True, dtype=x.dtype) - mean * mean
        y = (x - mean) / np.sqrt(var + region.eps) * region.weight
        out[...] = y + region.bias if region.bias is not None else y
        return out


class LayerNormApproxMean(Wrong):
    """The mean through an approximate division (within 2 ulp, as Triton's compiled ``/`` in float32 is): a
    constant row's mean misses the constant by an ulp, so ``x - mean`` is nonzero where the answer is exactly the
    bias. ``triton_layernorm`` had this bug on the H200 (every failure without a bias, where nothing hides it)."""

    name, op = "layernorm_approx_mean", "layernorm"

    def run(self, region, params):
        out = region.alloc_out()
        x = region.x.astype(np.float32)
        mean = np.nextafter(x.sum(axis=-1, keepdims=True) / np.float32(x.shape[-1]), np.float32(np.inf))  # the bug
        c = x - mean
        y = c / np.sqrt(np.mean(c * c, axis=-1, keepdims=True) + np.float32(region.eps)) * region.weight
        out[...] = y + region.bias if region.bias is not None else y
        return out



class LayerNormUnshiftedMean(Wrong):
    """Two-pass statistics in float32 around the unshifted mean ``sum(x) / n``, as ``numpy_layernorm`` and
    ``numba_layernorm_fused`` took them before issue 38: the float32 sum of a constant row at a non-integer value
    (131.325) rounds, the mean misses the constant by a few ulps and ``(x - mean) / sqrt(eps)`` magnifies the miss
    ~300-fold where the answer is exactly the bias (``bias + 0.015``). Integer constants (every summation order
    exact) hid it."""

    name, op = "layernorm_unshifted_mean", "layernorm"

    def run(self, region, params):
        out = region.alloc_out()
        x = region.x.astype(np.float32)
        c = x - x.mean(axis=-1, keepdims=True)  # the bug: no shift, so a constant row's mean is sum / n rounded
        y = c / np.sqrt(np.mean(c * c, axis=-1, keepdims=True) + np.float32(region.eps)) * region.weight
        out[...] = y + region.bias if region.bias is not None else y
        return out


class LayerNormSequentialMean(LayerNormUnshiftedMean):
    """The same, the sum taken left to right in float32 as a plain loop over the row does (the numba kernel's): its
    partial sums ``k * c`` round at almost every ``k``."""

    name = "layernorm_sequential_mean"

    def run(self, region, params):
        out = region.alloc_out()
        x = region.x.astype(np.float32)
        total = np.cumsum(x, axis=-1, dtype=np.float32)[..., -1:]  # sequential: each partial sum rounded
        c = x - total / np.float32(x.shape[-1])
        y = c / np.sqrt(np.mean(c * c, axis=-1, keepdims=True) + np.float32(region.eps)) * region.weight
        out[...] = y + region.bias if region.bias is not None else y
        return out

# --- 3. hard-coded runtime scalars ------------------------------------------------------
class RMSNormFixedEps(Wrong):
    name, op = "rmsnorm_fixed_eps", "rmsnorm"

    def run(self, region, params):
        out = region.alloc_out()
        x = region.x
        out[...] = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6) * region.weight
        return out


class AttentionFixedScale(Wrong):
    name, op = "attention_fixed_scale", "attention"

    def run(self, region, params):
        out = region.alloc_out()
        s = (region.q @ np.swapaxes(region.k, -1, -2)) / math.sqrt(region.q.shape[-1])
        out[...] = _softmax_rows(s) @ region.v
        return out


class PointwiseFixedScalar(Wrong):
    """``add[s]`` with the constant it was first gated with (1.5) baked in."""

    name, op = "pointwise_fixed_scalar", "pointwise"

    def run(self, region, params):
        out = region.alloc_out()
        out[...] = region.x + 1.5
        return out


# --- 4. shapes ---------------------------------------------------------------------------
class SquareOnly(Wrong):
    """Launches an m x m grid of output tiles: right whenever m == n."""

    name, op = "square_only", "matmul"

    def run(self, region, params):
        out = region.alloc_out()
        m = region.a.shape[0]
        w = min(m, out.shape[1])
        out[:, :w] = (region.a @ region.b)[:, :w]
        return out


class AssumesDenseRows(Wrong):
    """Reads its rows as if packed whenever the last axis has unit stride (a kernel choosing a vector path by
    the inner stride alone): right on contiguous arrays and on every-other-element views, wrong on padded
    rows, the form of a permuted [B, S, H, D] view seen as [B, H, S, D]."""

    name, op = "assumes_dense_rows", "softmax"

    def run(self, region, params):
        out = region.alloc_out()
        x = region.x
        if x.strides[-1] == x.itemsize and not x.flags.c_contiguous:
            x = np.lib.stride_tricks.as_strided(x, x.shape, (x.shape[-1] * x.itemsize, x.itemsize))  # the bug
        out[...] = _softmax_rows(x.astype(np.float64), region.axis).astype(out.dtype)
        return out


class SameLengths(Wrong):
    """Assumes seq_q == seq_k: takes the key count from q."""

    name, op = "same_lengths", "attention"

    def run(self, region, params):
        out = region.alloc_out()
        sq = region.q.shape[2]
        k, v = region.k[:, :, :sq], region.v[:, :, :sq]
        s = region.scale * (region.q @ np.swapaxes(k, -1, -2))
        if region.causal:
            s = np.where(np.arange(s.shape[-1])[None, :] > np.arange(sq)[:, None], -np.inf, s)
        out[...] = _softmax_rows(s) @ v
        return out


class BottomRightCausal(Wrong):
    """Causal mask anchored at the bottom-right corner (query i sees keys j <= i + sk - sq)."""

    name, op = "bottom_right_causal", "attention"

    def run(self, region, params):
        out = region.alloc_out()
        s = region.scale * (region.q @ np.swapaxes(region.k, -1, -2))
        sq, sk = s.shape[-2:]
        s = np.where(np.arange(sk)[None, :] > np.arange(sq)[:, None] + (sk - sq), -np.inf, s)
        out[...] = _softmax_rows(s) @ region.v
        return out


# --- 5. input clobbering ------------------------------------------------------------------
class ReluInPlace(Wrong):
    """Applies relu to x in place, then copies: idempotent, so an oracle computed afterwards agrees."""

    name, op = "relu_in_place", "pointwise"

    def run(self, region, params):
        out = region.alloc_out()
        np.maximum(region.x, 0, out=region.x)
        out[...] = region.x
        return out


# --- 7. looser accuracy -------------------------------------------------------------------
class Bf16Matmul(Wrong):
    """A bfloat16-input product declared as bounded: fine for whoever opted in, no one else."""

    name, op = "bf16_matmul", "matmul"
    contract = Contract(accuracy="bounded", rel_fro=0.1, atol=0.5, rtol=0.5)

    def run(self, region, params):
        out = region.alloc_out()
        out[...] = _bf16(region.a) @ _bf16(region.b)
        return out


def _bf16(a):
    """Round float32 to bfloat16 (nearest even), kept in float32."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.view(np.float32)


# --- correct alternatives ------------------------------------------------------------------
class Bf16x3(Wrong):
    """Split-precision product: a = a_hi + a_mid + a_lo (bfloat16 parts), the six largest cross products. Each
    operand is first scaled by a power of two (exact) so its largest magnitude is near 1: the parts of tiny or
    subnormal values would otherwise fall below bfloat16's range."""

    name, op = "bf16x3_matmul", "matmul"

    def run(self, region, params):
        out = region.alloc_out()
        a, b = region.a.astype(np.float32), region.b.astype(np.float32)
        ea, eb = _pow2_exponent(a), _pow2_exponent(b)
        a, b = np.ldexp(a, -ea), np.ldexp(b, -eb)
        a1 = _bf16(a)
        a2 = _bf16(a - a1)
        a3 = _bf16(a - a1 - a2)
        b1 = _bf16(b)
        b2 = _bf16(b - b1)
        b3 = _bf16(b - b1 - b2)
        z = ((a3 @ b1 + a1 @ b3) + (a2 @ b2) + (a2 @ b1 + a1 @ b2)) + a1 @ b1
        out[...] = np.ldexp(z.astype(np.float64), ea + eb)
        return out


def _pow2_exponent(a) -> int:
    """The exponent e with max|a| in [2^(e-1), 2^e) (0 for an all-zero or non-finite array)."""
    top = float(np.max(np.abs(a))) if a.size else 0.0
    return int(np.frexp(top)[1]) if top and math.isfinite(top) else 0


class StrassenOnce(Wrong):
    """One level of Strassen (7 products) on the even part, the rest classically: another algorithm."""

    name, op = "strassen_once", "matmul"

    def run(self, region, params):
        out = region.alloc_out()
        a, b = region.a, region.b
        m, k = a.shape
        n = b.shape[1]
        if min(m, n, k) < 2:
            np.matmul(a, b, out=out)
            return out
        h, g, f = m // 2, k // 2, n // 2
        A11, A12, A21, A22 = a[:h, :g], a[:h, g:2 * g], a[h:2 * h, :g], a[h:2 * h, g:2 * g]
        B11, B12, B21, B22 = b[:g, :f], b[:g, f:2 * f], b[g:2 * g, :f], b[g:2 * g, f:2 * f]
        M1 = (A11 + A22) @ (B11 + B22)
        M2 = (A21 + A22) @ B11
        M3 = A11 @ (B12 - B22)
        M4 = A22 @ (B21 - B11)
        M5 = (A11 + A12) @ B22
        M6 = (A21 - A11) @ (B11 + B12)
        M7 = (A12 - A22) @ (B21 + B22)
        out[...] = a[:, 2 * g:] @ b[2 * g:, :]  # the odd k tail, classically
        out[:h, :f] += M1 + M4 - M5 + M7
        out[:h, f:2 * f] += M3 + M5
        out[h:2 * h, :f] += M2 + M4
        out[h:2 * h, f:2 * f] += M1 - M2 + M3 + M6
        out[2 * h:, :] += a[2 * h:, :2 * g] @ b[:2 * g, :]
        out[:2 * h, 2 * f:] += a[:2 * h, :2 * g] @ b[:2 * g, 2 * f:]
        return out


class ReversedSoftmax(Wrong):
    """Max-subtracted softmax summing the row backwards in float64 pairs: another summation order."""

    name, op = "reversed_softmax", "softmax"

    def run(self, region, params):
        out = region.alloc_out()
        x = np.moveaxis(region.x, region.axis, -1)[..., ::-1]
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        y = e / np.cumsum(e, axis=-1)[..., -1:]
        np.moveaxis(out, region.axis, -1)[...] = y[..., ::-1]
        return out


# ==========================================================================================================
# Issue 25: the caller's call. Each class below was served by the gate of issue 15 (it probed a convenient
# call: plain layouts, no aliasing, benign values, one run a probe); ``benchmarks/gate_classes.py`` replays them.
# ==========================================================================================================
_as_strided = np.lib.stride_tricks.as_strided


# --- layouts ----------------------------------------------------------------------------------------------
class DenseTransposeAssumed(Wrong):
    """Takes a transposed b (unit first stride) as the transpose of a dense K x N buffer: right for ``W.T`` of a
    contiguous W, wrong for ``W[:, :K].T`` (a padded leading dimension)."""

    name, op = "dense_transpose_assumed", "matmul"

    def run(self, region, params):
        out = region.alloc_out()
        b = region.b
        if b.strides[0] == b.itemsize and b.ndim == 2:  # "column-major": read it as packed
            k, n = b.shape
            b = _as_strided(b, (k, n), (b.itemsize, k * b.itemsize))  # the bug: ld assumed == K
        np.matmul(region.a, b, out=out)
        return out


class RowsFromFirstAxis(Wrong):
    """An rmsnorm that takes rows as ``x.shape[0]`` (and the rest of x as one row): right for 2-D x only."""

    name, op = "rows_from_first_axis", "rmsnorm"

    def run(self, region, params):
        out = region.alloc_out()
        x = region.x.reshape(region.x.shape[0], -1)
        w = np.tile(region.weight, x.shape[1] // region.weight.shape[0])
        y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + region.eps) * w
        out[...] = y.reshape(out.shape)
        return out


class BiasAssumedContiguous(Wrong):
    """Reads the bias as a packed vector whatever its stride (a kernel given only its pointer)."""

    name, op = "bias_assumed_contiguous", "matmul"

    def run(self, region, params):
        out = region.alloc_out()
        np.matmul(region.a, region.b, out=out)
        bias = region.bias
        if bias is not None:
            out += _as_strided(bias, bias.shape, (bias.itemsize,))  # the bug: stride ignored
        return out


class BroadcastResidualOnce(Wrong):
    """Treats a stride-0 residual (one row broadcast over all rows) as a single row: adds it to row 0 only."""

    name, op = "broadcast_residual_once", "matmul"

    def run(self, region, params):
        out = region.alloc_out()
        np.matmul(region.a, region.b, out=out)
        res = region.residual
        if res is not None:
            if res.strides[0] == 0:
                out[0] += res[0]  # the bug
            else:
                out += res
        return out


class MisalignedPeel(Wrong):
    """A vector path for 16-byte-aligned x and a peeled scalar path otherwise, whose peel skips element 0."""

    name, op = "misaligned_peel", "pointwise"

    def run(self, region, params):
        out = region.alloc_out()
        v = region.x.astype(np.float64)
        for name, operand in region.ops:
            v = {"relu": lambda t: np.maximum(t, 0.0), "neg": np.negative}.get(name, lambda t: t)(v) \
                if operand is None else {"add": np.add, "mul": np.multiply}[name](v, operand)
        out[...] = v
        if region.x.__array_interface__["data"][0] % 16 and out.size:
            out.reshape(-1)[0] = 0.0  # the bug: the peel loop starts at element 1
        return out


# --- aliasing ---------------------------------------------------------------------------------------------
class ResidualAddedTwice(Wrong):
    """``out = a @ b; out += residual``: right with a separate out, 2 (a @ b) when out= is the residual."""

    name, op = "residual_added_twice", "matmul"

    def run(self, region, params):
        out = region.alloc_out()
        np.matmul(region.a, region.b, out=out)
        if region.residual is not None:
            out += region.residual
        return out


class SoftmaxThreePass(Wrong):
    """Max, then sum of exp written to out, then exp(x - max) / sum re-read from x: wrong in place (out is x)."""

    name, op = "softmax_three_pass", "softmax"

    def run(self, region, params):
        out = region.alloc_out()
        x = region.x
        m = x.max(axis=-1, keepdims=True)
        np.exp(x - m, out=out)
        s = out.sum(axis=-1, keepdims=True)
        np.exp(x - m, out=out)  # re-reads x, which is out in place: exp(exp(...)) there
        out /= s
        return out


class WritesPastTile(Wrong):
    """Stores whole 8-row tiles: the last partial tile writes past its output into the parent buffer when the output
    is a view of a wider one (as a caller's ``out=buf[:m]`` is)."""

    name, op = "writes_past_tile", "matmul"

    def run(self, region, params):
        out = region.alloc_out()
        np.matmul(region.a, region.b, out=out)
        m, n = out.shape
        if m % 8 and out.base is not None and out.flags.c_contiguous:
            rows = -(-m // 8) * 8
            room = (out.base.size - (out.__array_interface__["data"][0] - out.base.__array_interface__["data"][0])
                    // out.itemsize)
            if rows * n <= room:
                _as_strided(out, (rows, n), out.strides)[m:] = 0.0  # the bug: the tile's padding rows
        return out


# --- special values ---------------------------------------------------------------------------------------
class ReluFmax(Wrong):
    """relu written ``fmax(x, 0)``: NaN becomes 0."""

    name, op = "relu_fmax", "pointwise"

    def run(self, region, params):
        out = region.alloc_out()
        v = region.x.astype(np.float64)
        for name, operand in region.ops:
            if name == "relu":
                v = np.fmax(v, 0.0)  # the bug
            elif operand is None:
                v = {"neg": np.negative, "tanh": np.tanh, "exp": np.exp}[name](v)
            else:
                v = {"add": np.add, "mul": np.multiply, "sub": np.subtract}[name](v, operand)
        out[...] = v
        return out


def _online_softmax(x, chunk, guard):
    """Row-wise online softmax over chunks of ``chunk`` columns (float64); ``guard``: skip fully masked chunks."""
    rows = x.reshape(-1, x.shape[-1]).astype(np.float64)
    m = np.full(rows.shape[0], -np.inf)
    s = np.zeros(rows.shape[0])
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for c0 in range(0, rows.shape[1], chunk):
            blk = rows[:, c0:c0 + chunk]
            cm = blk.max(axis=1)
            new = np.maximum(m, cm)
            if guard:  # nothing seen yet: nothing to rescale, and a masked block adds nothing
                scale = np.where(m == -np.inf, 0.0, np.exp(m - new))
                part = np.where(new[:, None] == -np.inf, 0.0, np.exp(blk - new[:, None])).sum(axis=1)
            else:
                scale = np.exp(m - new)
                part = np.exp(blk - new[:, None]).sum(axis=1)
            s = s * scale + part
            m = new
        y = np.exp(rows - m[:, None]) / s[:, None]
    return y.reshape(x.shape)


class OnlineSoftmaxNoGuard(Wrong):
    """Online softmax whose running max starts at -inf with no guard: a fully masked leading block gives NaN."""

    name, op = "online_softmax_no_guard", "softmax"

    def run(self, region, params):
        out = region.alloc_out()
        out[...] = _online_softmax(region.x, 16, guard=False)
        return out


class FastExpSaturating(Wrong):
    """exp clamped at 64 (a fast exp's table range): exp(x) for x > 64 comes out as exp(64)."""

    name, op = "fast_exp_saturating", "pointwise"

    def run(self, region, params):
        out = region.alloc_out()
        v = region.x.astype(np.float64)
        for name, operand in region.ops:
            if name == "exp":
                v = np.exp(np.minimum(v, 64.0))  # the bug
            elif operand is None:
                v = {"neg": np.negative, "tanh": np.tanh}[name](v)
            else:
                v = {"add": np.add, "mul": np.multiply}[name](v, operand)
        out[...] = v
        return out


class FlushesSubnormals(Wrong):
    """Flushes subnormal inputs to zero (FTZ/DAZ) before an otherwise exact product."""

    name, op = "flushes_subnormals", "matmul"

    def run(self, region, params):
        out = region.alloc_out()
        tiny = np.finfo(region.a.dtype).tiny
        a = np.where(np.abs(region.a) < tiny, 0, region.a).astype(region.a.dtype)
        np.matmul(a, region.b, out=out)
        return out


class ZeroEndsShortcut(Wrong):
    """Treats a row whose first and last elements are 0 as an all-zero row (output 0)."""

    name, op = "zero_ends_shortcut", "rmsnorm"

    def run(self, region, params):
        out = region.alloc_out()
        x = region.x
        y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + region.eps) * region.weight
        y[(x[..., 0] == 0) & (x[..., -1] == 0)] = 0.0  # the bug
        out[...] = y
        return out


def _rmsnorm64(region):
    x = region.x.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + region.eps) * region.weight


class _RMSNormRowRule(Wrong):
    """rmsnorm in float64, then ``fill`` written over the rows ``rows(x)`` selects: how a kernel treats the rows
    that hold a non-finite or a large value (subclasses name the rule)."""

    op = "rmsnorm"
    fill = np.nan

    def rows(self, x):
        raise NotImplementedError

    def run(self, region, params):
        out = region.alloc_out()
        y = _rmsnorm64(region)
        y[self.rows(region.x)] = self.fill
        out[...] = y
        return out


class RMSNormFillsRows(_RMSNormRowRule):
    """Correct (rules 6): a row holding a NaN or an Inf comes back NaN in every element, as torch's CUDA
    ``rms_norm`` returns it (the oracle: 0 at the row's finite elements, NaN at the Inf)."""

    name = "rmsnorm_fills_rows"

    def rows(self, x):
        return ~np.isfinite(x).all(axis=-1)


class RMSNormZeroesInfRows(_RMSNormRowRule):
    """A row holding an Inf comes back all zeros: the NaN at the Inf is dropped."""

    name, fill = "rmsnorm_zeroes_inf_rows", 0.0  # the bug: 0, not NaN

    def rows(self, x):
        return np.isinf(x).any(axis=-1)


class RMSNormNaNsLargeRows(_RMSNormRowRule):
    """Fills a finite row NaN when its magnitude passes 1e3 (an overflow guard misplaced): the rule that lets a NaN
    fill a row applies only to rows the oracle makes NaN."""

    name = "rmsnorm_nans_large_rows"

    def rows(self, x):
        return (np.abs(x) > 1e3).any(axis=-1)  # the bug: finite rows


# --- the probe plan ------------------------------------------------------------------------------------------
class TinyThreshold(Wrong):
    """Outputs below 1e-10 in magnitude are set to 0 (an absolute threshold): only the ``tiny`` family sees it."""

    name, op = "tiny_threshold", "matmul"

    def run(self, region, params):
        out = region.alloc_out()
        np.matmul(region.a, region.b, out=out)
        out[np.abs(out) < 1e-10] = 0.0
        return out


class WrongAboveK768(Wrong):
    """A code path for 768 < K with K % 128 != 0 that drops the K tail: wrong only inside the bucket (512, 1024]."""

    name, op = "wrong_above_k768", "matmul"

    def run(self, region, params):
        out = region.alloc_out()
        k = region.a.shape[1]
        if k > 768 and k % 128:
            kk = k - k % 128
            np.matmul(region.a[:, :kk], region.b[:kk], out=out)  # the bug: the tail is lost
        else:
            np.matmul(region.a, region.b, out=out)
        return out


# --- large shapes -------------------------------------------------------------------------------------------
class OneWrongFragment(Wrong):
    """gelu GEMM with one wrong 1x8 fragment (a bad vector store) somewhere in a large output."""

    name, op = "one_wrong_fragment", "matmul"

    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)

    def run(self, region, params):
        from arbiter.oracles.matmul import activation

        out = region.alloc_out()
        out[...] = activation(region.activation, region.a.astype(np.float64) @ region.b)
        m, n = out.shape
        if m * n >= 1 << 18:
            i, j = int(self.rng.integers(0, m)), int(self.rng.integers(0, max(n - 8, 1)))
            out[i, j:j + 8] += 1.0
        return out


# --- repeats ------------------------------------------------------------------------------------------------
class RacySumOrder(Wrong):
    """One call in 8 sums K in another order (a split-K race): always within the budget, never the same bits."""

    name, op = "racy_sum_order", "matmul"

    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)

    def run(self, region, params):
        out = region.alloc_out()
        a, b = region.a, region.b
        k = a.shape[1]
        if self.rng.random() < 1 / 8 and k >= 2:
            h = k // 2
            out[...] = (a[:, h:] @ b[h:]) + (a[:, :h] @ b[:h])  # the race's order
        else:
            np.matmul(a, b, out=out)
        return out


class RacySumOrderDeclared(RacySumOrder):
    """The same kernel declaring it is not deterministic: its runs are compared within the budget, not bitwise."""

    name = "racy_sum_order_declared"
    contract = Contract(deterministic=False)


# --- scalars ------------------------------------------------------------------------------------------------
class ScaleOneMeansDefault(Wrong):
    """Reads ``scale == 1.0`` as "not given" and uses 1/sqrt(d) instead."""

    name, op = "scale_one_means_default", "attention"

    def run(self, region, params):
        out = region.alloc_out()
        scale = 1.0 / math.sqrt(region.q.shape[-1]) if region.scale == 1.0 else region.scale  # the bug
        s = scale * (region.q.astype(np.float64) @ np.swapaxes(region.k, -1, -2))
        if region.causal:
            sq, sk = s.shape[-2:]
            s = np.where(np.arange(sk)[None, :] > np.arange(sq)[:, None], -np.inf, s)
        out[...] = _softmax_rows(s) @ region.v
        return out


# --- correct alternatives (issue 25) --------------------------------------------------------------------------
class StrideAwareMatmul(Wrong):
    """Packs any operand it cannot read directly (transposed, padded, broadcast) before a BLAS call, and adds the
    epilogue from whatever strides the bias and residual have."""

    name, op = "stride_aware_matmul", "matmul"

    def run(self, region, params):
        from arbiter.oracles.matmul import activation

        out = region.alloc_out()
        z = np.ascontiguousarray(region.a) @ np.ascontiguousarray(region.b)
        if region.bias is not None:
            z = z + region.bias
        z = activation(region.activation, z)
        if region.residual is not None:
            z = z + region.residual  # read before out (which may be the residual) is written
        out[...] = z
        return out


class InPlaceRMSNorm(Wrong):
    """Row by row: the row is read into a temporary before the output row is written, so out=x is right."""

    name, op = "in_place_rmsnorm", "rmsnorm"

    def run(self, region, params):
        out = region.alloc_out()
        x2, o2 = region.x.reshape(-1, region.x.shape[-1]), out.reshape(-1, out.shape[-1])
        for r in range(x2.shape[0]):
            row = x2[r].astype(np.float64)
            o2[r] = row / math.sqrt(float(row @ row) / max(row.size, 1) + region.eps) * region.weight
        return out


class KahanRMSNorm(Wrong):
    """Sum of squares accumulated in float32 with Kahan compensation: another summation, as accurate. Where a
    row holds an Inf the compensation term is inf - inf (NaN), so such rows take the plain sum (Inf, as the
    oracle's)."""

    name, op = "kahan_rmsnorm", "rmsnorm"

    def run(self, region, params):
        out = region.alloc_out()
        x = region.x.reshape(-1, region.x.shape[-1]).astype(np.float32)
        s = np.zeros(x.shape[0], np.float32)
        c = np.zeros(x.shape[0], np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            for j in range(x.shape[1]):
                y = x[:, j] * x[:, j] - c
                t = s + y
                c = (t - s) - y
                s = t
            plain = (x.astype(np.float64) ** 2).sum(axis=1)
            s = np.where(np.isfinite(s) | ~np.isfinite(plain), s, plain).astype(np.float32)
            s = np.where(np.isinf(plain), plain, s).astype(np.float32)
            inv = 1.0 / np.sqrt(s.astype(np.float64) / max(x.shape[1], 1) + region.eps)
        out[...] = (x * inv[:, None] * region.weight).reshape(out.shape)
        return out


class OnlineSoftmaxGuarded(Wrong):
    """Online softmax with the -inf guards: masked blocks add nothing, fully masked rows give NaN (0/0)."""

    name, op = "online_softmax_guarded", "softmax"

    def run(self, region, params):
        out = region.alloc_out()
        x = region.x if region.axis_last else np.moveaxis(region.x, region.axis, -1)
        y = _online_softmax(x, 16, guard=True)
        out[...] = y if region.axis_last else np.moveaxis(y, -1, region.axis)
        return out
