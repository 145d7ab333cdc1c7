"""The float64 reference of a row op whose rows are too long to hold in float64 at once, a piece at a time.

The gate checks row ops (softmax, rmsnorm, layernorm) against the full float64 reference a bounded chunk of rows
at a time; one row of 67,108,864 float32 is itself a 512 MiB float64 array, and its reference and the
comparison's temporaries took 2.9 GiB. Here a row's statistics (max and sum of exponentials; mean square;
mean and variance) are accumulated in float64 over column chunks, then its reference is produced chunk by chunk,
with the same formulas as the ops' oracles (``arbiter.oracles.softmax`` etc.): the sums differ from the
oracles' only by float64 summation order.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from arbiter.oracles import host64

Piece = tuple[tuple, Callable[[tuple], tuple], np.ndarray]  # (output index, chunk index -> output index, ref)


def pieces(region, step: int) -> Iterator[Piece] | None:
    """(output index, origin, float64 reference) for every ``step`` elements of every row of ``region``'s
    output, in order; None for a region this does not cover (not 2-D, or another op). The gate reaches the
    op's own function through its kind (``OpKind.row_pieces``)."""
    of_op = {"softmax": softmax_pieces, "rmsnorm": rmsnorm_pieces, "layernorm": layernorm_pieces}.get(region.op)
    return None if of_op is None else of_op(region, step)


def softmax_pieces(region, step: int) -> Iterator[Piece] | None:
    if getattr(region.x, "ndim", 0) != 2:
        return None
    return _rows(region, step, region.axis_last, _softmax)


def rmsnorm_pieces(region, step: int) -> Iterator[Piece] | None:
    if getattr(region.x, "ndim", 0) != 2:
        return None
    return _rows(region, step, True, _rmsnorm)


def layernorm_pieces(region, step: int) -> Iterator[Piece] | None:
    if getattr(region.x, "ndim", 0) != 2:
        return None
    return _rows(region, step, True, _layernorm)


def _rows(region, step: int, last: bool, op) -> Iterator[Piece]:
    x = region.x if last else region.x.T  # rows along the reduced axis
    rows, cols = x.shape
    bounds = [(c0, min(cols, c0 + step)) for c0 in range(0, cols, step)]
    for i in range(rows):
        def part(c0, c1, i=i):
            return host64(region, x[i, c0:c1])

        for c0, ref in op(region, part, bounds, cols):
            c1 = c0 + ref.shape[0]
            index = (i, slice(c0, c1)) if last else (slice(c0, c1), i)

            def origin(idx, i=i, c0=c0):
                return (i, c0 + idx[0]) if last else (c0 + idx[0], i)

            yield index, origin, ref


def _softmax(region, part, bounds, cols):
    top = max(float(part(c0, c1).max()) for c0, c1 in bounds)  # NaN anywhere: NaN, as the oracle's max
    total = sum(float(np.exp(part(c0, c1) - top).sum()) for c0, c1 in bounds)
    for c0, c1 in bounds:
        yield c0, np.exp(part(c0, c1) - top) / total


def _rmsnorm(region, part, bounds, cols):
    mean_square = sum(float((p * p).sum()) for p in (part(c0, c1) for c0, c1 in bounds)) / cols
    scale = 1.0 / np.sqrt(mean_square + region.eps)
    for c0, c1 in bounds:
        yield c0, part(c0, c1) * scale * host64(region, region.weight[c0:c1])


def _layernorm(region, part, bounds, cols):
    shift = float(part(0, 1)[0]) if cols else 0.0  # the row's first element, as the oracle shifts it (exact there)
    mean = sum(float((part(c0, c1) - shift).sum()) for c0, c1 in bounds) / cols  # of the shifted row
    var = sum(float(((part(c0, c1) - shift - mean) ** 2).sum()) for c0, c1 in bounds) / cols  # two-pass, biased
    scale = 1.0 / np.sqrt(var + region.eps)
    for c0, c1 in bounds:
        y = (part(c0, c1) - shift - mean) * scale * host64(region, region.weight[c0:c1])
        if region.bias is not None:
            y = y + host64(region, region.bias[c0:c1])
        yield c0, y
