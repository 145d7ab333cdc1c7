"""``layernorm``: ``(x - mean) / sqrt(var + eps) * weight + bias`` over the last axis."""
from __future__ import annotations

from arbiter import regions
from arbiter.ops import rows
from arbiter.ops.family import scaled
from arbiter.ops.kind import OpKind
from arbiter.oracles import array_module
from arbiter.oracles.layernorm import oracle
from arbiter.oracles.long_rows import layernorm_pieces


def sub_rows(region, i0: int, i1: int):
    return regions.LayerNorm(region.x[i0:i1], region.weight, region.bias, eps=region.eps), (slice(i0, i1),)


def call_budget(region, budget):
    """A real call's budget (the audit): the op's, times its worst row's condition number ``|mean| / std`` up to the
    ``large_offset`` family's 3000, over the rows whose variance is above 4 eps; rows at or below it are the
    ``eps_dominated`` family's (constant rows included), held to the op's budget."""
    xp = array_module(region.x)
    x = region.x.astype(xp.float64).reshape(-1, region.x.shape[-1]) if region.x.size else None
    if x is None:
        return budget
    mean = x.mean(axis=-1)
    var = ((x - mean[:, None]) ** 2).mean(axis=-1)
    spread = var > 4.0 * region.eps
    if not bool(spread.any()):
        return budget
    kappa = float((xp.abs(mean[spread]) / xp.sqrt(var[spread])).max())
    return scaled(budget, min(max(kappa, 1.0), rows.OFFSET / rows.SPREAD))


SUITE: tuple[tuple[dict, str, dict], ...] = (
    ({"rows": 64, "cols": 1000}, "float32", {}),
    ({"rows": 257, "cols": 2048}, "float32", {}),
)

# Its special-value semantics, as docs/budgets.md's table states them (NaN / Inf inputs, masked entries, other).
SPECIAL_VALUES = (
    "a NaN or Inf makes its row NaN",
    "-",
    "rows with zero first and last elements; a row exactly constant at any value (131.325, not only small integers)"
    " is exactly the bias (0 without one): its variance is 0, so a mean that misses the value is magnified by "
    "1/sqrt(eps)",
)

KIND = OpKind("layernorm", regions.LayerNorm, oracle, families=rows.norm_families("layernorm", centred=True),
              suite=SUITE, sub_rows=sub_rows, row_pieces=layernorm_pieces, work=rows.work, work_text=rows.WORK_TEXT,
              torch_reference="arbiter.ops.layernorm.torch_ref:ref_layernorm", call_budget=call_budget,
              special_values=SPECIAL_VALUES)
