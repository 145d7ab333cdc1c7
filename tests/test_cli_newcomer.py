"""A newcomer's mistakes get a one-line answer, and nothing tuned is silently thrown away (issue 42): each item run
through the real CLI, in a new process, at 80 columns."""
from __future__ import annotations

import subprocess
import sys

from arbiter.candidates import REGISTRY
from arbiter.cli.run import _margin
from arbiter.env import environment
from arbiter.solution import ChosenBy, Solution, TimingMode
from arbiter.store import MeasurementRecord, MemoryStore, SolutionRecord
from test_cli_conventions import _on_a_terminal
from test_cli_output import ROOT, _env, arbiter, joined, ok


def _one_line_error(done: subprocess.CompletedProcess, rc: int) -> str:
    """The single ``error:`` line of a refused command (no traceback, no usage block), which exited ``rc``."""
    said = done.stdout + done.stderr
    assert done.returncode == rc, said
    assert "Traceback" not in said and "Usage:" not in said, said
    [line] = [line for line in said.splitlines() if line.strip()]
    return line


def test_a_misspelt_dtype_is_named_with_the_closest_one(tmp_path):
    for command in ("tune", "explain"):
        line = _one_line_error(arbiter("--db", tmp_path / "r.db", command, "--op", "matmul", "--shape", "64x64x64",
                                       "--dtype", "flaot32"), 2)
        assert line == ("error: --dtype: unknown dtype 'flaot32' (did you mean 'float32'?); matmul takes bfloat16, "
                        "float16, float32, float64"), line
    assert not (tmp_path / "r.db").exists()  # refused before the registry was opened


def test_a_command_that_writes_the_registry_refuses_to_run_into_memory(tmp_path):
    missing = tmp_path / "nodir" / "x.db"
    for args in (["tune", "--op", "softmax", "--shape", "64x1000"], ["run"]):
        line = _one_line_error(arbiter("--db", missing, *args), 1)
        assert line.startswith(f"error: {missing}: cannot be written: its folder {missing.parent} does not exist")
        assert "Nothing was written" in line and "--db :memory:" in line
    assert not missing.parent.exists()
    # asked for: memory, and said so at the end
    out = joined(ok(arbiter("--db", ":memory:", "tune", "--op", "softmax", "--shape", "4x8")))
    assert "registry: <MemoryStore: this process only, not persisted>" in out
    assert not (ROOT / ":memory:").exists()


def test_explain_of_a_key_copied_without_a_dimension_names_it(tmp_path):
    line = _one_line_error(arbiter("--db", tmp_path / "r.db", "explain", "cpu:softmax:float32:R:axis=last:rows64"), 2)
    assert "a softmax key's bucket names rows, cols (like rows64,cols64); cols missing" in line, line


def test_options_an_op_would_ignore_are_refused(tmp_path):
    db = tmp_path / "r.db"
    line = _one_line_error(arbiter("--db", db, "tune", "--op", "matmul", "--shape", "8x8x8", "--attr", "causal=1"), 2)
    assert line == "error: --attr: unknown attribute 'causal'; matmul takes accuracy, activation, bias, residual"
    line = _one_line_error(arbiter("--db", db, "tune", "--op", "matmul", "--shape", "0x4x4"), 2)
    assert line == "error: --shape: matmul takes 3 sizes of at least 1 (mxnxk), got '0x4x4'"
    line = _one_line_error(arbiter("--db", db, "tune", "--op", "softmax", "--shape", "4x8", "--bias"), 2)
    assert line == "error: --bias: is matmul's epilogue; softmax has none"
    line = _one_line_error(arbiter("--db", db, "tune", "--op", "sofmax", "--shape", "4x8"), 2)
    assert line.startswith("error: --op: unknown op 'sofmax' (did you mean 'softmax'?); known: "
                           "add_rmsnorm, attention, ")
    assert not db.exists()


def test_explain_prints_a_reason_shared_by_parameter_sets_once(tmp_path):
    out = joined(ok(arbiter("--db", tmp_path / "r.db", "explain", "--op", "matmul", "--shape", "64x64x64")))
    assert "numba_gemv (3 parameter sets)" in out
    assert out.count("GEMV needs M == 1 or N == 1") == 1, out


def test_a_tier_default_kept_within_the_noise_shows_no_contradicting_ratio():
    st, env = MemoryStore(), environment("cpu")
    key = "cpu:softmax:float32:R:axis=last:rows64,cols1024"
    me, rival = (Solution.of(REGISTRY.get(name, "cpu", "softmax"), {}) for name in ("numpy_softmax", "torch_softmax"))

    def timing(solution, median):
        return MeasurementRecord(solution.candidate_name, solution.params, TimingMode.DEVICE, median, median * 0.5,
                                 median * 1.5, 0.99, 20, 0.0, False, {"rows": 64, "cols": 1024})

    st.save_measurements(key, env.fingerprint, [timing(me, 92e-3), timing(rival, 1e-3)])
    record = SolutionRecord.of(key, me, ChosenBy.TIER, env.fingerprint, margin=0.02,
                               note="torch_softmax is 1.02x faster than numpy_softmax, but not separated: spread 99%")
    margin, over = _margin(record, st, key, env, me)
    assert (margin, over) == ("within noise ±99%", "torch_softmax")  # before: "92.00x slower ±99%", kept anyway


def test_the_tune_bar_says_which_phase_a_key_is_in(tmp_path):
    text = _on_a_terminal(["--db", tmp_path / "r.db", "tune", "--op", "softmax", "--shape", "64x1000"],
                          tmp_path).decode(errors="replace")
    # before: one count of every solution, advanced only by timed ones, standing at "8/15" while the rounds ran
    # the bar redraws a few times a second: a short timing phase may pass between two frames, "deciding" not
    assert "gating" in text and ("timing" in text or "deciding" in text), text[-2000:]


def test_verbose_decisions_print_once_beside_the_programs_logging(tmp_path):
    code = ("import logging, numpy as np\nlogging.basicConfig()\nimport arbiter\nfrom arbiter import regions\n"
            "arbiter.run_arbitrated('softmax', regions.Softmax(np.ones((4, 8), np.float32)), policy='tier')\n")
    for basic in (True, False):
        done = subprocess.run([sys.executable, "-c", code if basic else code.replace("logging.basicConfig()", "")],
                              capture_output=True, text=True, timeout=600, cwd=ROOT,
                              env=_env(ARBITER_DB=str(tmp_path / f"{basic}.db"), ARBITER_VERBOSE="1"))
        assert done.returncode == 0, done.stderr
        assert done.stderr.count("cpu:softmax:float32:R:axis=last:rows4,cols8 -> ") == 1, done.stderr
