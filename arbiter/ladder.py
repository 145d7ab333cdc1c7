"""The bucket fallback ladder.

An unseen bucket first tries the winners of the nearest *measured* buckets of
the same target, op, dtype, layout and attributes (distance: the sum over
dimensions of |log2 bound - log2 bound'|, ties broken by the smaller bucket),
in order of distance; each must still apply to the region and pass the gate
at this key. After them comes plain tier priority. It never raises.
"""
from __future__ import annotations

import math

from arbiter.keys import ProblemKey
from arbiter.solution import ChosenBy, Solution


def _distance(a, b) -> float:
    return sum(abs(math.log2(max(x, 1)) - math.log2(max(y, 1))) for (_, x), (_, y) in zip(a, b))


def nearest_winners(region, store, env) -> list[Solution]:
    """The solutions that won the nearest measured buckets, nearest first, each once."""
    key = region.key
    scored = []
    for record in store.solutions(env.fingerprint):
        if record.chosen_by != ChosenBy.MEASURED or record.key == key.id:
            continue
        try:
            other = ProblemKey.parse(record.key)
        except ValueError:
            continue
        if (other.target, other.op, other.dtype, other.layout, other.attrs) != \
                (key.target, key.op, key.dtype, key.layout, key.attrs):
            continue
        scored.append((_distance(key.bucket, other.bucket), [v for _, v in other.bucket], record))
    found: dict[Solution, None] = {}  # insertion-ordered: nearest first, each solution once
    for _, _, record in sorted(scored, key=lambda s: (s[0], s[1])):
        found.setdefault(record.solution)
    return list(found)
