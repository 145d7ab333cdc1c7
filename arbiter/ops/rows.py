"""What the row ops (softmax, rmsnorm, layernorm) share: probe families over rows, the report's work model."""
from __future__ import annotations

import math

import numpy as np

from arbiter.ops.family import FINFO_MAX, Family, host_rows, row_offsets, scaled_budget, write_x

ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
WORK_TEXT = "bytes read + written (x and out)"


def work(dims: dict, dtype: str) -> tuple[float, str] | None:
    """x read once, out written once."""
    if dtype in ITEMSIZE and {"rows", "cols"} <= dims.keys():
        return 2.0 * dims["rows"] * dims["cols"] * ITEMSIZE[dtype], "B"
    return None


# --- special values ---------------------------------------------------------------------------------------
def _nonfinite(region, rng):
    """NaN, +Inf and -Inf, one each in a few rows of x."""
    host, rows = host_rows(region)
    n, cols = rows.shape
    picks = rng.permutation(n)[:3]
    for r, value in zip(picks, (np.nan, np.inf, -np.inf)):
        rows[r, rng.integers(0, cols)] = value
    write_x(region, host)


def _zero_ends(region, rng):
    """Rows whose first and last elements are exactly zero (and some rows zero but for one inner element): a
    shortcut that tests the ends for an all-zero row misfires."""
    host, rows = host_rows(region)
    n, cols = rows.shape
    rows[:, 0] = 0.0
    rows[:, -1] = 0.0
    if cols > 2:
        for r in range(0, n, 3):
            keep = int(rng.integers(1, cols - 1))
            value = rows[r, keep]
            rows[r, :] = 0.0
            rows[r, keep] = value if value != 0 else 1.0
    write_x(region, host)


NONFINITE_TEXT = ("NaN, +Inf, -Inf where the oracle propagates them: a few elements of x; catches NaN-dropping "
                  "shortcuts")


def nonfinite(op: str) -> Family:
    return Family("nonfinite", (op,), NONFINITE_TEXT, _nonfinite, special=True)


def zero_ends(op: str) -> Family:
    return Family("zero_ends", (op,),
                  "rows whose first and last elements are exactly 0, every third row zero but for one inner element: "
                  "catches shortcuts that test a row's ends for an all-zero row",
                  _zero_ends, special=True)


# --- norms (rmsnorm, layernorm) -------------------------------------------------------------------------
OFFSET, SPREAD = 300.0, 0.1
# Exactly constant rows at non-integer values and large offsets (a flat image patch, a padded position whose
# embedding is constant). The float32 sum of n copies of such a value rounds in most summation orders (131.325 x
# 4096 does), so a layernorm whose mean is that sum / n misses the constant by a few ulps, and (x - mean) / sqrt(eps)
# magnifies the miss ~300-fold where the answer is exactly the bias (issue 38 item 1: bias + 0.015). Small
# integers, which every order adds exactly, hid it. The statistics of x - x[0] (or Welford's) are exact there.
CONSTANTS = (131.325, -0.7071, 1000.1, -2000.3, 37.19)


def _constants(rng, rows: int, zero_first: bool) -> np.ndarray:
    """One value per row for the constant rows: one of 0 and ``CONSTANTS``, or a random value of magnitude 0.01 to
    3000 (any mantissa), half the time each. Row 0 is 0 where ``zero_first`` (rmsnorm: 0/0 without eps), else a
    random value of magnitude 30 to 3000: a one-row key has no other constant row, a fixed value is summed exactly at
    some widths every time, and a mean that misses a large value shows through any bias."""
    pool = np.array((0.0, *CONSTANTS))
    pick = rng.integers(0, 2 * len(pool), rows)
    drawn = rng.choice([-1.0, 1.0], rows) * 10.0 ** rng.uniform(-2.0, 3.5, rows)
    values = np.where(pick < len(pool), pool[np.minimum(pick, len(pool) - 1)], drawn)
    if rows:
        values[0] = 0.0 if zero_first else float(rng.choice([-1.0, 1.0]) * 10.0 ** rng.uniform(1.5, 3.5))
    return values


EPS_DOMINATED_TEXT = (
    "rows with mean square (variance) 0 to 4x eps, and rows exactly constant: at 0, at non-integer values and large "
    f"offsets ({', '.join(f'{c:g}' for c in CONSTANTS)}, random values of magnitude 0.01 to 3000; a third of the "
    "rows; the first always, layernorm's of magnitude 30 to 3000, rmsnorm's 0): catches a kernel that ignores or "
    "hard-codes eps (0/0, or a wrong scale), and a layernorm whose mean misses a constant row's value (the answer is "
    "exactly the bias; a float32 sum of a non-integer constant rounds, and (x - mean) / sqrt(eps) magnifies the miss)")


def _eps_dominated(centred: bool):
    def apply(region, rng):
        """Rows whose mean square is near ``eps`` (so eps matters), a third exactly constant (row 0 always)."""
        x = region.x
        rows = x.shape[0]
        # Squares below the accumulator's normal range (about 1e-31 in float32) lose their digits, so a caller's
        # eps near the denormals (1.4e-45 in float32) would make this a test of underflow, not of eps: such an
        # eps is negligible beside any representable mean square, and the rows keep a representable one.
        acc = np.finfo(np.float64 if np.dtype(region.dtype).itemsize > 4 else np.float32)
        unit = max(math.sqrt(region.eps), math.sqrt(float(acc.tiny) / float(acc.eps)))
        scale = unit * rng.choice([0.0, 0.0, 0.1, 0.5, 1.0, 2.0], rows)
        scale[: min(rows, 1)] = 0.0  # an exactly constant row (zero variance; rmsnorm's all zero: 0/0 without eps)
        x *= row_offsets(region, scale / 2.0)  # benign rows have std 2
        x += row_offsets(region, np.where(scale == 0.0, _constants(rng, rows, zero_first=not centred), 0.0))
    return apply


def _large_offset(shift: float):
    def apply(region, rng):
        """Rows of spread 0.1 shifted by +300 (and -300): a one-pass variance E[x^2] - E[x]^2 cancels here."""
        x = region.x
        rows = x.shape[0]
        x *= SPREAD / 2.0  # benign rows have std 2
        sign = np.where(rng.random(rows) < 0.5, -1.0, 1.0)
        sign[0] = 1.0
        x += row_offsets(region, OFFSET * sign - shift)
    return apply


def _large_magnitude(region, rng):
    """Values whose squares overflow half precision (or come near float32's range): accumulate wider."""
    x = region.x
    cols = x.shape[-1]
    big = min(2.0 * math.sqrt(FINFO_MAX[region.dtype]), math.sqrt(FINFO_MAX["float32"] / max(cols, 1)) / 16.0)
    big = min(big, FINFO_MAX[region.dtype] / 64.0)
    x *= big / 2.0


def norm_families(op: str, centred: bool) -> tuple[Family, ...]:
    """The families of a norm over rows; ``centred``: it subtracts the row's mean (layernorm), so its constant rows
    are a corner of their own and a large common offset is ill-conditioned (the family gets a budget for it)."""
    offset_budget = None
    budget_text = ""
    if centred:
        # Conditioning of (x - mean) / std with |x| ~ 300, std ~ 0.1: rounding is amplified |x| / std = 3000-fold.
        # A one-pass variance is off by ~ulp * (|x| / std)^2 instead: 0.5 relative in float32, 3e-8 x 3000 over this.
        offset_budget = scaled_budget(lambda dtype: OFFSET / SPREAD)
        budget_text = ("the op's budget x 3000 (capped at rel_fro 0.1, atol and rtol 1): the condition number of "
                       "(x - mean)/std is abs(x)/std = 3000; a one-pass variance errs by ulp x 3000^2")
    return (
        Family("eps_dominated", (op,), EPS_DOMINATED_TEXT, _eps_dominated(centred)),
        Family("large_offset", (op,),
               "rows of spread 0.1 shifted by +-300: catches a one-pass variance E[x^2] - E[x]^2 (cancellation)",
               _large_offset(3.0 if centred else 0.0), offset_budget, budget_text),
        Family("large_magnitude", (op,),
               "abs(x) up to 2 sqrt(max) of half precision (squares overflow fp16), up to "
               "sqrt(float32 max / cols) / 16 otherwise: catches sums of squares accumulated in the input's half "
               "precision",
               _large_magnitude),
        nonfinite(op),
        zero_ends(op),
    )
