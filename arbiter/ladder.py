"""The bucket fallback ladder.

An unseen bucket first tries the winners of the nearest *measured* buckets of
the same target, op, dtype, layout and attributes (distance: the sum over
dimensions of |log2 bound - log2 bound'|, ties broken by the smaller bucket),
in order of distance; each must still apply to the region and pass the gate
at this key. After them comes plain tier priority. It never raises.
"""
from __future__ import annotations

import math

from arbiter.candidates import params_id
from arbiter.keys import ProblemKey


def _distance(a, b) -> float:
    return sum(abs(math.log2(max(x, 1)) - math.log2(max(y, 1))) for (_, x), (_, y) in zip(a, b))


def nearest_winners(region, store, env) -> list[tuple[str, dict]]:
    """(candidate name, params) of the nearest measured buckets' winners, nearest first."""
    key = region.key
    scored = []
    for record in store.solutions(env.fingerprint):
        if record.policy != "measured" or record.key == key.id:
            continue
        try:
            other = ProblemKey.parse(record.key)
        except ValueError:
            continue
        if (other.target, other.op, other.dtype, other.layout, other.attrs) != \
                (key.target, key.op, key.dtype, key.layout, key.attrs):
            continue
        scored.append((_distance(key.bucket, other.bucket), [v for _, v in other.bucket], record))
    found, seen = [], set()
    for _, _, record in sorted(scored, key=lambda s: (s[0], s[1])):
        ident = (record.candidate, params_id(record.params))
        if ident not in seen:
            seen.add(ident)
            found.append((record.candidate, record.params))
    return found
