"""softmax's probe families: large and constant logits, masks."""
from __future__ import annotations

import numpy as np

from arbiter import targets
from arbiter.ops import rows
from arbiter.ops.family import Family, exp_range, host_array, host_rows, write_x


def _large_logits(region, rng):
    """Rows offset by up to +-1.5 x the dtype's exp range, spread up to 1/8 of it."""
    x = region.x
    rows_axis = 0 if region.axis_last else 1
    n_rows = x.shape[rows_axis]
    lim = exp_range(region.dtype)
    offsets = rng.uniform(-1.5 * lim, 1.5 * lim, n_rows)
    offsets[: min(n_rows, 2)] = (1.5 * lim, -1.5 * lim)[: min(n_rows, 2)]  # both signs always present
    shape = (n_rows, 1) if region.axis_last else (1, n_rows)
    x *= lim / 16.0  # benign x has std 2: spread ~ lim / 8
    x += host_array(region, shape, offsets)


def _constant_rows(region, rng):
    """Equal values along the axis (zeros, a large constant): the answer is exactly 1/cols."""
    x = region.x
    rows_axis = 0 if region.axis_last else 1
    n_rows = x.shape[rows_axis]
    lim = exp_range(region.dtype)
    values = rng.choice([0.0, 1.5 * lim, -1.5 * lim, 1e-3], n_rows)
    shape = (n_rows, 1) if region.axis_last else (1, n_rows)
    x *= 0
    x += host_array(region, shape, values)


def _masked(region, rng):
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


def _masked_blocks(region, rng):
    """-inf blocks as masks make them: a leading block (left padding), a trailing block, a row masked but for its
    last element, and a fully masked row (whose answer is NaN: docs/budgets.md)."""
    host, rows_view = host_rows(region)
    n, cols = rows_view.shape
    for r in range(n):
        kind = r % 4
        cut = int(rng.integers(1, cols)) if cols > 1 else 1
        if kind == 0:
            rows_view[r, :cut] = -np.inf
        elif kind == 1:
            rows_view[r, cut:] = -np.inf
        elif kind == 2:
            rows_view[r, :-1] = -np.inf
        elif r == n - 1 or rng.random() < 0.5:
            rows_view[r, :] = -np.inf
        else:
            rows_view[r, :cut] = -np.inf
    write_x(region, host)


def _finfo_min_mask(region, rng):
    """Additive masks of the dtype's most negative finite value (what ``masked_fill(mask, finfo.min)`` and HF's
    extended attention masks put in the logits, instead of -inf): half the entries of most rows, a leading block,
    and fully padded rows, whose answer is uniform (1/cols: every logit is the same finite number), not NaN."""
    host, rows_view = host_rows(region)
    n, cols = rows_view.shape
    lowest = -3.3895313892515355e38 if region.dtype == "bfloat16" else float(np.finfo(region.dtype).min)
    for r in range(n):
        kind = r % 4
        if r == n - 1 or (kind == 3 and rng.random() < 0.5):
            rows_view[r, :] = lowest  # a fully padded row (the last one always)
        elif kind == 2 and cols > 1:
            rows_view[r, : int(rng.integers(1, cols))] = lowest  # left padding
        else:
            mask = rng.random(cols) < 0.5
            mask[int(rng.integers(0, cols))] = False
            rows_view[r, mask] = lowest
    write_x(region, host)


FAMILIES = (
    Family("large_logits", ("softmax",),
           "rows offset by up to +-1.5x the dtype's exp range (ln max: 88.7 float32, 11.1 float16), spread up to "
           "1/8 of it; catches softmax without max-subtraction (overflow to inf/inf, or 0/0 underflow)",
           _large_logits),
    Family("constant_rows", ("softmax",),
           "rows of one value (0, 1e-3, +-1.5x the exp range): the answer is exactly 1/cols",
           _constant_rows),
    Family("masked", ("softmax",),
           "half the entries -inf (a mask), at least one finite entry per row", _masked),
    rows.nonfinite("softmax"),
    Family("masked_blocks", ("softmax",),
           "-inf blocks: leading (left padding), trailing, all but the last element, and fully masked rows (NaN: "
           "see Special values); catches an online softmax whose running max starts at -inf without a guard",
           _masked_blocks, special=True),
    rows.zero_ends("softmax"),
    Family("finfo_min_mask", ("softmax",),
           "additive masks at the dtype's most negative finite value (finfo.min, as masked_fill writes them): half "
           "the entries, leading blocks, and fully padded rows whose answer is 1/cols; catches a running max "
           "started at a finite 'minus infinity' (-1e30) and a test for masked entries by value",
           _finfo_min_mask),
)
