"""``rmsnorm``: ``x / sqrt(mean(x^2) + eps) * weight`` over the last axis."""
from __future__ import annotations

from arbiter import regions
from arbiter.ops import rows
from arbiter.ops.kind import OpKind
from arbiter.oracles.long_rows import rmsnorm_pieces
from arbiter.oracles.rmsnorm import oracle


def sub_rows(region, i0: int, i1: int):
    return regions.RMSNorm(region.x[i0:i1], region.weight, eps=region.eps), (slice(i0, i1),)


SUITE: tuple[tuple[dict, str, dict], ...] = (
    ({"rows": 64, "cols": 1000}, "float32", {}),
    ({"rows": 512, "cols": 4096}, "float32", {}),
    ({"rows": 33, "cols": 129}, "float64", {}),
)

# Its special-value semantics, as docs/budgets.md's table states them (NaN / Inf inputs, masked entries, other).
SPECIAL_VALUES = (
    "a NaN makes its row NaN; an Inf row is 0 at finite elements and NaN at the Inf (x / inf), or NaN in every "
    "element (rules 6: a row the oracle makes NaN anywhere may be NaN throughout; torch's CUDA rms_norm fills it, "
    "and the row is non-finite either way)",
    "-",
    "rows with zero first and last elements",
)

KIND = OpKind("rmsnorm", regions.RMSNorm, oracle, families=rows.norm_families("rmsnorm", centred=False), suite=SUITE,
              sub_rows=sub_rows, row_pieces=rmsnorm_pieces, work=rows.work, work_text=rows.WORK_TEXT,
              torch_reference="arbiter.ops.rmsnorm.torch_ref:ref_rmsnorm", nan_fills_row=True,
              special_values=SPECIAL_VALUES)
