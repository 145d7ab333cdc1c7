"""Every benchmark's --quick mode runs end to end in CI, so none can rot: each script in benchmarks/ is run as a
subprocess with a temporary registry, must exit 0 and write its table to --out DIR. The GPU ones, without a GPU,
say "skipped", exit 0 and write nothing; with one they run their smallest configurations."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_support import gpu_available

ROOT = Path(__file__).resolve().parents[1]

# script: (extra arguments beyond --quick --out DIR, the table it writes there, needs a GPU); "{tmp}" is the test's
# temporary folder. fleet_scale defaults to a fresh PostgreSQL database: here a SQLite file keeps it self-contained.
BENCHMARKS = {
    "attention_tc.py": ([], "attention_tc.md", True),
    "audit_catch.py": ([], "audit_catch.md", False),
    "audit_overhead.py": ([], "audit_overhead.md", False),
    "cpu_ops_suite.py": ([], "cpu_ops.md", False),
    "cpu_peers.py": ([], "cpu_peers.md", False),
    "cpu_suite.py": ([], "cpu_crossovers.md", False),
    "dispatch_overhead.py": ([], "dispatch_overhead.md", False),
    "epilogue.py": ([], "epilogue.md", True),
    "fft_peers.py": ([], "fft_peers.md", True),
    "fleet_scale.py": (["--url", "{tmp}/fleet.db"], "fleet_scale.md", False),
    "gate_classes.py": ([], "gate_classes.md", False),
    "gate_cost.py": ([], "gate_cost.md", False),
    "gemm_tc.py": ([], "gemm_tc.md", True),
    "gpu_ops_suite.py": ([], "gpu_ops_suite.md", True),
    "gpu_suite.py": ([], "gpu_suite.md", True),
    "host_profile.py": ([], "host_profile.md", True),
    "isolate_warm.py": ([], "isolate_warm.md", False),
    "model_block.py": ([], "model_block.md", True),
    "registry_load.py": ([], "registry_load.md", False),
    "registry_stress.py": (["--db", "sqlite"], "registry_stress.md", False),
    "rows_tc.py": ([], "rows_tc.md", True),
    "torch_cpu.py": ([], "torch_cpu.md", False),
    "fused_cpu.py": ([], "fused_cpu.md", False),
    "thin_path.py": ([], "thin_path.md", False),
    "thread_stalls.py": ([], "thread_stalls.md", False),
    "timing_audit.py": ([], "timing_audit.md", False),
    "torch_model.py": ([], "torch_model.md", False),
    "tune_cost.py": ([], "tune_cost.md", False),
    "tune_stability.py": ([], "tune_stability.md", False),
    "user_path.py": ([], "user_path.md", True),
    "walk.py": ([], "walk.md", False),
}


def test_every_benchmark_has_a_smoke_run():
    # _*.py: what the scripts share (_gpu.py), not a benchmark
    assert sorted(p.name for p in (ROOT / "benchmarks").glob("[!_]*.py")) == sorted(BENCHMARKS)


# The --quick runs that take minutes on the 2-core box (at load 7: cpu_ops_suite 247 s, registry_stress 62 s,
# torch_cpu 55 s) are `slow`: `.ci/run`'s last step (pytest -m slow) runs them alone. The others (a fresh process
# each, 4-58 s) are `heavy`: `.ci/run`'s second step runs them on four workers (issue 41 item 4).
SLOW = {"cpu_ops_suite.py", "registry_stress.py", "torch_cpu.py"}


@pytest.mark.parametrize("script", [pytest.param(s, marks=pytest.mark.slow if s in SLOW else pytest.mark.heavy)
                                    for s in sorted(BENCHMARKS)])
def test_quick_mode_runs_or_skips_cleanly(tmp_path, script):
    extra, table, needs_gpu = BENCHMARKS[script]
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--quick", "--out", str(out),
                          *(a.format(tmp=tmp_path) for a in extra)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=900,
                         env={**os.environ, "ARBITER_DB": str(tmp_path / "registry.db"),
                              "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))})
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    if needs_gpu and not gpu_available():
        assert "skipped" in run.stdout and not (out / table).exists()
    else:
        assert (out / table).read_text().strip()


def test_the_gpu_session_script_parses_and_refuses_an_unknown_step(tmp_path):
    """``benchmarks/gpu_session.sh``: the device session's steps (run on the H200 only; here its syntax and its
    refusal of a step it does not know, before anything runs)."""
    script = ROOT / "benchmarks" / "gpu_session.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    done = subprocess.run(["bash", str(script), "no-such-step"], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path), "HOME": str(tmp_path)})
    assert done.returncode == 2 and "unknown step: no-such-step" in done.stdout
