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
    """Split-precision product: a = a_hi + a_mid + a_lo (bfloat16 parts), the six largest cross products."""

    name, op = "bf16x3_matmul", "matmul"

    def run(self, region, params):
        out = region.alloc_out()
        a, b = region.a.astype(np.float32), region.b.astype(np.float32)
        a1 = _bf16(a)
        a2 = _bf16(a - a1)
        a3 = _bf16(a - a1 - a2)
        b1 = _bf16(b)
        b2 = _bf16(b - b1)
        b3 = _bf16(b - b1 - b2)
        out[...] = ((a3 @ b1 + a1 @ b3) + (a2 @ b2) + (a2 @ b1 + a1 @ b2)) + a1 @ b1
        return out


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
