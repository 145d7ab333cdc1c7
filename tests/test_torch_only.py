"""Where CuPy is absent, PyTorch alone serves the nvidia target (issue 16: "torch candidates available on the
GPU without CuPy"). Each check runs in a fresh process in which ``import cupy`` fails, as on a machine where
it was never installed; the H200 has CuPy, so this is how that machine is reproduced there."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device for torch")]

ROOT = Path(__file__).resolve().parent.parent
NO_CUPY = "import sys\nfor _m in ('cupy', 'cupyx', 'cupy_backends'):\n    sys.modules[_m] = None\n"


def run_without_cupy(code: str, tmp_path, *argv) -> subprocess.CompletedProcess:
    env = dict(os.environ, ARBITER_DB=str(tmp_path / "registry.db"), PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", NO_CUPY + code, *argv], env=env, capture_output=True, text=True,
                          timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_the_target_runs_on_torch_and_only_torch_candidates_are_available(tmp_path):
    done = run_without_cupy(r"""
import json, torch
from arbiter import targets
from arbiter.candidates import REGISTRY
t = targets.get("nvidia")
rows = {c.name: c.available() for c in REGISTRY.all() if c.target == "nvidia"}
print(json.dumps({"available": t.available(), "arrays": t.arrays, "env": t.environment(), "rows": rows}))
""", tmp_path)
    got = json.loads(done.stdout.splitlines()[-1])
    assert got["available"] is True and got["arrays"] == "torch"
    assert got["env"]["arrays"] == "torch" and got["env"]["cupy"] == "absent" and got["env"]["device"]
    torch_names = {n for n in got["rows"] if n.startswith("torch_")}
    assert {"torch_matmul", "torch_softmax", "torch_rmsnorm", "torch_layernorm", "torch_attention", "torch_gated",
            "torch_fft", "torch_pointwise"} <= torch_names
    for name, ok in got["rows"].items():
        if name in torch_names:
            assert ok is True, (name, ok)
        else:
            assert ok is not True and "needs CuPy" in ok, (name, ok)


def test_every_op_kind_is_gated_tuned_and_served_on_torch_tensors(tmp_path):
    """Under policy tune each key's torch solutions are gated (probes and poisoned outputs are torch tensors);
    results are torch tensors that match the reference; the timer is torch's events in every mode."""
    done = run_without_cupy(r"""
import json, sys, torch
sys.path.insert(0, "tests")
import arbiter, arbiter.torch as at
from test_torch import cases
arbiter.configure(policy="tune")
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    for op, args in cases("cuda", dtype):
        if op == "fft" and dtype != torch.float32:
            continue  # fft takes float32/64 and complex
        y = getattr(at, op)(*args)
        ref = at.REFERENCE[op](*args)
        assert isinstance(y, torch.Tensor) and y.device.type == "cuda" and y.dtype == ref.dtype, (op, y)
        tol = 1e-3 if dtype == torch.float32 else 3e-2
        torch.testing.assert_close(y, ref, rtol=tol, atol=tol)
from arbiter import regions, timing
from arbiter.candidates import REGISTRY
region = regions.Softmax(torch.randn(4096, 1000, device="cuda"), -1)
timed = {mode: timing.measure(REGISTRY.get("torch_softmax", "nvidia", "softmax"), {}, region, mode=mode).median_s
         for mode in timing.MODES}
assert all(0 < s < 0.01 for s in timed.values()), timed
print(json.dumps([(r["op"], r["solution"], r["policy"]) for r in arbiter.stats()]))
""", tmp_path)
    served = json.loads(done.stdout.splitlines()[-1])
    assert {op for op, _, _ in served} == {"matmul", "softmax", "rmsnorm", "layernorm", "attention", "gated",
                                          "fft", "pointwise"}
    assert all(solution.startswith("torch_") for _, solution, _ in served), served


def test_the_torch_example_compiles_and_runs_on_cuda_without_cupy(tmp_path):
    done = run_without_cupy("import runpy\nrunpy.run_path('examples/torch_module.py', run_name='__main__')",
                            tmp_path, "--device", "cuda")
    assert "rows sum to 1: True" in done.stdout
    for op in ("rmsnorm", "gated", "matmul", "softmax"):
        assert f"{op} " in done.stdout and "hits 9 misses 1" in done.stdout
