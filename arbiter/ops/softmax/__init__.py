"""``softmax``: ``exp(x - max) / sum(exp(x - max))`` along an axis (the last, or the inner one of 2-D x)."""
from __future__ import annotations

from arbiter import regions
from arbiter.ops import rows
from arbiter.ops.kind import OpKind
from arbiter.ops.softmax.probes import FAMILIES
from arbiter.oracles.long_rows import softmax_pieces
from arbiter.oracles.softmax import oracle


def _split_axis(region) -> int:
    """The axis rows are split along: the first, or the last where the reduced axis is the first."""
    return 0 if region.axis != 0 else region.x.ndim - 1


def sub_rows(region, i0: int, i1: int):
    index = (slice(None),) * _split_axis(region) + (slice(i0, i1),)
    return regions.Softmax(region.x[index], axis=region.axis), index


def row_count(region) -> int:
    shape = region.output_shape()
    return shape[_split_axis(region)] if shape else 0


SUITE: tuple[tuple[dict, str, dict], ...] = (
    ({"rows": 64, "cols": 1000}, "float32", {}),
    ({"rows": 512, "cols": 4096}, "float32", {}),
    ({"rows": 33, "cols": 129}, "float64", {}),
    ({"rows": 128, "cols": 2048}, "float16", {}),
)

# Its special-value semantics, as docs/budgets.md's table states them (NaN / Inf inputs, masked entries, other).
SPECIAL_VALUES = (
    "a NaN or +Inf in a row makes the whole row NaN (x - max is NaN there)",
    "-inf entries get 0; a leading, trailing or all-but-one masked block is an ordinary row; a fully masked row is "
    "NaN in every element (0/0: the row has no distribution; NumPy's and torch.softmax's answer)",
    "rows with zero first and last elements; finfo.min additive masks (`masked_fill(mask, finfo.min)`) are finite "
    "logits: masked entries get 0 (exp underflows) and a fully padded row is uniform, 1/cols, not NaN",
)

KIND = OpKind("softmax", regions.Softmax, oracle, families=FAMILIES, suite=SUITE, sub_rows=sub_rows,
              row_count=row_count, row_pieces=softmax_pieces, work=rows.work, work_text=rows.WORK_TEXT,
              torch_reference="arbiter.ops.softmax.torch_ref:ref_softmax",
              # 2: the finfo_min_mask family (issue 38 item 5); 3: inner axes of 3-D/4-D x
              gate_version=3,
              special_values=SPECIAL_VALUES)
