"""The probe catalogue of the F4 gate: value families per op, beside benign data.

Benign data (standard normal, what ``Region.random`` draws) finds arithmetic and indexing bugs.
It does not find the corners a kernel author cuts on purpose because "real data never does
that": a softmax without max-subtraction (overflows on large logits), a norm that drops ``eps``
(divides by zero on near-constant rows), a one-pass variance ``E[x^2] - E[x]^2`` (cancels on rows
with a large common offset), half-precision accumulation (overflows on large values), a tanh
from ``exp(2x)`` (inf/inf on wide inputs). Each family here draws the values that break one such
corner, and the gate probes every family of the op (``families(op)``) with fresh data.

A family rewrites a freshly drawn probe region's operands in place (array-module generic: NumPy
on the host, CuPy on a GPU) and may carry its own budget where the mathematics demands it (a
layernorm row with offset 300 and spread 1 is 300 times worse conditioned than a centred one,
so a correct float32 kernel loses ~300 ulps there). ``markdown()`` publishes the catalogue in
``docs/budgets.md`` (generated with the budget table; a test keeps it in step).

Runtime scalars (``eps``, attention ``scale``, pointwise constants) are not part of the problem
key; the gate varies them instead (``varied_scalars``): the first real-shape probe uses the
caller's values, the others use different ones, so a kernel that hard-codes the value it was
gated with fails (see docs/architecture.md, "Runtime scalars are varied, not keyed").
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from arbiter import targets
from arbiter.oracles import budgets
from arbiter.oracles.budgets import Budget, budget_for

FINFO_MAX = {"float16": 65504.0, "bfloat16": 3.3895e38, "float32": 3.4028e38, "float64": 1.7976e308,
              "complex64": 3.4028e38, "complex128": 1.7976e308}


def exp_range(dtype: str) -> float:
    """ln(largest finite value): exp(x) overflows ``dtype`` beyond it (88.7 for float32, 11.1 for float16)."""
    return math.log(FINFO_MAX[dtype])


# The special-value families (nonfinite, masked_blocks, huge, subnormal, zero_ends) and the gate's one-element
# pointer shift are probed on these targets only: those whose candidates were verified against them on the device.
# On nvidia (H200, 2026-12-03) they first found NaN-dropping epilogues and SDPA faulting on a misaligned q (a fault
# poisons the process's CUDA context); the candidates now propagate NaN or decline, and take any alignment. rocm
# shares the kernel templates but is not verified on an AMD device yet (its probes are opaque host copies, so the
# shift never reaches it anyway).
VERIFIED_ON = ("cpu", "nvidia")


@dataclass(frozen=True)
class Family:
    """One value family: ``apply(region, rng)`` rewrites a fresh probe region's operands in place."""

    name: str
    ops: tuple[str, ...]
    text: str  # what it draws and which corner it catches (published)
    apply: Callable
    # dtype -> Budget for this family, where the maths needs more room than the op's budget; None: the op's.
    budget: Callable | None = None
    budget_text: str = ""
    # The targets probed with this family; None: every target. See VERIFIED_ON.
    targets: tuple[str, ...] | None = None

    def budget_for(self, op: str, dtype: str) -> Budget:
        return self.budget(op, dtype) if self.budget is not None else budget_for(op, dtype)


def _host_rng_array(region, shape, values):
    """``values`` (a host float64 array) as an array of ``region``'s dtype on its target."""
    return targets.get(region.target).from_host(np.asarray(values, dtype=np.float64).reshape(shape), region.dtype)


# --- softmax ----------------------------------------------------------------
def _softmax_large_logits(region, rng):
    """Rows offset by up to +-1.5 x the dtype's exp range, spread up to 1/8 of it."""
    x = region.x
    rows_axis = 0 if region.axis_last else 1
    n_rows = x.shape[rows_axis]
    lim = exp_range(region.dtype)
    offsets = rng.uniform(-1.5 * lim, 1.5 * lim, n_rows)
    offsets[: min(n_rows, 2)] = (1.5 * lim, -1.5 * lim)[: min(n_rows, 2)]  # both signs always present
    shape = (n_rows, 1) if region.axis_last else (1, n_rows)
    x *= lim / 16.0  # benign x has std 2: spread ~ lim / 8
    x += _host_rng_array(region, shape, offsets)


def _softmax_constant_rows(region, rng):
    """Equal values along the axis (zeros, a large constant): the answer is exactly 1/cols."""
    x = region.x
    rows_axis = 0 if region.axis_last else 1
    n_rows = x.shape[rows_axis]
    lim = exp_range(region.dtype)
    values = rng.choice([0.0, 1.5 * lim, -1.5 * lim, 1e-3], n_rows)
    shape = (n_rows, 1) if region.axis_last else (1, n_rows)
    x *= 0
    x += _host_rng_array(region, shape, values)


def _softmax_masked(region, rng):
    """-inf entries (attention-style masks), at least one finite entry per row."""
    x = region.x
    if x.size == 0:
        return
    host = np.asarray(targets.get(region.target).to_host(x), dtype=np.float64)
    hx = host if region.axis_last else host.T
    mask = rng.random(hx.shape) < 0.5
    mask[np.arange(hx.shape[0]), rng.integers(0, hx.shape[1], hx.shape[0])] = False
    hx[mask] = -np.inf
    x[...] = targets.get(region.target).from_host(host, region.dtype)


# --- rmsnorm / layernorm -----------------------------------------------------
def _row_offsets(region, values):
    return targets.get(region.target).from_host(np.asarray(values, dtype=np.float64)[:, None], region.dtype)


def _eps_dominated(region, rng):
    """Rows whose mean square is near ``eps`` (so eps matters), some exactly zero or constant."""
    x = region.x
    rows = x.shape[0]
    # Squares below the accumulator's normal range (about 1e-31 in float32) lose their digits, so a caller's
    # eps near the denormals (1.4e-45 in float32) would make this a test of underflow, not of eps: such an
    # eps is negligible beside any representable mean square, and the rows keep a representable one.
    acc = np.finfo(np.float64 if np.dtype(region.dtype).itemsize > 4 else np.float32)
    unit = max(math.sqrt(region.eps), math.sqrt(float(acc.tiny) / float(acc.eps)))
    scale = unit * rng.choice([0.0, 0.1, 0.5, 1.0, 2.0], rows)
    scale[: min(rows, 1)] = 0.0  # an all-zero (or, for layernorm, exactly constant) row
    x *= _row_offsets(region, scale / 2.0)  # benign rows have std 2
    if region.op == "layernorm":  # exactly constant rows (zero variance: the answer is bias); small integers
        # keep every summation order exact, so a correct kernel's mean is exactly the constant
        x += _row_offsets(region, np.where(scale == 0.0, rng.integers(-3, 4, rows), 0).astype(np.float64))


OFFSET, SPREAD = 300.0, 0.1


def _large_offset(region, rng):
    """Rows of spread 0.1 shifted by +300 (and -300): a one-pass variance E[x^2] - E[x]^2 cancels here."""
    x = region.x
    rows = x.shape[0]
    x *= SPREAD / 2.0  # benign rows have std 2
    sign = np.where(rng.random(rows) < 0.5, -1.0, 1.0)
    sign[0] = 1.0
    x += _row_offsets(region, OFFSET * sign - (3.0 if region.op == "layernorm" else 0.0))


def _large_magnitude(region, rng):
    """Values whose squares overflow half precision (or come near float32's range): accumulate wider."""
    x = region.x
    cols = x.shape[-1]
    big = min(2.0 * math.sqrt(FINFO_MAX[region.dtype]), math.sqrt(FINFO_MAX["float32"] / max(cols, 1)) / 16.0)
    big = min(big, FINFO_MAX[region.dtype] / 64.0)
    x *= big / 2.0


def _offset_budget(op, dtype):
    if op != "layernorm":  # x / rms(x) has no cancellation: the op's budget holds
        return budget_for(op, dtype)
    # Conditioning of (x - mean) / std with |x| ~ 300, std ~ 0.1: rounding is amplified |x| / std = 3000-fold.
    # A one-pass variance is off by ~ulp * (|x| / std)^2 instead: 0.5 relative in float32, 3e-8 x 3000 over this.
    b = budget_for(op, dtype)
    f = OFFSET / SPREAD
    return Budget(rel_fro=min(b.rel_fro * f, 1e-1), atol=min(b.atol * f, 1.0), rtol=min(b.rtol * f, 1.0))


# --- attention ---------------------------------------------------------------
def _attention_large_logits(region, rng):
    """q and k scaled so scores reach +-1.5 x the exp range: softmax without max-subtraction overflows."""
    lim = exp_range(region.dtype)
    d = region.q.shape[-1]
    # benign q, k are standard normal: score std = scale * sqrt(d); target std ~ lim / 2.
    target_std = lim / 2.0
    factor = math.sqrt(target_std / max(abs(region.scale) * math.sqrt(max(d, 1)), 1e-30))
    region.q *= factor
    region.k *= factor
    region.k[..., : min(region.k.shape[2], 1), :] *= 3.0  # one key far above the rest: an extreme max


def _logits_budget(op, dtype):
    # Scores near the exp range carry absolute rounding error ~ ulp * |score|: relative to a centred
    # softmax that is ~ lim times more, so this family gets lim x the op's budget.
    b = budget_for(op, dtype)
    f = exp_range(dtype)
    return Budget(rel_fro=min(b.rel_fro * f, 1e-1), atol=min(b.atol * f, 1.0), rtol=min(b.rtol * f, 1.0))


# --- matmul / gated ------------------------------------------------------------
def _mixed_rows(region, rng):
    """Rows of the left operand scaled by 10^U(-3, 3), some exactly zero: magnitudes and signs mixed."""
    a = region.a if region.op == "matmul" else region.x
    rows = a.shape[0]
    scale = 10.0 ** rng.uniform(-3, 3, rows)
    scale *= np.where(rng.random(rows) < 0.5, -1.0, 1.0)
    scale[rng.random(rows) < 0.1] = 0.0
    if region.dtype in ("float16", "bfloat16"):
        scale = np.clip(scale, -8.0, 8.0)  # stays far from half precision's range
    a *= _row_offsets(region, scale)


def _tiny(region, rng):
    """Small but normal values (outputs ~1e-3 of the dtype's normal range above its smallest normal)."""
    a = region.a if region.op == "matmul" else region.x
    factor = {"float16": 2.0 ** -6, "bfloat16": 1e-18, "float32": 1e-18, "float64": 1e-150}[region.dtype]
    if region.op == "gated":  # its output is a product of two projections of x: quadratic in the factor, and
        factor = math.sqrt(factor)  # with the full one it would fall to the denormals that GPUs flush to zero
    a *= factor


# --- pointwise ---------------------------------------------------------------
def _pointwise_wide(region, rng):
    """Inputs spread over +-0.45 x the exp range with exact zeros: a tanh or sigmoid built from exp(2x)
    overflows to inf/inf there."""
    lim = 0.45 * exp_range(region.dtype)
    for arr in [region.x] + region.tensors():
        arr *= lim / 3.0
        flat = arr.reshape(-1) if arr.flags.c_contiguous else None
        if flat is not None and flat.size:
            flat[:: 7] = 0


# --- fft ----------------------------------------------------------------------
def _fft_structured(region, rng):
    """Constant rows, single impulses and alternating signs: all energy in one bin (zero, Nyquist)."""
    x = region.x
    host = np.asarray(targets.get(region.target).to_host(x)).copy()
    rows, n = host.shape
    for r in range(rows):
        kind = r % 3
        row = np.zeros(n, dtype=host.dtype)
        if kind == 0:
            row[:] = 1.0
        elif kind == 1:
            row[rng.integers(0, n)] = 1.0
        else:
            row[:] = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
        host[r] = row
    x[...] = targets.get(region.target).from_host(host, region.dtype)


# --- special values (issue 25) ---------------------------------------------------------------------------
def _host_rows(region):
    """(host float64 copy of x, its rows-first view): what the row families rewrite before writing back."""
    host = np.asarray(targets.get(region.target).to_host(region.x), dtype=np.float64).copy()
    return host, (host if getattr(region, "axis_last", True) else host.T)


def _write_x(region, host):
    region.x[...] = targets.get(region.target).from_host(host, region.dtype)


def _poke(region, array, index, value):
    """``array[index] = value`` on any target (a host round trip of one array: probes are small or rare)."""
    host = np.asarray(targets.get(region.target).to_host(array), dtype=np.float64).copy()
    host[index] = value
    array[...] = targets.get(region.target).from_host(host, region.dtype)


def _nonfinite(region, rng):
    """NaN, +Inf and -Inf placed where the op's oracle propagates them (see docs/budgets.md, "Special values")."""
    op = region.op
    if op in ("softmax", "rmsnorm", "layernorm"):
        host, rows = _host_rows(region)
        n, cols = rows.shape
        picks = rng.permutation(n)[:3]
        for r, value in zip(picks, (np.nan, np.inf, -np.inf)):
            rows[r, rng.integers(0, cols)] = value
        _write_x(region, host)
    elif op == "pointwise":
        for arr in [region.x] + region.tensors():
            host = np.asarray(targets.get(region.target).to_host(arr), dtype=np.float64).copy().reshape(-1)
            spots = rng.permutation(host.size)[: max(1, host.size // 16)]
            host[spots] = rng.choice([np.nan, np.inf, -np.inf], spots.size)
            arr[...] = targets.get(region.target).from_host(host.reshape(arr.shape), region.dtype)
    elif op == "matmul":
        if region.bias is not None:  # a NaN column and a +Inf column through the activation
            n = region.bias.shape[0]
            _poke(region, region.bias, rng.integers(0, n), np.nan)
            _poke(region, region.bias, rng.integers(0, n), np.inf)
        if region.residual is not None:  # added after the activation: one element each
            m, n = region.residual.shape
            _poke(region, region.residual, (rng.integers(0, m), rng.integers(0, n)), -np.inf)
            _poke(region, region.residual, (rng.integers(0, m), rng.integers(0, n)), np.nan)
        if region.bias is None and region.residual is None and region.activation != "none":  # a NaN row of a
            _poke(region, region.a, (rng.integers(0, region.a.shape[0]), slice(None)), np.nan)
    elif op == "gated":
        _poke(region, region.x, (rng.integers(0, region.x.shape[0]), slice(None)), np.nan)


def _masked_blocks(region, rng):
    """-inf blocks as masks make them: a leading block (left padding), a trailing block, a row masked but for its
    last element, and a fully masked row (whose answer is NaN: docs/budgets.md)."""
    host, rows = _host_rows(region)
    n, cols = rows.shape
    for r in range(n):
        kind = r % 4
        cut = int(rng.integers(1, cols)) if cols > 1 else 1
        if kind == 0:
            rows[r, :cut] = -np.inf
        elif kind == 1:
            rows[r, cut:] = -np.inf
        elif kind == 2:
            rows[r, :-1] = -np.inf
        elif r == n - 1 or rng.random() < 0.5:
            rows[r, :] = -np.inf
        else:
            rows[r, :cut] = -np.inf
    _write_x(region, host)


def _huge(region, rng):
    """Magnitudes log-uniform from 1e-2 to half the dtype's largest value, both signs, in every tensor."""
    top = math.log10(FINFO_MAX[region.dtype] / 2.0)
    for arr in [region.x] + region.tensors():
        shape = tuple(arr.shape)
        mags = 10.0 ** rng.uniform(-2.0, top, shape) * np.where(rng.random(shape) < 0.5, -1.0, 1.0)
        arr[...] = targets.get(region.target).from_host(mags, region.dtype)


SMALLEST_NORMAL = {"float16": 2.0 ** -14, "bfloat16": 2.0 ** -126, "float32": 2.0 ** -126, "float64": 2.0 ** -1022}


def _subnormal(region, rng):
    """Inputs below the smallest normal value (subnormals): a kernel that flushes them to zero fails."""
    tiny = SMALLEST_NORMAL[region.dtype]
    if region.op == "pointwise":
        arr = region.x
        arr *= tiny / 8.0  # benign x has std 1: |x| around an eighth of the smallest normal
    elif region.op == "matmul":  # subnormal a times b of unit scale (b is drawn 1/sqrt(k)): subnormal outputs
        region.a *= tiny / 8.0
        region.b *= math.sqrt(max(region.b.shape[0], 1))


def _zero_ends(region, rng):
    """Rows whose first and last elements are exactly zero (and some rows zero but for one inner element): a
    shortcut that tests the ends for an all-zero row misfires."""
    host, rows = _host_rows(region)
    n, cols = rows.shape
    rows[:, 0] = 0.0
    rows[:, -1] = 0.0
    if cols > 2:
        for r in range(0, n, 3):
            keep = int(rng.integers(1, cols - 1))
            value = rows[r, keep]
            rows[r, :] = 0.0
            rows[r, keep] = value if value != 0 else 1.0
    _write_x(region, host)


def _benign(region, rng):
    """Standard normal operands as ``Region.random`` draws them (layernorm rows offset by +3)."""


BENIGN = Family("benign", ("*",), "zero-mean unit-variance operands as `Region.random` draws them (normal; uniform "
                "above 2^20 elements, where drawing normals would cost more than the run; layernorm rows offset by +3)",
                _benign)

CATALOGUE: tuple[Family, ...] = (
    Family("large_logits", ("softmax",),
           "rows offset by up to +-1.5x the dtype's exp range (ln max: 88.7 float32, 11.1 float16), spread up to "
           "1/8 of it; catches softmax without max-subtraction (overflow to inf/inf, or 0/0 underflow)",
           _softmax_large_logits),
    Family("constant_rows", ("softmax",),
           "rows of one value (0, 1e-3, +-1.5x the exp range): the answer is exactly 1/cols",
           _softmax_constant_rows),
    Family("masked", ("softmax",),
           "half the entries -inf (a mask), at least one finite entry per row", _softmax_masked),
    Family("large_logits", ("attention",),
           "q and k scaled so scores have std 1/2 of the exp range, one key 3x further: catches attention "
           "without max-subtraction (or with a stale max in an online softmax)",
           _attention_large_logits, _logits_budget,
           "the op's budget x the exp range (88.7 float32): scores near it carry ~88x the rounding error"),
    Family("eps_dominated", ("rmsnorm", "layernorm"),
           "rows with mean square (variance) 0 to 4x eps, the first exactly zero (constant): catches a kernel "
           "that ignores or hard-codes eps (0/0, or a wrong scale)",
           _eps_dominated),
    Family("large_offset", ("rmsnorm", "layernorm"),
           "rows of spread 0.1 shifted by +-300: catches a one-pass variance E[x^2] - E[x]^2 (cancellation)",
           _large_offset, _offset_budget,
           "layernorm: the op's budget x 3000 (capped at rel_fro 0.1, atol and rtol 1): the condition number of "
           "(x - mean)/std is abs(x)/std = 3000; a one-pass variance errs by ulp x 3000^2"),
    Family("large_magnitude", ("rmsnorm", "layernorm"),
           "abs(x) up to 2 sqrt(max) of half precision (squares overflow fp16), up to sqrt(float32 max / cols) / 16 "
           "otherwise: catches sums of squares accumulated in the input's half precision",
           _large_magnitude),
    Family("mixed_rows", ("matmul", "gated"),
           "rows of the left operand scaled by +-10^U(-3,3), 10% exactly zero", _mixed_rows),
    Family("tiny", ("matmul", "gated"),
           "left operand scaled to 1e-18 (float32), 2^-6 (float16), 1e-150 (float64), the square root of that for "
           "gated (its output is quadratic in x): outputs small but normal; "
           "catches absolute thresholds and flush-to-zero of normal values",
           _tiny),
    Family("wide", ("pointwise",),
           "inputs spread over +-0.45x the exp range, every 7th exactly zero: catches tanh/sigmoid/silu built "
           "from exp(2x) (inf/inf)",
           _pointwise_wide),
    Family("nonfinite", ("softmax", "rmsnorm", "layernorm", "pointwise", "matmul", "gated"),
           "NaN, +Inf, -Inf where the oracle propagates them: a few elements of x (row ops, pointwise operands), a NaN "
           "and an Inf bias column and Inf/NaN residual elements (matmul with an epilogue; a NaN row of a without "
           "one), a NaN row of x (gated); catches relu as fmax(x, 0) and other "
           "NaN-dropping shortcuts",
           _nonfinite, targets=VERIFIED_ON),
    Family("masked_blocks", ("softmax",),
           "-inf blocks: leading (left padding), trailing, all but the last element, and fully masked rows (NaN: "
           "see Special values); catches an online softmax whose running max starts at -inf without a guard",
           _masked_blocks, targets=VERIFIED_ON),
    Family("huge", ("pointwise",),
           "magnitudes log-uniform from 1e-2 to half the dtype's largest value, both signs: catches exp that "
           "saturates early, and chains that overflow in an intermediate of narrower precision",
           _huge, targets=VERIFIED_ON),
    Family("subnormal", ("pointwise", "matmul"),
           "inputs below the smallest normal value (pointwise x; matmul a, with b of unit scale): outputs are "
           "subnormal, so a kernel that flushes them to zero fails",
           _subnormal, targets=VERIFIED_ON),
    Family("zero_ends", ("softmax", "rmsnorm", "layernorm"),
           "rows whose first and last elements are exactly 0, every third row zero but for one inner element: "
           "catches shortcuts that test a row's ends for an all-zero row",
           _zero_ends, targets=VERIFIED_ON),
    Family("structured", ("fft",),
           "constant rows, single impulses, alternating signs: all energy in the zero or Nyquist bin",
           _fft_structured),
)


def families(op: str, target: str | None = None) -> list[Family]:
    """Benign first, then the op's adversarial families (those probed on ``target``, where given)."""
    return [BENIGN] + [f for f in CATALOGUE if op in f.ops and (target is None or f.targets is None
                                                                   or target in f.targets)]


# --- runtime scalars ----------------------------------------------------------
def _default_of(region, name: str):
    """The default of ``name`` in the region type's constructor (eps 1e-6 rmsnorm, 1e-5 layernorm), or None."""
    import inspect

    param = inspect.signature(type(region).__init__).parameters.get(name)
    return None if param is None or param.default is inspect.Parameter.empty else param.default


def scalar_sentinels(region) -> dict[str, list]:
    """Per runtime scalar, the values varied probes take in turn (``varied_scalars``): a different value of
    the caller's, then the sentinels a kernel may treat specially (1.0, 0.0 where legal, the op's default, a
    negative value where legal), so a kernel that reads ``scale == 1.0`` as "not given" meets it."""
    args = region.runtime_args()
    found: dict[str, list] = {}
    if "eps" in args:  # legal: finite and > 0
        eps = args["eps"]
        default = _default_of(region, "eps")
        found["eps"] = [eps * 10.0 if eps * 10.0 <= 0.1 else eps / 10.0, 1.0,
                        default if default is not None and default != eps else eps / 10.0, eps * 100.0 if eps <= 1e-3
                        else eps / 100.0]
    if args.get("scale") is not None:  # attention: any finite scale; None is the default 1/sqrt(d)
        scale = args["scale"]
        found["scale"] = [scale * 1.7, 1.0, None, -scale, 0.0, scale * 0.5]
    if "scalars" in args:
        found["scalars"] = ["draw", 1.0, 0.0, -1.0, "draw", -0.5]
    return found


def varied_scalars(region, rng, index: int | None = None) -> dict:
    """``runtime_args`` for a probe: values other than the caller's ``region.runtime_args()``.

    ``index`` (the probe's place in the plan) picks the turn in ``scalar_sentinels``: index 1 (the real shape's
    second probe) takes a plain change (eps x10 or /10, attention scale x1.7, pointwise constants redrawn from
    +-U(0.25, 3)), later ones the sentinels. Without an index the plain change, as before.
    """
    args = dict(region.runtime_args())
    turn = 0 if index is None else max(index - 1, 0)
    for name, values in scalar_sentinels(region).items():
        value = values[turn % len(values)]
        if name == "scalars":
            args["scalars"] = [float(rng.uniform(0.25, 3.0) * rng.choice([-1.0, 1.0])) if value == "draw"
                               else float(value) for _ in args["scalars"]]
        else:
            args[name] = value
    return args


def markdown() -> str:
    """The catalogue as ``docs/budgets.md`` publishes it (below the budget table)."""
    lines = ["", "## Probe catalogue", "",
             "Every probe draws fresh data (entropy-seeded; a failure names the seed, `ARBITER_GATE_SEED` replays",
             "it). The gate probes, in order (`arbiter.verify.probe_plan`): the real shape with benign data and the",
             "caller's runtime scalars; the real shape again with new data, the op's first adversarial family and",
             "varied scalars; a shape of the bucket whose dimensions all differ, with tails that are not multiples of",
             "8, 16, 32, 64 or 128 (always); every adversarial family at the bucket's low corner; the bucket's",
             "corners with each dimension low or high independently; sizes inside the bucket (each power-of-two",
             "dimension just past 5B/8, 3B/4 and 7B/8 of its bound B, odd tails: 643, 771, 899 for B = 1024). The",
             "families and corners together cost at most 0.2x the real shape's work (or 2^27 work units, so small",
             "buckets are probed fully); the families share half of that, and a family that does not fit at the low",
             "corner runs at a shrunk shape (every power-of-two dimension scaled down together, odd tails): no family",
             "is ever dropped. A candidate may decline a shrunk shape (it is outside the bucket); the family then runs",
             "at the low corner.",
             "",
             "Every probe reproduces the caller's layout of every operand (`arbiter.layouts`: the key's `layouts`",
             "attribute names the class, rank and row alignment of each operand that is not plain: padded, transposed,",
             "permuted, broadcast, strided, another rank), with NaN in every gap and padding element, and alternate",
             "probes put every operand and the output one element off a 16-byte boundary (pointer alignment is not",
             "keyed: both paths are probed under one verdict; a real shape above 2^27 work units stays aligned and the",
             "bucket's other probes alternate). A legal in-place key (`inplace`) is probed in place.",
             "The output sits inside a NaN guard band of 256 elements each side: a write outside it fails.",
             "",
             "Runtime scalars vary in turn: eps x10 (or /10), 1.0, the op's default (rmsnorm 1e-6, layernorm 1e-5),",
             "x100 (or /100); attention scale x1.7, 1.0, the default 1/sqrt(d), the negated caller's, 0.0, x0.5;",
             "pointwise constants redrawn from +-U(0.25, 3), then 1.0, 0.0, -1.0, a redraw, -0.5. A family's budget",
             "replaces the op's budget for its probes only.",
             "",
             "## Special values",
             "",
             "The oracle's float64 semantics are the contract, and the `nonfinite`, `masked_blocks`, `huge`,",
             "`subnormal` and `zero_ends` families probe them. Where the oracle is NaN the output must be NaN, where",
             "it is +-Inf the same infinity (an exact value beyond the output dtype's range counts as that infinity),",
             "and where it is finite the output must be finite and within the budget.",
             "",
             "| op | NaN / Inf inputs | masked (-inf) entries | other |",
             "| --- | --- | --- | --- |",
             "| softmax | a NaN or +Inf in a row makes the whole row NaN (x - max is NaN there) | -inf entries get 0; "
             "a leading, trailing or all-but-one masked block is an ordinary row; a fully masked row is NaN in "
             "every element (0/0: the row has no distribution; NumPy's and torch.softmax's answer) | rows with zero "
             "first and last elements |",
             "| rmsnorm | a NaN makes its row NaN; an Inf row is 0 at finite elements and NaN at the Inf (x / inf) "
             "| - | rows with zero first and last elements |",
             "| layernorm | a NaN or Inf makes its row NaN | - | rows with zero first and last elements |",
             "| pointwise | elementwise IEEE semantics step by step; `relu`, `max`, `min` propagate NaN (NumPy's "
             "maximum, not fmax) | - | magnitudes up to half the dtype's largest value; subnormal inputs (flush to "
             "zero fails) |",
             "| matmul | NaN and +Inf bias columns and Inf/NaN residual elements pass through the activation "
             "elementwise; a NaN row of `a` (under an activation) makes its output row NaN. NaN/Inf in `a`/`b` of a "
             "plain product are not probed: fast algorithms (Strassen) spread them to other outputs | - | subnormal "
             "`a` with unit `b` (subnormal outputs) |",
             "| gated | a NaN row of `x` makes its output row NaN | - | - |",
             "",
             "Flush-to-zero is not allowed under the default contract: a kernel that flushes fails the `subnormal`",
             "family (a looser declared budget is the way to serve it, with the caller's consent).",
             "",
             "## Catch probabilities at large shapes",
             "",
             "* Linear products (matmul without an activation) at more than 2^27 work units: Freivalds products with",
             "  4 random sign vectors bound every row's error norm, so a wrong element of magnitude above the row's",
             "  budget is caught with certainty (each sign vector sees it in full).",
             "* Nonlinear products (an activation, gated) at more than 2^27 work units: beside sampled rows and",
             "  columns and the partial last tile, the exact reference of every output (i, j) with",
             "  `(j - i) mod 8 == s` (s random per probe) at 1/8 of the product's work in float64. Every 1x8 run of a",
             "  row and every 8x1 run of a column holds exactly one checked element, so one wrong 1x8 (or 8x1)",
             "  fragment anywhere in the output is caught with probability 1 (>= 0.999 as required); a single wrong",
             "  element with probability 1/8 per real-shape probe.",
             "* Attention at large shapes: the exact reference of sampled query rows of every head (unchanged).",
             "* Repeats: 36 runs of one probe on the same inputs, at the real shape when 36 runs cost at most",
             "  max(0.15x the real shape's work, 2^22 units), else at the real shape shrunk to fit; the first is",
             "  checked against the oracle, the others against the first, bitwise under a deterministic contract",
             "  (the default; `Contract(deterministic=False)`: within the budget). A race that corrupts one call in 8",
             "  escapes all 35 comparisons with probability (7/8)^36 = 0.8%: caught with probability 0.992. Cost:",
             "  0.15x the real shape's work at large keys.",
             "",
             "| op | family | values | budget |", "| --- | --- | --- | --- |"]
    for fam in (BENIGN,) + CATALOGUE:
        ops = "(every op)" if fam.ops == ("*",) else ", ".join(fam.ops)
        if fam.targets is not None:
            ops += f" (on {', '.join(fam.targets)} only: see below)"
        lines.append(f"| {ops} | {fam.name} | {fam.text} | {fam.budget_text or 'the op budget'} |")
    lines += ["", f"Families marked 'on {', '.join(VERIFIED_ON)} only', and the one-element pointer shift, "
              "are drawn on the targets whose candidates were verified against them on the device. rocm shares "
              "nvidia's kernel templates but is not verified on an AMD GPU yet; there these families are not "
              "drawn."]
    return "\n".join(lines) + "\n"


def document() -> str:
    """``docs/budgets.md``: the budget table, then this catalogue (``python -m arbiter.probes > docs/budgets.md``)."""
    return budgets.markdown() + markdown()


if __name__ == "__main__":
    print(document(), end="")
