"""Fleet scale on a shared registry (issue 18 item 5): start-up load among many environments, claim throughput.

  * load: ENVS x PER_ENV solutions (default 10 x 10,000 = 100,000) in one registry; a new process opens it and
    installs its own environment's PER_ENV solutions (``SqlStore`` bulk-loads an environment on its first
    lookup), then looks every one of them up. Timed from the open to the last lookup, in 5 fresh processes
    (median, min, max). Goal: < 300 ms.
  * claims: KEYS keys offered under one environment, TUNERS processes claiming them with no work in between
    (``Claims.claim`` then ``Claims.finish`` in a transaction, as ``arbiter tune`` does around a key); claims per
    second over the wall time from a common start to the last claim; checks every key was claimed exactly once.

The registry is the PostgreSQL server of ``$ARBITER_TEST_PG`` (a fresh database, dropped afterwards) unless
``--url`` names one (a SQLite path for comparison). ``--quick``: 2 x 500 solutions, 2 fresh processes, 2 tuners,
100 keys (a smoke run). ``--out DIR``: the figures are also written to ``DIR/fleet_scale.md``.

Usage: ARBITER_TEST_PG=$(bash .ci/postgres.sh) python benchmarks/fleet_scale.py [--quick] [--url URL] [--out DIR]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def env_fp(e: int) -> str:
    return f"{e:02d}" * 10


def key(i: int) -> str:
    return f"cpu:matmul:float32:RR:-:m{i},n{i % 64 + 1},k{i % 128 + 1}"


def fill(url: str, envs: int, per_env: int) -> float:
    """``envs`` environments x ``per_env`` solutions (the same keys in each), written by the store's bulk import
    (``arbiter import``'s path: batches of multi-row inserts); returns seconds."""
    from arbiter.store.models import SCHEMA_VERSION, utcnow
    from arbiter.store.sql import SqlStore
    from arbiter.store.transfer import FORMAT, RegistryExport, import_registry

    started = time.perf_counter()
    now = utcnow()
    data = RegistryExport(
        format=FORMAT, schema_version=SCHEMA_VERSION, exported=now, verdicts=[], measurements=[],
        environments=[dict(fingerprint=env_fp(e), target="cpu", fields={}) for e in range(envs)],
        candidates=[dict(identity="lab_kernel@1", name="lab_kernel", target="cpu", op="matmul", tier="EMITTED")],
        solutions=[dict(key=key(i), env=env_fp(e), candidate="lab_kernel", identity="lab_kernel@1",
                        params={"tile": 8 << (i % 4)}, policy="measured", margin=0.2, note="", created=now)
                   for e in range(envs) for i in range(per_env)])
    st = SqlStore(url)
    added = import_registry(st, data)["added"]["solutions"]
    st.close()
    assert added == envs * per_env, added
    return time.perf_counter() - started


def load_once(url: str, env: str, per_env: int) -> None:
    """In a new process: open, install every solution of ``env``, print the seconds it took."""
    from arbiter.store.sql import SqlStore

    started = time.perf_counter()
    st = SqlStore(url)
    opened = time.perf_counter()
    st.load_solution(key(0), env)  # the environment's bulk load
    loaded = time.perf_counter()
    found = sum(st.load_solution(key(i), env) is not None for i in range(per_env))
    done = time.perf_counter()
    assert found == per_env, found
    print(f"{done - started:.6f} {opened - started:.6f} {loaded - opened:.6f} {done - loaded:.6f}")


def claimer(url: str, env: str, barrier, results) -> None:
    from arbiter.store.claims import Claims
    from arbiter.store.sql import SqlStore

    st = SqlStore(url)
    claims = Claims(st, lease_s=60)
    claims.renew("-", env)  # connect before the start
    barrier.wait()
    started, n = time.time(), 0
    while True:
        k = claims.claim(env)
        if k is None:
            break
        with st.transaction():
            claims.finish(k, env)
        n += 1
    results.put((os.getpid(), n, started, time.time()))


def claims_figure(url: str, tuners: int, keys: int) -> dict:
    from arbiter.store.claims import Claims, counts
    from arbiter.store.sql import SqlStore

    env = env_fp(99)
    st = SqlStore(url)
    # keys of their own (an attribute the solution keys lack), so that none is done already
    Claims(st).offer([key(i).replace(":-:", ":claimable=1:") for i in range(keys)], env)
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(tuners), ctx.Queue()
    procs = [ctx.Process(target=claimer, args=(url, env, barrier, results)) for _ in range(tuners)]
    for p in procs:
        p.start()
    got = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    total = sum(n for _, n, _, _ in got)
    wall = max(end for *_, end in got) - min(start for _, _, start, _ in got)
    states = counts(st, env)
    st.close()
    # every key done, and as many claims as keys: no key was claimed twice (nor one left)
    assert total == keys and states == {"done": keys}, (total, states)
    return {"tuners": tuners, "claims": total, "wall_s": wall, "per_s": total / wall,
            "per_tuner": sorted(n for _, n, _, _ in got)}


def fresh_pg() -> tuple[str, object]:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    admin = os.environ.get("ARBITER_TEST_PG")
    if not admin:
        sys.exit("set ARBITER_TEST_PG (e.g. $(bash .ci/postgres.sh)) or give --url")
    name = f"arbiter_bench_{uuid.uuid4().hex[:10]}"
    engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))

    def drop():
        with engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        engine.dispose()

    return make_url(admin).set(database=name).render_as_string(hide_password=False), drop


def load_figure(url: str, envs: int, per_env: int, reps: int) -> list[str]:
    lines = [f"fill: {envs} environments x {per_env:,} solutions = {envs * per_env:,} in "
             f"{fill(url, envs, per_env):.1f} s"]
    print(lines[-1], flush=True)
    times = []
    for rep in range(reps):
        out = subprocess.run([sys.executable, __file__, "--load-only", url, env_fp(rep % envs), str(per_env)],
                             capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        times.append([float(x) for x in out.stdout.strip().splitlines()[-1].split()])
    med = [statistics.median(t[i] for t in times) * 1e3 for i in range(4)]
    lines.append(f"start-up load of one environment's {per_env:,} (of {envs * per_env:,}): median {med[0]:.0f} ms "
                 f"(open and schema check {med[1]:.0f}, bulk load {med[2]:.0f}, {per_env:,} lookups {med[3]:.0f}), "
                 f"min {min(t[0] for t in times) * 1e3:.0f}, max {max(t[0] for t in times) * 1e3:.0f} over {reps} "
                 f"fresh processes (goal < 300 ms)")
    print(lines[-1], flush=True)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 x 500 solutions, 2 processes, 2 tuners, 100 keys")
    ap.add_argument("--url", help="registry URL or SQLite path (default: a fresh database on $ARBITER_TEST_PG)")
    ap.add_argument("--tuners", type=int, help="claiming processes (default 16; 2 with --quick)")
    ap.add_argument("--keys", type=int, help="keys offered for claiming (default 4,000; 100 with --quick)")
    ap.add_argument("--claims-only", action="store_true", help="only the claim figure")
    ap.add_argument("--out", help="also write the figures to DIR/fleet_scale.md")
    ap.add_argument("--load-only", nargs=3, metavar=("URL", "ENV", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.load_only:
        url, env, n = args.load_only
        load_once(url, env, int(n))
        return
    envs, per_env, reps, tuners, keys = (2, 500, 2, 2, 100) if args.quick else (10, 10_000, 5, 16, 4_000)
    tuners, keys = args.tuners or tuners, args.keys or keys
    url, drop = (args.url, lambda: None) if args.url else fresh_pg()
    try:
        from arbiter.store.sql import SqlStore

        # Closed at once: a second SqlStore opened on a SQLite file while this one is live drops this process's
        # locks on it (its header check opens and closes the file), and other processes' commits can be lost.
        probe = SqlStore(url)
        shown = probe.where
        probe.close()
        lines = [f"registry {shown}; {os.cpu_count()} CPUs; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
                 f"{'; --quick' if args.quick else ''}"]
        print(lines[-1], flush=True)
        if not args.claims_only:
            lines += load_figure(url, envs, per_env, reps)
        c = claims_figure(url, tuners, keys)
        lines.append(f"claims: {c['claims']:,} keys by {c['tuners']} concurrent tuners on empty work in "
                     f"{c['wall_s']:.1f} s = {c['per_s']:.0f} claims/s (each claim + its done mark one transaction "
                     f"each); per tuner {c['per_tuner'][0]}..{c['per_tuner'][-1]}; every key claimed exactly once")
        print(lines[-1], flush=True)
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            (Path(args.out) / "fleet_scale.md").write_text("\n".join(f"- {line}" for line in lines) + "\n")
    finally:
        drop()


if __name__ == "__main__":
    main()
