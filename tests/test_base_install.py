"""The base install (no numba, no SciPy): nothing heavy at import, the candidates that need an extra say
which, and every op is still served (issue 16 item 13). A fresh process where ``import numba`` and
``import scipy`` fail stands in for a venv without the extras (the real venv is measured in the report)."""
import json
import os
import subprocess
import sys

BLOCK = "import sys; sys.modules['numba'] = None; sys.modules['scipy'] = None\n"


def python(code, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARBITER_")}
    env["ARBITER_DB"] = str(tmp_path / "r.db")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)


def test_import_arbiter_loads_no_optional_or_heavy_package(tmp_path):
    out = python("import sys, arbiter; print(sorted(m for m in ('numba', 'scipy', 'torch', 'cupy', 'sqlalchemy', "
                 "'pydantic', 'typer', 'rich', 'llvmlite') if m in sys.modules))", tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_candidates_needing_an_extra_are_unavailable_with_the_install_hint(tmp_path):
    code = BLOCK + ("import sys; from arbiter.cli import main\n"
                    "sys.argv = ['arbiter', 'explain', '--op', 'softmax', '--shape', '8x64', '--json']\nmain()")
    out = python(code, tmp_path)
    assert out.returncode == 0, out.stderr
    rows = {r["solution"].split("{")[0]: r for r in json.loads(out.stdout)["rows"]}
    assert rows["numba_softmax_fused"]["status"] == "excluded"
    assert rows["numba_softmax_fused"]["reason"] == "unavailable: needs numba: pip install 'kernel-arbiter[cpu-jit]'"
    assert rows["numpy_softmax"]["status"] == "passed" and rows["numpy_softmax"]["winner"]
    code = BLOCK + ("from arbiter.candidates import REGISTRY\n"
                    "print(REGISTRY.get('scipy_fft', 'cpu', 'fft').available())\n"
                    "print(REGISTRY.get('synth_pointwise_fused', 'cpu', 'pointwise').available())")
    out = python(code, tmp_path)
    assert out.stdout.splitlines() == ["needs scipy: pip install 'kernel-arbiter[cpu-fft]'",
                                       "needs numba: pip install 'kernel-arbiter[cpu-jit]'"], out.stderr


def test_every_op_is_served_without_the_extras(tmp_path):
    code = BLOCK + """
import numpy as np, arbiter
from arbiter.suite import suite
for i, problem in enumerate(suite("quick")):
    region = problem.region("cpu", seed=i)
    arbiter.run_arbitrated(problem.op, region)  # gated against the float64 oracle (its erf without SciPy)
print(sorted({r["solution"] for r in arbiter.stats()}))
"""
    out = python(code, tmp_path)
    assert out.returncode == 0, out.stderr
    served = eval(out.stdout)
    assert "numpy_fft" in served and "numpy_matmul" in served
    assert not any(s.startswith(("numba", "synth", "scipy")) for s in served)
