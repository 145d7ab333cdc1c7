"""Messages and exit statuses that must name the cause (issue 40 item 10): ``ARBITER_GATE_SEED=abc`` (before:
"invalid literal for int() with base 10: 'abc'", the variable unnamed) and a ``tune`` in which every key failed
(before: exit 0). Real ``arbiter`` processes."""
from __future__ import annotations

from tests.test_cli_output import FFT_R2C, arbiter, ok


def test_a_tune_in_which_every_key_failed_exits_1(tmp_path):
    done = arbiter("--db", ":memory:", "tune", *FFT_R2C,
                   plugins=("plugin_failing", "plugin_numpy_fft_absent", "plugin_fft_all_fail"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "tuned 0 key(s)" in done.stdout, done.stdout


def test_a_tune_that_tuned_its_key_still_exits_0(tmp_path):
    ok(arbiter("--db", ":memory:", "tune", *FFT_R2C, plugins=("plugin_failing",)))


def test_a_gate_seed_that_is_not_a_whole_number_is_named_in_one_error_line(tmp_path):
    import os
    import subprocess
    import sys

    from tests.test_cli_output import ROOT, _env

    done = subprocess.run([sys.executable, "-m", "arbiter", "--db", str(tmp_path / "r.db"), "tune", "--op", "softmax",
                           "--shape", "4x16"], capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**_env(None), "ARBITER_GATE_SEED": "abc"})
    text = done.stdout + done.stderr
    assert "Traceback" not in text and "invalid literal" not in text, text
    assert "ARBITER_GATE_SEED='abc' is not a whole number >= 0" in text, text
    assert done.returncode != 0 or "failed" in text, text
    assert os.environ.get("ARBITER_GATE_SEED") is None
