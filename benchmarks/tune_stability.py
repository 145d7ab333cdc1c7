"""Stability of CPU tuning: the winner per key across registries tuned by identical runs.

    python benchmarks/tune_stability.py run1.db run2.db run3.db [--out DIR]
    python benchmarks/tune_stability.py --quick [--out DIR]

prints, per key, each run's winner, policy and margin, and whether the runs agree on every key whose
margin was separated (policy ``measured``): "yes" (one winner in every run), "where separated" (the runs
that separated the key chose the same winner; the others kept the tier default), or "NO" (two runs
separated it with different winners). Exit status 1 on any "NO".

``--quick`` (a smoke run): the first two keys of the ``quick`` suite tuned twice with ``tune_region`` into two
fresh registries (0.2 s timing cap per key), then compared; a "NO" there is printed, not an exit status (two
runs this short may well disagree). ``--out DIR``: the table is also written to ``DIR/tune_stability.md``.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from arbiter.store.sql import SqlStore


def winners(path: str) -> dict[str, tuple[str, str, float | None]]:
    st = SqlStore(path, readonly=True)
    return {r.key: (r.candidate_name + ("" if not r.params else str(r.params).replace(" ", "")), str(r.chosen_by),
                    r.margin)
            for r in st.solutions()}


def tune_twice(folder: str) -> list[str]:
    """Two identical quick runs (the suite's first two keys) into fresh registries under ``folder``."""
    from arbiter.suite import suite
    from arbiter.tune import tune_region

    paths = []
    for run in range(2):
        path = os.path.join(folder, f"run{run + 1}.db")
        store = SqlStore(path)
        for i, problem in enumerate(suite("quick")[:2]):
            tune_region(problem.region("cpu", seed=i), store, budget_s=0.2)
        store.close()
        paths.append(path)
    return paths


def compare(paths: list[str]) -> tuple[list[str], int]:
    """The table's lines and the number of keys two runs separated with different winners."""
    runs = [winners(p) for p in paths]
    keys = sorted(set().union(*runs))
    bad = 0
    lines = ["| key | " + " | ".join(f"run {i + 1}" for i in range(len(runs))) + " | same |",
             "|---" * (len(runs) + 2) + "|"]
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
        lines.append(f"| {key} | " + " | ".join(cells) + f" | {same} |")
    lines.append(f"\n{len(keys)} keys; {bad} separated by two runs with different winners")
    return lines, bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("registries", nargs="*", help="registry files of identical tuning runs")
    ap.add_argument("--quick", action="store_true", help="tune two keys twice here, then compare (smoke run)")
    ap.add_argument("--out", help="also write the table to DIR/tune_stability.md")
    args = ap.parse_args(argv)
    if not args.quick and len(args.registries) < 2:
        ap.error("give two or more registries, or --quick")
    with tempfile.TemporaryDirectory() as tmp:
        lines, bad = compare(tune_twice(tmp) if args.quick else args.registries)
    print("\n".join(lines))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "tune_stability.md").write_text("\n".join(lines) + "\n")
    return 1 if bad and not args.quick else 0


if __name__ == "__main__":
    sys.exit(main())
