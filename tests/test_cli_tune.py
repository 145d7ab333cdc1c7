"""arbiter tune / explain in real processes on a real registry file; a new process serves the stored solution."""
import json
import os
import subprocess
import sys
import textwrap


def cli(db, *args, check=True):
    done = subprocess.run([sys.executable, "-m", "arbiter", "--db", str(db), *args], capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, COLUMNS="200"))
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_tune_then_a_new_process_hits_the_stored_solution(tmp_path):
    db = tmp_path / "registry.db"
    out = cli(db, "tune", "--op", "rmsnorm", "--shape", "512x1024", "--budget-seconds", "20").stdout
    assert "AUTOTUNE rmsnorm 512x1024 float32" in out and "WINNER" in out
    [stored] = json.loads(cli(db, "stats", "--json").stdout)["solutions"]
    assert stored["hits"] == 0  # tuned, never dispatched: visible as such

    script = textwrap.dedent("""
        import numpy as np, arbiter
        from arbiter import dispatch
        from arbiter.regions import RMSNorm
        x = np.random.default_rng(0).standard_normal((500, 1000)).astype(np.float32)   # same bucket
        r = RMSNorm(x, np.ones(1000, np.float32))
        for _ in range(5):
            arbiter.run_arbitrated("rmsnorm", r, policy="strict")   # strict: only a stored solution may serve
        route = dispatch.route(r.key.id)
        print(route.label, route.chosen_by, dispatch.verified_count())
        arbiter.flush()
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, ARBITER_DB=str(db)))
    assert done.returncode == 0, done.stderr
    label, policy, verified = done.stdout.split()
    assert label.startswith(stored["winner"]) and policy == stored["policy"]
    assert verified == "0"  # verdicts were persisted by the tuning process
    [after] = json.loads(cli(db, "stats", "--json").stdout)["solutions"]
    assert (after["hits"], after["loads"], after["misses"], after["fallbacks"]) == (4, 1, 0, 0)  # a load, no miss

    again = cli(db, "tune", "--op", "rmsnorm", "--shape", "512x1024").stdout
    assert "skip rmsnorm 512x1024 float32: tuned already" in again  # resumable: nothing measured twice

    explained = json.loads(cli(db, "explain", "--op", "rmsnorm", "--shape", "512x1024", "--json").stdout)
    winners = [r for r in explained["rows"] if r["winner"]]
    assert len(winners) == 1 and winners[0]["device_us"] > 0
    assert explained["why"].startswith("stored solution " + stored["winner"])


def test_tune_rejects_bad_shapes_by_name(tmp_path):
    done = cli(tmp_path / "r.db", "tune", "--op", "matmul", "--shape", "12x12", check=False)
    assert done.returncode != 0 and "--shape" in done.stdout + done.stderr
    done = cli(tmp_path / "r.db", "tune", "--op", "conv", "--shape", "1x2", check=False)
    assert done.returncode != 0 and "op" in (done.stdout + done.stderr)


def test_dry_run_lists_and_tunes_nothing(tmp_path):
    out = cli(tmp_path / "r.db", "tune", "--suite", "quick", "--dry-run").stdout
    from arbiter.suite import suite

    assert out.count("would tune") == len(suite("quick"))
    assert json.loads(cli(tmp_path / "r.db", "stats", "--json").stdout)["solutions"] == []
