"""``attention``: ``softmax(scale q k^T, masked) v`` per batch and head."""
from __future__ import annotations

import math

from arbiter import regions
from arbiter.ops.family import Family, exp_range, scaled, scaled_budget
from arbiter.ops.kind import OpKind
from arbiter.oracles import array_module
from arbiter.oracles.attention import oracle


def _large_logits(region, rng):
    """q and k scaled so scores reach +-1.5 x the exp range: softmax without max-subtraction overflows."""
    lim = exp_range(region.dtype)
    d = region.q.shape[-1]
    # benign q, k are standard normal: score std = scale * sqrt(d); target std ~ lim / 2.
    target_std = lim / 2.0
    factor = math.sqrt(target_std / max(abs(region.scale) * math.sqrt(max(d, 1)), 1e-30))
    region.q *= factor
    region.k *= factor
    region.k[..., : min(region.k.shape[2], 1), :] *= 3.0  # one key far above the rest: an extreme max


FAMILIES = (
    # Scores near the exp range carry absolute rounding error ~ ulp * |score|: relative to a centred
    # softmax that is ~ lim times more, so this family gets lim x the op's budget.
    Family("large_logits", ("attention",),
           "q and k scaled so scores have std 1/2 of the exp range, one key 3x further: catches attention "
           "without max-subtraction (or with a stale max in an online softmax)",
           _large_logits, scaled_budget(exp_range),
           "the op's budget x the exp range (88.7 float32): scores near it carry ~88x the rounding error"),
)

def call_budget(region, budget):
    """A real call's budget (the audit): the op's, times a bound on its largest score ``|scale| max|q_i| max|k_j|``
    (Cauchy-Schwarz) up to the ``large_logits`` family's exp range: rounding error in softmax grows with the scores'
    magnitude, and benign scores (|s| <= 1) are held to the op's budget."""
    if not region.q.size or not region.k.size:
        return budget
    xp = array_module(region.q)
    qn = float(xp.sqrt((region.q.astype(xp.float64) ** 2).sum(axis=-1)).max())
    kn = float(xp.sqrt((region.k.astype(xp.float64) ** 2).sum(axis=-1)).max())
    return scaled(budget, min(max(abs(region.scale) * qn * kn, 1.0), exp_range(region.dtype)))


SUITE: tuple[tuple[dict, str, dict], ...] = (
    ({"batch": 1, "heads": 4, "q": 128, "k": 128, "d": 64}, "float32", {"causal": "1"}),
    ({"batch": 2, "heads": 2, "q": 1, "k": 300, "d": 64}, "float32", {}),
)

# At large shapes the gate checks sampled query rows of every head against the oracle's reference of those rows.
KIND = OpKind("attention", regions.Attention, oracle, families=FAMILIES, suite=SUITE, rows_oracle=oracle,
              call_budget=call_budget,
              torch_reference="arbiter.ops.attention.torch_ref:ref_attention",
              gate_version=2)  # 2: large shapes checked on random full tiles / each head's own rows (issue 38 item 6)
