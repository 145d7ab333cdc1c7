"""Parallel tuning (``arbiter tune --workers N`` / ``--devices 0,1,...``).

Keys are handed to long-lived worker processes through a queue; every worker
opens the registry itself (the same ``ARBITER_DB``) and commits each key's
verdicts, measurements and solution on its own, so nothing is lost when another
worker dies. A worker tells the parent which key it starts; if it dies, only
that in-flight key is lost: it is retried once on a fresh worker, then reported.

Workers sharing a device (CPU workers) verify in parallel but take turns to
time, holding one lock: timings taken side by side on shared cores would
measure the contention. Workers are spawned (fresh interpreters: a fork after
OpenMP or CUDA initialised is unsafe), so they see built-in candidates, entry
points and ``ARBITER_PLUGINS`` modules; on GPU targets there is one per device, each with
``CUDA_VISIBLE_DEVICES`` (``HIP_VISIBLE_DEVICES`` on ROCm) set to its device
before anything imports the GPU library, so each captures its own device's
environment key.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import queue
import time
import traceback
from dataclasses import dataclass, field

from arbiter import targets
from arbiter.errors import WorkersDied


@dataclass
class Outcome:
    """What happened to each key: tuned (with its winner), failed (with why), or lost (its worker died twice)."""

    tuned: dict = field(default_factory=dict)  # key label -> summary dict
    failed: dict = field(default_factory=dict)  # key label -> reason
    lost: dict = field(default_factory=dict)  # key label -> reason
    retried: list = field(default_factory=list)
    workers: dict = field(default_factory=dict)  # worker id -> environment fingerprint it tuned under
    seconds: float = 0.0


def _worker(wid, device, target, tasks, results, mode, isolate, budget_s, timing_lock):
    try:
        visible = targets.get(target).visible_devices
    except Exception as exc:  # an unknown target: reported as the environment's failure below would be
        results.put(("dead", wid, None, f"could not start: {type(exc).__name__}: {exc}"))
        return
    if device is not None and visible is not None:
        os.environ[visible] = str(device)  # before any GPU library is imported in this process
    from arbiter import dispatch, request
    from arbiter import env as envmod
    from arbiter.decide import decide
    from arbiter.isolate import Isolated
    from arbiter.store import default_store

    try:
        store = default_store()
        dispatch.configure(store=store)
        fingerprint = envmod.environment(target).fingerprint
    except Exception as exc:
        results.put(("dead", wid, None, f"could not start: {type(exc).__name__}: {exc}"))
        return
    results.put(("ready", wid, None, fingerprint))
    runner = Isolated() if isolate else None
    while True:
        task = tasks.get()
        if task is None:
            break
        index, problem, seed = task
        results.put(("start", wid, index, None))
        try:
            region = problem.region(target, seed=seed)
            decision = decide(region, request.tune(mode=mode, budget_s=budget_s, runner=runner,
                                                   timing_lock=timing_lock), store)
            w = decision.winner
            results.put(("done", wid, index, {"key": region.key.id, "winner": w.label,
                                              "policy": str(decision.chosen_by), "margin": decision.margin,
                                              "device": device, "env": fingerprint}))
        except Exception as exc:  # a key that cannot be tuned is reported; the worker goes on
            results.put(("failed", wid, index, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=2)}"))
    if hasattr(store, "close"):
        store.close()


def tune_parallel(problems, target: str, *, workers: int = 2, devices: list[int] | None = None,
                  mode: str = "device", isolate: bool = False, budget_s: float | None = None,
                  on_event=None) -> Outcome:
    """Tune ``problems`` over worker processes (``devices``: one per device). ``on_event(kind, label, info)``
    reports progress ("start", "done", "failed", "retry", "lost")."""
    slots = [None] * workers if devices is None else list(devices)
    if not slots:
        raise ValueError("workers: need at least one worker or device")
    ctx = mp.get_context("spawn")
    tasks, results = ctx.Queue(), ctx.Queue()
    # Workers sharing one device verify in parallel but time one at a time: concurrent timing on a shared
    # CPU measures the contention, not the kernel. One worker per GPU needs no lock.
    timing_lock = ctx.Lock() if devices is None else None
    labels = [p.label for p in problems]
    for i, p in enumerate(problems):
        tasks.put((i, p, i))
    procs: dict[int, tuple] = {}  # worker id -> (process, device)
    inflight: dict[int, int | None] = {}
    attempts = {i: 1 for i in range(len(problems))}
    outcome, start = Outcome(), time.perf_counter()
    next_wid = 0
    max_launches = 2 * len(slots) + 2 * len(problems)  # a worker that dies at start-up must not loop forever

    def launch(device):
        nonlocal next_wid
        if next_wid >= max_launches:
            raise WorkersDied(f"workers keep dying ({next_wid} started); run `arbiter tune` without --workers "
                              "to see why")
        wid, next_wid = next_wid, next_wid + 1
        p = ctx.Process(target=_worker, args=(wid, device, target, tasks, results, mode, isolate, budget_s,
                                              timing_lock), daemon=True)
        p.start()
        procs[wid], inflight[wid] = (p, device), None
        return wid

    for device in slots:
        launch(device)
    remaining = len(problems)
    while remaining:
        try:
            kind, wid, index, info = results.get(timeout=0.5)
        except queue.Empty:
            kind = None
        if kind == "ready":
            outcome.workers[wid] = info
        elif kind == "start":
            inflight[wid] = index
            on_event and on_event("start", labels[index], {"worker": wid})
        elif kind in ("done", "failed"):
            inflight[wid] = None
            remaining -= 1
            (outcome.tuned if kind == "done" else outcome.failed)[labels[index]] = info
            on_event and on_event(kind, labels[index], info)
        elif kind == "dead":
            raise WorkersDied(f"worker {wid} {info}")
        # A worker that died takes only its in-flight key with it: retry that key once, on a new worker.
        for w, (p, device) in list(procs.items()):
            if p.is_alive() or p.exitcode is None:
                continue
            lost = inflight.pop(w, None)
            del procs[w]
            if lost is not None:
                why = f"worker died (exit code {p.exitcode})"
                if attempts[lost] < 2:
                    attempts[lost] += 1
                    outcome.retried.append(labels[lost])
                    tasks.put((lost, problems[lost], lost))
                    on_event and on_event("retry", labels[lost], why)
                else:
                    outcome.lost[labels[lost]] = why
                    remaining -= 1
                    on_event and on_event("lost", labels[lost], why)
            if remaining:
                launch(device)
    for _ in procs:
        tasks.put(None)
    for p, _ in procs.values():
        p.join(30)
    outcome.seconds = time.perf_counter() - start
    return outcome
