"""The walk of ``region`` on a miss: how many arbiter functions it passes through, and how often it climbs back up.

A real miss (CPU target, a fresh in-memory registry, a small float32 Matmul, policy tier, nothing stored) is
traced with ``sys.setprofile``. Counted:

* **stops**: calls of functions defined under ``arbiter/`` (candidate modules and the region's own methods left
  out: they are the kernels and the problem, not the way into selection) that receive the region object itself
  as an argument (identity, not equality), counted once per call site (a loop calling one function per
  candidate or per probe is one stop);
* **climbs**: times such a call returned to its caller and the walk then went down again with the region to a
  new call site (a return followed by a call, among those stops): a caller that hands the region on, gets it
  back, and hands it on again elsewhere.

The goal of issue 27 item 3 is at most 20 stops and 5 climbs. ``--list`` prints the stops in order, indented by
depth. No timing: the figures are counts, the same on a loaded box.

    python benchmarks/walk.py [--list] [--policy tier|tune|record] [--into-gate] [--quick] [--out DIR]

``--out DIR``: also write ``DIR/walk.md``, the table of the four walks (tier and tune, to the gate and into it).
``--quick``: the same (the walk is already a few seconds); accepted so the smoke test runs every script alike.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

import arbiter
from arbiter import dispatch
from arbiter.regions import Matmul
from arbiter.store import MemoryStore

ROOT = os.path.dirname(os.path.abspath(arbiter.__file__))
LEFT_OUT = (os.path.join(ROOT, "candidates") + os.sep,)
# Where the way into selection ends: the region handed to the gate (its probes are the gate's own work) or to the
# timer. Counted as a stop; what they call is not, unless ``into_gate``.
BOUNDARIES = {("verify.py", "verdict_for"), ("timing.py", None)}  # (file, function; None: any of the file's)


def _receives(frame, region) -> bool:
    code = frame.f_code
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    values = [frame.f_locals.get(n) for n in names]
    if names and names[0] == "self" and values[0] is region:
        return False  # one of the region's own methods
    return any(v is region for v in values)


def walk(region, policy: str = "tier", into_gate: bool = False) -> tuple[int, int, list[tuple[int, str]]]:
    """(stops, climbs, [(depth, function)...]) of one ``run_arbitrated`` miss on ``region``; ``into_gate``: the
    gate's and the timer's own calls counted too."""
    stack: list[bool] = []  # per live frame under the trace: whether it is a stop
    inside = [0]  # > 0 while below a boundary (not followed)
    stops: list[tuple[int, str]] = []
    sites: set = set()  # (caller's code, line, callee's code): a call site counted already
    climbs, last = 0, None

    def profile(frame, event, arg):
        nonlocal climbs, last
        if event == "call":
            file = frame.f_code.co_filename
            base = os.path.basename(file)
            caller = frame.f_back
            stop = not inside[0] and file.startswith(ROOT) and not file.startswith(LEFT_OUT) \
                and _receives(frame, region)
            if stop and not into_gate and (base, None) in BOUNDARIES and caller and caller.f_code.co_filename == file:
                stop = False  # called by the timer itself (its rounds calling a solution): the timer's own work
            boundary = stop and not into_gate and ((base, frame.f_code.co_name) in BOUNDARIES
                                                   or (base, None) in BOUNDARIES)
            site = (caller.f_code if caller else None, caller.f_lineno if caller else 0, frame.f_code)
            if stop and site in sites:
                stop = False  # the same call site again (a loop): one stop, and no climb
            stack.append(stop)
            if boundary:
                inside[0] += 1
                stack[-1] = "boundary"
            if stop:
                sites.add(site)
                if last == "return":
                    climbs += 1
                last = "call"
                stops.append((sum(map(bool, stack)) - 1, f"{os.path.relpath(file, ROOT)}:{frame.f_code.co_qualname}"))
        elif event == "return" and stack:
            was = stack.pop()
            if was == "boundary":
                inside[0] -= 1
            if was:
                last = "return"

    sys.setprofile(profile)
    try:
        dispatch.run_arbitrated("matmul", region, policy=policy)
    finally:
        sys.setprofile(None)
    return len(stops), climbs, stops


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--list", action="store_true", help="print the stops, indented by depth")
    p.add_argument("--policy", default="tier", choices=("tier", "tune", "record"))
    p.add_argument("--into-gate", action="store_true", help="count the gate's and the timer's own calls too")
    p.add_argument("--quick", action="store_true", help="the same walk (it is already quick)")
    p.add_argument("--out", default=None, help="also write DIR/walk.md: the four walks' table")
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)

    def matmul(n):
        return Matmul(rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32))

    # A first miss on another key: imports and first-use caches are not part of the walk.
    dispatch.configure(store=MemoryStore())
    dispatch.run_arbitrated("matmul", matmul(8), policy=args.policy)
    dispatch.reset()
    dispatch.configure(store=MemoryStore())
    stops, climbs, listed = walk(matmul(48), args.policy, args.into_gate)
    if args.list:
        for depth, name in listed:
            print("  " * depth + name)
    where = ", into the gate" if args.into_gate else ""
    print(f"walk of region from run_arbitrated (policy {args.policy}{where}): {stops} stops, {climbs} climbs")
    if args.out:
        rows = ["| policy | into the gate | stops | climbs |", "| --- | --- | --- | --- |"]
        for policy in ("tier", "tune"):
            for into in (False, True):
                dispatch.reset()
                dispatch.configure(store=MemoryStore())
                n, c, _ = walk(matmul(48), policy, into)
                rows.append(f"| {policy} | {'yes' if into else 'no'} | {n} | {c} |")
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "walk.md"), "w") as f:
            f.write("# The walk of region on a miss (issue 27 item 3; goal: at most 20 stops, 5 climbs)\n\n"
                    + "\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
