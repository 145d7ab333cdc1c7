"""``layernorm``: ``(x - mean) / sqrt(var + eps) * weight + bias`` over the last axis."""
from __future__ import annotations

from arbiter import regions
from arbiter.ops import rows
from arbiter.ops.kind import OpKind
from arbiter.oracles.layernorm import oracle
from arbiter.oracles.long_rows import layernorm_pieces


def sub_rows(region, i0: int, i1: int):
    return regions.LayerNorm(region.x[i0:i1], region.weight, region.bias, eps=region.eps), (slice(i0, i1),)


SUITE: tuple[tuple[dict, str, dict], ...] = (
    ({"rows": 64, "cols": 1000}, "float32", {}),
    ({"rows": 257, "cols": 2048}, "float32", {}),
)

KIND = OpKind("layernorm", regions.LayerNorm, oracle, families=rows.norm_families("layernorm", centred=True),
              suite=SUITE, sub_rows=sub_rows, row_pieces=layernorm_pieces, work=rows.work, work_text=rows.WORK_TEXT,
              torch_reference="arbiter.ops.layernorm.torch_ref:ref_layernorm")
