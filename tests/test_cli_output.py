"""What a user sees from the CLI, run as a user runs it: a real process, stdout and stderr piped (no
terminal), at ``COLUMNS=80`` unless said otherwise, on real registry files. Where a test needs no plug-in and
what a process does on start is not its point, the command runs in this process (Typer's ``CliRunner``, output
captured the same way, no terminal): ``cli``; every command still runs as a real process here at least once.

Covers: ``--db`` before or after the command; square brackets and Rich closing tags in keys, names,
reasons and errors printed as they are in every command; tables that never cut a word; notes that say who
is faster and why a solution was timed alone; progress lines in a log; one-line errors for targets that
are not available here.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import traceback
from pathlib import Path

import pytest
from typer.testing import CliRunner

from arbiter.candidates import REGISTRY

ROOT = Path(__file__).resolve().parent.parent
FFT_R2C = ["--op", "fft", "--shape", "8x1000", "--dtype", "float64", "--attr", "kind=r2c"]
FFT_KEY = "cpu:fft:float64:R:kind=r2c,inverse=0:batch8,n1000"
POINTWISE_KEY = "cpu:pointwise:float32:RR:chain=mul[t]>add[s]>relu>tanh:size131072"


def _env(columns: str | None = "80", plugins: tuple[str, ...] = (), **extra) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               **extra)
    env.pop("ARBITER_PLUGINS", None)
    env.pop("COLUMNS", None)
    if columns is not None:
        env["COLUMNS"] = columns
    if plugins:
        env["ARBITER_PLUGINS"] = ",".join(f"tests.{p}" for p in plugins)
    return env


def arbiter(*args, columns: str | None = "80", plugins: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """``arbiter ARGS`` in a new process, output piped."""
    return subprocess.run([sys.executable, "-m", "arbiter", *map(str, args)], capture_output=True, text=True,
                          timeout=600, env=_env(columns, plugins), cwd=ROOT)


def cli(*args, columns: str | None = "80") -> subprocess.CompletedProcess:
    """``arbiter ARGS`` in this process (Typer's ``CliRunner``), output captured (no terminal), no plug-ins; an
    exception that escapes the command is in ``stderr`` as a traceback, as a process would print it."""
    from arbiter.cli import app

    done = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": columns, "ARBITER_PLUGINS": None})
    err = done.stderr
    if done.exception is not None and not isinstance(done.exception, SystemExit):
        err += "".join(traceback.format_exception(done.exception))
    return subprocess.CompletedProcess(["arbiter", *map(str, args)], done.exit_code, done.stdout, err)


def ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    return done.stdout


def words(text: str) -> list[str]:
    return text.split()


def joined(text: str) -> str:
    """The text with its line breaks undone: what a sentence says regardless of where it wrapped."""
    return " ".join(text.split())


DISPATCH = textwrap.dedent("""
    import arbiter
    from arbiter.suite import Problem, suite
    fft = Problem("fft", {"batch": 8, "n": 1000}, "float64", {"kind": "r2c"})
    [pointwise] = [p for p in suite("quick") if p.op == "pointwise"]
    for p in (fft, pointwise):
        arbiter.run_arbitrated(p.op, p.region("cpu"))
    arbiter.flush()
""")


def dispatched(db: Path, plugins: tuple[str, ...] = ()) -> Path:
    """A registry written by a user's program: the fft r2c key and the quick suite's pointwise key."""
    done = subprocess.run([sys.executable, "-c", DISPATCH], capture_output=True, text=True, timeout=600,
                          env=_env(plugins=plugins, ARBITER_DB=str(db)), cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return db


# --- 16.2: --db before or after the command ------------------------------------------------------------------
def test_db_is_taken_after_the_command_as_well_as_before(tmp_path):
    db = tmp_path / "t.db"
    out = ok(arbiter("tune", "--db", db, *FFT_R2C))  # failed before with "No such option: --db"
    assert "AUTOTUNE fft 8x1000 float64 [kind=r2c]" in out.splitlines() and db.exists()
    before = json.loads(ok(arbiter("--db", db, "stats", "--json")))
    after = json.loads(ok(cli("stats", "--json", "--db", db)))
    assert [s["key"] for s in before["solutions"]] == [s["key"] for s in after["solutions"]] == [FFT_KEY]
    other = tmp_path / "other.db"
    both = json.loads(ok(cli("--db", other, "stats", "--json", "--db", db)))
    assert [s["key"] for s in both["solutions"]] == [FFT_KEY] and not other.exists()  # the one after wins


def test_every_command_lists_db_in_its_help():
    from arbiter.cli import app

    runner = CliRunner()
    import typer

    names = typer.main.get_command(app).list_commands(None)
    assert {"run", "tune", "explain", "stats", "env", "list", "prune", "doctor", "export", "import",
            "report"} <= set(names)
    for name in names:
        result = runner.invoke(app, [name, "--help"], env={"COLUMNS": "80"})
        assert result.exit_code == 0 and "--db" in result.output, name


# --- 16.3 and 20.12: brackets and closing tags, printed as they are -------------------------------------------
def test_stats_prints_keys_and_names_with_brackets_whole(tmp_path):
    db = dispatched(tmp_path / "r.db", plugins=("plugin_brackets",))
    out = ok(arbiter("--db", db, "stats"))  # a MarkupError traceback before: the winner is named fft[/x]
    lines = out.splitlines()
    assert POINTWISE_KEY in lines and FFT_KEY in lines  # each key whole, on a line of its own
    assert lines[lines.index(FFT_KEY) + 1].startswith("    winner fft[/x] · policy tier · tier HAND_TUNED")
    assert lines[lines.index(POINTWISE_KEY) + 1].startswith("    winner numpy_pointwise · policy tier")
    assert all(len(line) <= 80 for line in lines)
    wide = ok(arbiter("--db", db, "stats", columns="200"))  # a table: the key keeps its brackets there too
    assert "chain=mul[t]>add[s]>relu>tanh" in wide and "│ fft[/x]" in wide


def test_explain_prints_names_reasons_and_errors_with_brackets(tmp_path):
    db = dispatched(tmp_path / "r.db", plugins=("plugin_brackets",))
    out = ok(arbiter("--db", db, "explain", *FFT_R2C, plugins=("plugin_brackets", "plugin_failing")))
    lines = out.splitlines()
    assert lines[:2] == ["EXPLAIN fft 8x1000 float64 [kind=r2c]  [cpu:fft:float64:R:kind=r2c,inverse=0:",
                         "batch8,n1000]"]
    assert re.fullmatch(r"    tier HAND_TUNED · status passed · reason / rel error \S+ · WINNER",
                        lines[lines.index("fft[/x]") + 1])
    failing = lines.index("raises[/x]")
    assert lines[failing + 1] == "    tier EMITTED · status failed"
    assert re.fullmatch(r"    reason / rel error at \S+: raised ValueError: boom \[/y\]", lines[failing + 2])
    assert "stored solution fft[/x]: policy tier" in lines

    bad = cli("--db", db, "explain", "--op", "[/x]", "--shape", "1x1")  # a MarkupError traceback before
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    [line] = bad.stdout.splitlines()
    assert line.startswith("error: --op: unknown op '[/x]'; known: add_rmsnorm, attention, fft, ")


def test_import_conflicts_print_names_with_brackets(tmp_path):
    mine = dispatched(tmp_path / "mine.db")  # scipy_fft decided the fft key here
    theirs = dispatched(tmp_path / "theirs.db", plugins=("plugin_brackets",))  # fft[/x] decided it there
    export = tmp_path / "theirs.json"
    ok(arbiter("--db", theirs, "export", export))
    out = ok(cli("import", "--db", mine, export))  # a MarkupError traceback before
    conflicts = [line for line in out.splitlines() if line.startswith("conflict: ")]
    assert any(f"solution {FFT_KEY}" in c and "('scipy_fft', {})" in c and "('fft[/x]', {})" in c
               for c in conflicts), out


def test_list_env_and_help_keep_their_brackets():
    out = ok(arbiter("list", plugins=("plugin_brackets",)))
    lines = out.splitlines()
    assert lines[lines.index("cpu softmax needs[extra]") + 1] == \
        "    tier EMITTED · available no · reason install example-package[extra] [/x]"
    from arbiter import targets

    reason = targets.get("nvidia").available()
    if reason is not True and "kernel-arbiter[nvidia]" in reason:  # CuPy missing: the hint names the extra
        assert "install kernel-arbiter[nvidia]" in joined(out)
        assert "install kernel-arbiter[nvidia]" in ok(cli("env", "--target", "nvidia"))
    helped = ok(cli("tune", "--help"))
    assert "chain=mul[t]>relu, ...)." in helped and "[default: no-residual]" in joined(helped)
    assert all(len(line) <= 80 for line in helped.splitlines())


# --- 16.6: readable at 80 columns and in a log ----------------------------------------------------------------
def test_tune_at_80_columns_keeps_every_word_and_says_why_one_solution_was_timed_alone(tmp_path):
    out = ok(arbiter("--db", tmp_path / "r.db", "tune", *FFT_R2C,
                     plugins=("plugin_failing", "plugin_numpy_fft_absent")))
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines)
    for word in ("HAND_TUNED", "EMITTED", "scipy_fft", "numba_stockham_fft", "raises[/x]", "WINNER"):
        assert word in words(out)  # never "HAND_T" / "UNED"
    text = joined(out)
    # the whole reason, not its first 60 characters
    assert ("verdict does not apply: n=1000 is not a power of two; this radix-2 kernel needs one (the vendor "
            "FFT takes any n)") in text
    assert "verdict at 8x1000: raised ValueError: boom [/y]" in text or "raised ValueError: boom [/y]" in text
    # excluded and failed are not the same, and the note says which
    assert ("policy tier: no other solution to time: 2 excluded (unavailable or not applicable), "
            "1 failed the gate") in text


def test_tune_note_says_who_is_faster_and_whether_it_is_separated(tmp_path):
    out = ok(arbiter("--db", tmp_path / "r.db", "tune", *FFT_R2C,
                     plugins=("plugin_brackets", "plugin_numpy_fft_absent")))  # two solutions timed
    note = re.search(r"policy (tier|measured): (\S+) is (\d+\.\d\d)x faster than (\S+)"
                     r"(, but not separated: spread (\d+\.\d)%| \(spread (\d+\.\d)%\))", joined(out))
    assert note, out
    assert {note.group(2), note.group(4)} == {"fft[/x]", "scipy_fft"}
    assert (note.group(1) == "tier") == note.group(5).startswith(", but not separated")


def test_piped_output_follows_columns_and_is_wide_without_it(tmp_path):
    db = dispatched(tmp_path / "r.db")
    narrow = ok(cli("--db", db, "stats", columns="100")).splitlines()
    assert max(map(len, narrow)) <= 100
    wide = ok(arbiter("--db", db, "stats", columns=None)).splitlines()  # no terminal, no COLUMNS: a log
    assert max(map(len, wide)) > 100 and any(line.startswith("┏") for line in wide)
    assert all(len(line) <= 160 for line in wide)


# --- 16.8: progress in a log ------------------------------------------------------------------------------------
def test_tune_without_a_terminal_prints_a_line_per_key_and_per_slow_solution(tmp_path):
    done = arbiter("--db", tmp_path / "r.db", "tune", *FFT_R2C, plugins=("plugin_sleepy",))
    ok(done)
    steps = [re.sub(r"^\[\s*\d+\.\d+s\] ", "", line) for line in done.stderr.splitlines()]
    n = 1 + sum(len(c.param_space()) for c in REGISTRY.candidates("cpu", "fft"))  # the built-ins and sleepy_fft
    assert steps[0] == f"key 1/1 fft 8x1000 float64 [kind=r2c]: gating and timing {n} solution(s)"
    assert any(re.fullmatch(r"  gate sleepy_fft: \d+\.\d s", s) for s in steps), steps
    assert re.fullmatch(r"key 1/1 fft 8x1000 float64 \[kind=r2c\]: \S+ \(policy .+\) in \d+\.\d s", steps[-1])


# --- 20.14: an unavailable target is one line naming the gate, exit code 2 ------------------------------------
@pytest.mark.parametrize("args", [
    ("run", "--target", "rocm"), ("run", "--target", "nvidia"),
    ("explain", "--target", "nvidia", "--op", "matmul", "--shape", "4x4x4"),
    ("explain", "--target", "rocm", "--op", "matmul", "--shape", "4x4x4"),
    ("tune", "--target", "rocm", "--op", "matmul", "--shape", "4x4x4"),
    ("tune", "--target", "nvidia", "--op", "matmul", "--shape", "4x4x4"),
])
def test_an_unavailable_target_is_one_line_naming_the_failed_gate(tmp_path, args):
    from arbiter import targets

    name = args[args.index("--target") + 1]
    reason = targets.get(name).available()
    if reason is True:
        pytest.skip(f"{name} is available here")
    done = (arbiter if args[:3] == ("run", "--target", "rocm") else cli)("--db", tmp_path / "r.db", *args)  # 1 process
    assert done.returncode == 2 and "Traceback" not in done.stdout + done.stderr
    assert done.stdout.splitlines() == [f"error: target {name} is unavailable: {' '.join(reason.split())}"]
    gates = {"nvidia": ("CuPy does not import", "no CUDA device", "NVRTC"),
             "rocm": ("hip-python does not import", "no HIP runtime", "hiprtc", "no AMD GPU")}[name]
    assert any(g in reason for g in gates), reason  # which gate failed first, in the target's words
