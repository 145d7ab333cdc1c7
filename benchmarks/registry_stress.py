"""Registry load test: many processes dispatching and flushing counters into one registry while one process
imports a large export and another tunes (issue 20's load test).

For each database (a SQLite file; a fresh PostgreSQL database from ``--pg``, default ``$ARBITER_TEST_PG``):

1. a registry is warmed: the dispatch keys are decided once (so every worker loads stored solutions);
2. ``--procs`` worker processes start, open the registry, load their keys, and wait; then, together, each
   dispatches its keys through ``run_arbitrated`` for ``--seconds``, calling ``arbiter.flush()`` every
   ``--flush-every`` seconds (the background flusher is set out of the way so each flush is timed), and flushes
   once more at the end;
3. at the same start, one process runs ``arbiter import`` of a large export (written beforehand by
   ``arbiter export`` from a registry of ``--import-keys`` matmul keys, each with two verdicts, four
   measurements and a solution), and another runs ``arbiter tune --force`` in a loop until the time is up.

Reported per database: dispatches made, dispatches the registry counted, **lost counts** (goal 0), **lock
errors surfaced to callers** (an exception out of ``run_arbitrated`` or ``flush`` in a worker, or a failed
import or tune; goal 0), flush latency p50/p99/max, and the import's wall time and peak memory (its
``ru_maxrss``). ``--json`` prints the figures as JSON (the smoke test in ``tests/test_registry_stress.py``
reads it).

``--threads T``: each worker dispatches from T threads (its main thread flushes). ``--sigterm K``: K workers get
SIGTERM at random moments between 20% and 80% of the run; each must end by it (exit -15), and every call it
completed must be counted (workers write their completed calls to a shared counts file, so a killed one still
says how many); reported: how many were signalled and the longest time from a SIGTERM to the exit. ``--sigkill K``:
K other workers get SIGKILL likewise (nothing of theirs runs after it): what they completed since their last
flush is lost by design, so reported beside the loss is its bound, each killed worker's calls in one flush
interval (its rate until the kill times ``--flush-every``; the documented loss of a SIGKILL).

Usage: python benchmarks/registry_stress.py [--procs 64] [--seconds 60] [--db sqlite,postgresql]
       [--import-keys 8000] [--pg URL] [--json] [--quick] [--out DIR] [--threads 1] [--sigterm 0] [--sigkill 0]
``--quick``: --procs 4 --seconds 3 --import-keys 100 (a smoke run). ``--out DIR``: the table is also written to
``DIR/registry_stress.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The dispatch keys of every worker (small: the registry is under load, not the CPU's arithmetic).
SOFTMAX_SHAPES = [(4, 16), (8, 64), (16, 32)]
RMSNORM_SHAPES = [(4, 16), (8, 64)]
TUNE_SHAPES = ["8x256", "16x512"]  # the tuner's keys (softmax), apart from the workers' keys


def _env(db: str) -> dict:
    return {**os.environ, "ARBITER_DB": db, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "COLUMNS": "200"}


def _regions():
    import numpy as np

    from arbiter.regions import RMSNorm, Softmax

    rng = np.random.default_rng(0)
    out = [("softmax", Softmax(rng.standard_normal(s).astype(np.float32))) for s in SOFTMAX_SHAPES]
    out += [("rmsnorm", RMSNorm(rng.standard_normal(s).astype(np.float32),
                                rng.standard_normal(s[1]).astype(np.float32))) for s in RMSNORM_SHAPES]
    return out


# --- the worker process -------------------------------------------------------------------------------------
def worker(db: str, seconds: float, flush_every: float, threads: int = 1, counts: str = "", slot: int = 0) -> None:
    """Open the registry, load every key, say "ready", wait for "go", dispatch and flush; print figures as JSON.

    ``threads`` threads dispatch (the main thread flushes); each adds one to its int64 slot of the file
    ``counts`` (slots ``slot * threads`` on) after every call returned, so a worker SIGTERMed mid-run still says
    how many calls it completed."""
    import threading

    import numpy as np

    import arbiter
    from arbiter.store import default_store, flusher

    flusher.INTERVAL_S = 3600.0  # every flush below is this loop's own, and timed
    errors: list[str] = []
    arbiter.configure(store=default_store())
    regions = _regions()
    done = np.memmap(counts, dtype=np.int64, mode="r+")[slot * threads:(slot + 1) * threads] if counts else \
        np.zeros(threads, np.int64)
    for op, region in regions:  # the first call of each key loads its stored solution
        arbiter.run_arbitrated(op, region)
        done[0] += 1
    print("ready", flush=True)
    sys.stdin.readline()
    latencies = []
    end = time.monotonic() + seconds

    def dispatch(t: int) -> None:
        while time.monotonic() < end:
            for op, region in regions:
                try:
                    arbiter.run_arbitrated(op, region)
                    done[t] += 1
                except Exception as exc:  # a registry error reaching the caller: what this test counts
                    errors.append(f"run_arbitrated: {type(exc).__name__}: {exc}")

    pool = [threading.Thread(target=dispatch, args=(t,), daemon=True) for t in range(threads)]
    for th in pool:
        th.start()
    while any(th.is_alive() for th in pool):
        pool[0].join(flush_every)
        t = time.perf_counter()
        try:
            arbiter.flush()
            latencies.append(time.perf_counter() - t)
        except Exception as exc:
            errors.append(f"flush: {type(exc).__name__}: {exc}")
    for _attempt in range(10):  # the counts of a failed flush are still pending: try again
        t = time.perf_counter()
        try:
            arbiter.flush()
            latencies.append(time.perf_counter() - t)
            break
        except Exception as exc:
            errors.append(f"final flush: {type(exc).__name__}: {exc}")
    print(json.dumps({"made": int(done.sum()), "latencies": latencies, "errors": errors}), flush=True)


# --- the import file ---------------------------------------------------------------------------------------
def make_export(path: str, keys: int) -> None:
    """A registry of ``keys`` matmul keys (two verdicts, four measurements, a solution each), through the public
    store API, written out by ``arbiter export``."""
    from arbiter import env as envmod
    from arbiter.candidates import REGISTRY
    from arbiter.oracles.budgets import budget_for
    from arbiter.regions import Matmul
    from arbiter.store import MeasurementRecord, SolutionRecord, VerdictKey
    from arbiter.store.sql import SqlStore
    from arbiter.verify import Verdict

    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "source.db")
        st = SqlStore(db)
        environment = envmod.environment("cpu")
        fp = environment.fingerprint
        cands = [c for c in REGISTRY.candidates("cpu", "matmul")][:2]
        budget = budget_for("matmul", "float32")
        template = Matmul.random("cpu", "float32", {"m": 8, "n": 8, "k": 8}).key
        done = 0
        with st.transaction():
            for bias in ("0", "1"):
                for residual in ("0", "1"):
                    for a in range(16):
                        for b in range(16):
                            for c in range(16):
                                if done == keys:
                                    break
                                attrs = tuple((n, bias if n == "bias" else residual if n == "residual" else v)
                                              for n, v in template.attrs)
                                key = type(template).make("cpu", "matmul", "float32", template.layout, attrs,
                                                          (("m", 1 << a), ("n", 1 << b), ("k", 1 << c))).id
                                dims = {"m": 1 << a, "n": 1 << b, "k": 1 << c}
                                probe = f"{1 << a}x{1 << b}x{1 << c}"
                                for i, cand in enumerate(cands):
                                    st.save_verdict(VerdictKey(cand.identity(), "{}", key, fp),
                                                    Verdict(True, "", 1e-7 * (i + 1), 0.1, (probe,), budget, False,
                                                            0.001), cand)
                                ms = [MeasurementRecord(cand.name, {}, mode, 1e-5 * (i + 1), 9e-6, 1.1e-5, 0.02, 30,
                                                        0.001, False, dims)
                                      for i, cand in enumerate(cands) for mode in ("device", "latency")]
                                st.save_measurements(key, fp, ms)
                                st.save_solution(SolutionRecord(key, cands[0].name, cands[0].identity(), {},
                                                                "measured", fp, 1.0, note="stress"), environment)
                                done += 1
        st.close()
        out = subprocess.run([sys.executable, "-m", "arbiter", "--db", db, "export", path], env=_env(db),
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"arbiter export failed: {out.stdout}{out.stderr}")


# --- one database ------------------------------------------------------------------------------------------
def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def _counted(db: str) -> int:
    from arbiter.store.sql import SqlStore

    st = SqlStore(db)
    try:
        return sum(c.total() for c in st.counts())
    finally:
        st.close()


def run_one(name: str, db: str, export: str, procs: int, seconds: float, flush_every: float, log,
            threads: int = 1, sigterm: int = 0, sigkill: int = 0) -> dict:
    env = _env(db)
    log(f"[{name}] warming {db}")
    warm = subprocess.run([sys.executable, __file__, "--warm"], env=env, capture_output=True, text=True)
    if warm.returncode != 0:
        raise SystemExit(f"warm-up failed: {warm.stderr}")
    before = _counted(db)
    log(f"[{name}] starting {procs} workers")
    t0 = time.monotonic()
    import numpy as np

    counts = os.path.join(os.path.dirname(export), f"counts-{name}.bin")
    np.zeros(procs * threads, np.int64).tofile(counts)
    workers = [subprocess.Popen([sys.executable, __file__, "--worker", "--seconds", str(seconds), "--flush-every",
                                 str(flush_every), "--threads", str(threads), "--counts", counts, "--slot", str(i)],
                                env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for i in range(procs)]
    for w in workers:
        line = w.stdout.readline().strip()
        if line != "ready":
            for other in workers:  # none of them may run on without us
                other.kill()
                other.wait()
            raise SystemExit(f"a worker did not start: {line!r} {w.stderr.read()[-2000:]}")
    log(f"[{name}] all {procs} workers ready after {time.monotonic() - t0:.0f} s; go")
    start = time.monotonic()
    importer = subprocess.Popen([sys.executable, "-m", "arbiter", "--db", db, "import", export], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tuner = subprocess.Popen([sys.executable, __file__, "--tuner", "--seconds", str(seconds)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for w in workers:
        w.stdin.write("go\n")
        w.stdin.flush()
    # --sigterm: that many workers get SIGTERM at random moments of the middle of the run; each must end by it
    # (exit -15) and lose no count it completed (read from the counts file, as the process prints nothing).
    rng = np.random.default_rng(1)
    chosen = [int(i) for i in rng.choice(procs, size=min(sigterm + sigkill, procs), replace=False)]
    victims = {i: start + seconds * float(rng.uniform(0.2, 0.8)) for i in chosen[:sigterm]}
    killed = {i: start + seconds * float(rng.uniform(0.2, 0.8)) for i in chosen[sigterm:]}
    signalled: dict[int, float] = {}
    ended_after: list[float] = []
    pending = {**victims, **killed}
    kill_bound = 0.0  # the killed workers' calls in one flush interval each (what a SIGKILL may lose)
    while pending or len(ended_after) < len(signalled):
        now = time.monotonic()
        for i, when in list(pending.items()):
            if now >= when:
                if i in killed:
                    workers[i].kill()
                    workers[i].wait()
                    done = int(np.fromfile(counts, np.int64)[i * threads:(i + 1) * threads].sum())
                    kill_bound += done / max(now - start, 1e-9) * flush_every
                else:
                    workers[i].send_signal(signal.SIGTERM)
                    signalled[i] = now
                del pending[i]
        for i, when in signalled.items():
            if when >= 0 and workers[i].poll() is not None:
                ended_after.append(time.monotonic() - when)
                signalled[i] = -1.0
            elif when >= 0 and time.monotonic() - when > 120:
                ended_after.append(float("inf"))
                signalled[i] = -1.0
        time.sleep(0.02)
    results, errors, stderr_lines = [], [], []
    reported = 0  # counts SIGTERMed workers said they could not write (with their number) before ending
    for i, w in enumerate(workers):
        out, err = w.communicate()
        if i in killed:
            if w.returncode != -signal.SIGKILL:
                errors.append(f"SIGKILLed worker exit {w.returncode}, not -9")
            continue
        if i in victims:
            if w.returncode != -signal.SIGTERM:
                errors.append(f"SIGTERMed worker exit {w.returncode}, not -15: {err.strip()[-300:]}")
            reported += sum(int(m.group(1)) for m in re.finditer(r"(\d+) dispatch count\(s\) not written", err))
            continue
        if w.returncode != 0:
            errors.append(f"worker exit {w.returncode}: {err.strip().splitlines()[-1] if err.strip() else ''}")
            continue
        results.append(json.loads(out.strip().splitlines()[-1]))
        stderr_lines += [ln for ln in err.splitlines() if "not flushed" in ln or "locked" in ln]
    # the importer's peak memory: reap it ourselves to read its rusage
    _, status, usage = os.wait4(importer.pid, 0)
    import_s = time.monotonic() - start
    importer.returncode = os.waitstatus_to_exitcode(status)
    import_out = importer.stdout.read()
    tune_out, _ = tuner.communicate()
    wall = time.monotonic() - start
    made = int(np.fromfile(counts, np.int64).sum())  # every completed call, SIGTERMed workers' included
    latencies = [x for r in results for x in r["latencies"]]
    errors += [e for r in results for e in r["errors"]]
    if importer.returncode != 0:
        errors.append(f"import exit {importer.returncode}: {import_out.strip().splitlines()[-1:]}")
    if tuner.returncode != 0:
        errors.append(f"tuner exit {tuner.returncode}: {tune_out.strip().splitlines()[-1:]}")
    tuned = sum(1 for ln in tune_out.splitlines() if ln.startswith("tuned "))
    counted = _counted(db) - before
    return {"database": name, "procs": procs, "seconds": seconds, "wall_s": round(wall, 1),
            "dispatches": made, "counted": counted, "lost": made - counted, "lost_reported": reported,
            "errors_surfaced": len(errors), "error_samples": errors[:5], "warnings": len(stderr_lines),
            "flushes": len(latencies), "flush_p50_ms": round(_pct(latencies, 0.5) * 1e3, 1),
            "flush_p99_ms": round(_pct(latencies, 0.99) * 1e3, 1),
            "flush_max_ms": round(max(latencies, default=float("nan")) * 1e3, 1),
            "import_mb": round(os.path.getsize(export) / 2**20, 1), "import_s": round(import_s, 1),
            "import_peak_mb": round(usage.ru_maxrss / 1024, 1), "import_ok": importer.returncode == 0,
            "tune_runs": tuned, "threads": threads, "sigtermed": len(victims), "sigkilled": len(killed),
            "kill_loss_bound": round(kill_bound),
            "sigterm_exit_max_s": round(max(ended_after, default=float("nan")), 2)}


def warm() -> None:
    """Decide every worker key once into $ARBITER_DB (stored solutions the workers then load)."""
    import arbiter
    from arbiter.store import default_store

    arbiter.configure(store=default_store())
    for op, region in _regions():
        arbiter.run_arbitrated(op, region)
    arbiter.flush()


def tuner(seconds: float) -> None:
    """``arbiter tune --force`` of two softmax keys, again and again until the time is up."""
    end = time.monotonic() + seconds
    env = {**os.environ, "COLUMNS": "200"}
    while time.monotonic() < end:
        args = [sys.executable, "-m", "arbiter", "tune", "--op", "softmax", "--force", "--budget-seconds", "5"]
        for shape in TUNE_SHAPES:
            args += ["--shape", shape]
        done = subprocess.run(args, env=env, capture_output=True, text=True)
        print(done.stdout[-2000:], flush=True)
        if done.returncode != 0:
            print(done.stderr[-2000:], flush=True)
            raise SystemExit(done.returncode)


def _pg_database(admin: str):
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"arbiter_stress_{uuid.uuid4().hex[:10]}"
    engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(admin).set(database=name).render_as_string(hide_password=False)

    def drop():
        with engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        engine.dispose()

    return url, drop


def table(rows: list[dict]) -> str:
    cols = [("database", "database"), ("procs", "procs"), ("seconds", "s"), ("dispatches", "dispatches"),
            ("counted", "counted"), ("lost", "lost"), ("lost_reported", "of which reported"),
            ("errors_surfaced", "errors to callers"),
            ("flushes", "flushes"), ("flush_p50_ms", "flush p50 ms"), ("flush_p99_ms", "flush p99 ms"),
            ("flush_max_ms", "flush max ms"), ("import_mb", "import MiB"), ("import_s", "import s"),
            ("import_peak_mb", "import peak MiB"), ("tune_runs", "tune runs"), ("threads", "threads"),
            ("sigtermed", "SIGTERMed"), ("sigterm_exit_max_s", "SIGTERM to exit max s"),
            ("sigkilled", "SIGKILLed"), ("kill_loss_bound", "SIGKILL loss bound")]
    lines = ["| " + " | ".join(h for _, h in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(f"{r[k]:,}" if isinstance(r[k], int) else str(r[k]) for k, _ in cols) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, default=64, help="dispatching worker processes (default 64)")
    ap.add_argument("--seconds", type=float, default=60.0, help="how long they dispatch (default 60)")
    ap.add_argument("--flush-every", type=float, default=2.0, help="seconds between a worker's flushes (default 2)")
    ap.add_argument("--import-keys", type=int, default=8_000,
                    help="keys in the imported export (default 8000, about 21 MiB)")
    ap.add_argument("--db", default="sqlite,postgresql", help="databases: sqlite, postgresql or both (default)")
    ap.add_argument("--pg", default=os.environ.get("ARBITER_TEST_PG", ""),
                    help="PostgreSQL URL of a role that may CREATE DATABASE (default $ARBITER_TEST_PG)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--quick", action="store_true", help="--procs 4 --seconds 3 --import-keys 100 (smoke run)")
    ap.add_argument("--out", help="also write the table to DIR/registry_stress.md")
    ap.add_argument("--threads", type=int, default=1, help="dispatching threads per worker process (default 1)")
    ap.add_argument("--sigterm", type=int, default=0,
                    help="workers sent SIGTERM at random moments mid-run (default 0); each must end with -15 and "
                         "lose no count it completed")
    ap.add_argument("--sigkill", type=int, default=0,
                    help="other workers sent SIGKILL at random moments mid-run (default 0); each may lose at most "
                         "its calls since its last flush, reported beside the loss as its bound")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--counts", default="", help=argparse.SUPPRESS)
    ap.add_argument("--slot", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--warm", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tuner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.procs, args.seconds, args.import_keys = 4, 3.0, 100
    if args.worker:
        return worker(os.environ["ARBITER_DB"], args.seconds, args.flush_every, args.threads, args.counts, args.slot)
    if args.warm:
        return warm()
    if args.tuner:
        return tuner(args.seconds)
    for name, value in (("procs", args.procs), ("seconds", args.seconds), ("import-keys", args.import_keys),
                        ("threads", args.threads)):
        if value <= 0:
            ap.error(f"--{name}: must be positive, got {value}")
    if args.import_keys > 4 * 16 ** 3:
        ap.error(f"--import-keys: at most {4 * 16 ** 3} distinct keys, got {args.import_keys}")
    wanted = [d.strip() for d in args.db.split(",") if d.strip()]
    for d in wanted:
        if d not in ("sqlite", "postgresql"):
            ap.error(f"--db: {d!r} is not sqlite or postgresql")
    if "postgresql" in wanted and not args.pg:
        ap.error("--pg: no PostgreSQL URL (set ARBITER_TEST_PG, e.g. from .ci/postgres.sh), or use --db sqlite")
    log = (lambda msg: print(msg, file=sys.stderr, flush=True)) if args.json else (lambda msg: print(msg, flush=True))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        export = os.path.join(tmp, "large-export.json")
        t = time.monotonic()
        make_export(export, args.import_keys)
        log(f"import file: {os.path.getsize(export) / 2**20:.1f} MiB, {args.import_keys} keys, "
            f"made in {time.monotonic() - t:.0f} s")
        for name in wanted:
            if name == "sqlite":
                rows.append(run_one(name, os.path.join(tmp, "registry.db"), export, args.procs, args.seconds,
                                    args.flush_every, log, args.threads, args.sigterm, args.sigkill))
            else:
                url, drop = _pg_database(args.pg)
                try:
                    rows.append(run_one(name, url, export, args.procs, args.seconds, args.flush_every, log,
                                        args.threads, args.sigterm, args.sigkill))
                finally:
                    drop()
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "registry_stress.md").write_text(table(rows) + "\n")
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(table(rows))
        for r in rows:
            for e in r["error_samples"]:
                print(f"  {r['database']}: {e}")


if __name__ == "__main__":
    main()
