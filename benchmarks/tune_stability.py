"""Stability of CPU tuning: the winner per key across registries tuned by identical runs.

    python benchmarks/tune_stability.py run1.db run2.db run3.db

prints, per key, each run's winner, policy and margin, and whether the runs agree on every key whose
margin was separated (policy ``measured``): "yes" (one winner in every run), "where separated" (the runs
that separated the key chose the same winner; the others kept the tier default), or "NO" (two runs
separated it with different winners). Exit status 1 on any "NO".
"""
from __future__ import annotations

import sys

from arbiter.store.sql import SqlStore


def winners(path: str) -> dict[str, tuple[str, str, float | None]]:
    st = SqlStore(path, readonly=True)
    return {r.key: (r.candidate_name + ("" if not r.params else str(r.params).replace(" ", "")), str(r.chosen_by),
                    r.margin)
            for r in st.solutions()}


def main(paths: list[str]) -> int:
    runs = [winners(p) for p in paths]
    keys = sorted(set().union(*runs))
    bad = 0
    print("| key | " + " | ".join(f"run {i + 1}" for i in range(len(runs))) + " | same |")
    print("|---" * (len(runs) + 2) + "|")
    for key in keys:
        cells, chosen = [], set()
        for run in runs:
            w = run.get(key)
            if w is None:
                cells.append("(none)")
                continue
            name, policy, margin = w
            cells.append(f"{name} ({policy}{'' if margin is None else f' {margin * 100:+.0f}%'})")
            chosen.add(name)
        measured = {c.split(" (")[0] for c in cells if "(measured" in c}
        same = "yes" if len(chosen) == 1 else "NO" if len(measured) > 1 else \
            "where separated" if measured else "no (never separated)"
        bad += same == "NO"
        print(f"| {key} | " + " | ".join(cells) + f" | {same} |")
    print(f"\n{len(keys)} keys; {bad} separated by two runs with different winners")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
