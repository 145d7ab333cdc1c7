"""What the row ops (softmax, rmsnorm, layernorm) share: probe families over rows, the report's work model."""
from __future__ import annotations

import math

import numpy as np

from arbiter.ops.family import FINFO_MAX, VERIFIED_ON, Family, host_rows, row_offsets, scaled_budget, write_x

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
    return Family("nonfinite", (op,), NONFINITE_TEXT, _nonfinite, targets=VERIFIED_ON)


def zero_ends(op: str) -> Family:
    return Family("zero_ends", (op,),
                  "rows whose first and last elements are exactly 0, every third row zero but for one inner element: "
                  "catches shortcuts that test a row's ends for an all-zero row",
                  _zero_ends, targets=VERIFIED_ON)


# --- norms (rmsnorm, layernorm) -------------------------------------------------------------------------
OFFSET, SPREAD = 300.0, 0.1


def _eps_dominated(constant_rows: bool):
    def apply(region, rng):
        """Rows whose mean square is near ``eps`` (so eps matters), some exactly zero or constant."""
        x = region.x
        rows = x.shape[0]
        # Squares below the accumulator's normal range (about 1e-31 in float32) lose their digits, so a caller's
        # eps near the denormals (1.4e-45 in float32) would make this a test of underflow, not of eps: such an
        # eps is negligible beside any representable mean square, and the rows keep a representable one.
        acc = np.finfo(np.float64 if np.dtype(region.dtype).itemsize > 4 else np.float32)
        unit = max(math.sqrt(region.eps), math.sqrt(float(acc.tiny) / float(acc.eps)))
        scale = unit * rng.choice([0.0, 0.1, 0.5, 1.0, 2.0], rows)
        scale[: min(rows, 1)] = 0.0  # an all-zero (or, with constant_rows, exactly constant) row
        x *= row_offsets(region, scale / 2.0)  # benign rows have std 2
        if constant_rows:  # exactly constant rows (zero variance: the answer is bias); small integers
            # keep every summation order exact, so a correct kernel's mean is exactly the constant
            x += row_offsets(region, np.where(scale == 0.0, rng.integers(-3, 4, rows), 0).astype(np.float64))
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
        Family("eps_dominated", (op,),
               "rows with mean square (variance) 0 to 4x eps, the first exactly zero (constant): catches a kernel "
               "that ignores or hard-codes eps (0/0, or a wrong scale)",
               _eps_dominated(centred)),
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
