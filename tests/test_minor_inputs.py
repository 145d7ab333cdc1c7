"""Small inputs that used to fail late, wrongly or silently: each is refused where it is given, naming it."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

import arbiter
from arbiter import dispatch
from arbiter.candidates import Candidate, Tier
from arbiter.candidates.cpu.numpy_softmax import NumpySoftmax
from arbiter.errors import RegionError, StrictMissError
from arbiter.regions import Attention, LayerNorm, Matmul, RMSNorm, Softmax
from arbiter.store import SolutionRecord
from arbiter.store.sql import SqlStore


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_an_np_matrix_is_refused_naming_the_argument():
    # Before: accepted, then a TypeError at dispatch.
    with pytest.raises(RegionError, match=r"^a: is an np.matrix.*np.asarray\(a\)"):
        Matmul(np.matrix(np.ones((4, 4), np.float32)), np.ones((4, 4), np.float32))
    with pytest.raises(RegionError, match=r"^x: is an np.matrix"):
        Softmax(np.matrix(np.ones((2, 4), np.float32)))


def test_a_masked_array_is_refused_not_its_mask_ignored():
    # Before: the mask was silently ignored (softmax over every value, masked ones included).
    x = np.ma.masked_array(np.ones((2, 4), np.float32), mask=[[0, 1, 0, 0], [0, 0, 0, 0]])
    with pytest.raises(RegionError, match=r"^x: is a masked array, and its mask would be ignored"):
        Softmax(x)
    with pytest.raises(RegionError, match=r"^weight: is a masked array"):
        RMSNorm(np.ones((2, 4), np.float32), np.ma.masked_array(np.ones(4, np.float32)))


def test_a_read_only_out_is_refused_naming_out():
    # Before: "ValueError: output array is read-only" from NumPy, inside a candidate.
    out = np.zeros((2, 4), np.float32)
    out.flags.writeable = False
    with pytest.raises(RegionError, match=r"^out: is read-only"):
        Softmax(np.ones((2, 4), np.float32), out=out)


@pytest.mark.parametrize("region", [
    lambda eps: RMSNorm(np.zeros((2, 4), np.float32), np.ones(4, np.float32), eps=eps),
    lambda eps: LayerNorm(np.zeros((2, 4), np.float32), np.ones(4, np.float32), None, eps=eps),
])
def test_an_eps_that_rounds_to_zero_in_the_dtype_is_refused_and_the_smallest_one_matches_the_oracle(region):
    # Before: eps=1e-300 became 0 in float32; a row of zeros gave 0/0 = NaN where the float64 oracle gives 0.
    with pytest.raises(RegionError, match=r"^eps: 1e-300 rounds to 0 in float32.*use eps >= 1.4e-45"):
        region(1e-300)
    y = arbiter.run_arbitrated(region(1.4e-45).op, region(1.4e-45))  # the smallest float32: computed, 0 like the oracle
    assert np.array_equal(y, np.zeros((2, 4), np.float32))
    x64 = RMSNorm(np.zeros((2, 4)), np.ones(4), eps=1e-300)  # float64 holds 1e-300: accepted
    assert np.array_equal(arbiter.run_arbitrated("rmsnorm", x64), np.zeros((2, 4)))


def test_report_out_naming_a_file_is_one_clear_line(tmp_path, monkeypatch):
    # Before: a FileExistsError traceback.
    _registry(tmp_path, monkeypatch)
    f = tmp_path / "a-file"
    f.write_text("mine")
    result = _cli("report", "--out", str(f))
    assert result.exit_code == 2 and f"--out: {f} is a file, not a folder" in " ".join(result.stdout.split())
    assert "Traceback" not in result.stdout and f.read_text() == "mine"


def test_report_replaces_an_index_html_link_and_never_writes_its_target(tmp_path, monkeypatch):
    # Before: the link was followed and its target overwritten (another user's file, in a shared folder).
    _registry(tmp_path, monkeypatch)
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("do not touch")
    (out / "index.html").symlink_to(victim)
    result = _cli("report", "--out", str(out))
    assert result.exit_code == 0, result.stdout
    assert victim.read_text() == "do not touch"
    page = out / "index.html"
    assert not page.is_symlink() and "kernel-arbiter report" in page.read_text()
    assert oct(page.stat().st_mode & 0o777) == oct(0o666 & ~_umask())
    assert sorted(p.name for p in out.iterdir()) == ["index.html"]  # no temporary file left


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _registry(tmp_path, monkeypatch):
    db = tmp_path / "registry.db"
    st = SqlStore(str(db))
    dispatch.configure(store=st)
    arbiter.arbitrate("softmax", Softmax(np.ones((4, 8), np.float32)))
    monkeypatch.setenv("ARBITER_DB", str(db))


def _cli(*args):
    from arbiter.cli import app

    return CliRunner().invoke(app, list(args))


class Gone(Candidate):
    name, target, op, tier = "plugin_softmax", "cpu", "softmax", Tier.HAND_TUNED


def test_strict_names_a_stored_winner_that_is_not_registered(tmp_path, only_candidates):
    # Before: "no stored solution for ..." though one is stored: its candidate is simply not loaded here.
    from arbiter import env as envmod

    st = SqlStore(str(tmp_path / "r.db"))
    region = Softmax(np.ones((4, 8), np.float32))
    env = envmod.environment("cpu")
    st.save_solution(SolutionRecord(region.key.id, "plugin_softmax", Gone().identity(), {}, "measured",
                                    env.fingerprint, 0.3), env)
    dispatch.configure(store=st)
    only_candidates("cpu", "softmax", NumpySoftmax())
    with pytest.raises(StrictMissError) as err:
        arbiter.run_arbitrated("softmax", region, policy="strict")
    text = str(err.value)
    assert "has a stored solution, but it cannot be served here" in text and "'plugin_softmax'" in text
    assert "no longer registered" in text and "ARBITER_PLUGINS" in text and "no stored solution" not in text


@pytest.mark.parametrize("attr, argument", [("axis=junk", "axis"), ("axis=first", "axis")])
def test_tune_attr_with_an_unknown_value_is_refused_naming_it(tmp_path, attr, argument):
    # Before: `tune --attr axis=junk` silently tuned the inner axis.
    result = subprocess.run([sys.executable, "-m", "arbiter", "--db", str(tmp_path / "r.db"), "tune", "--op",
                             "softmax", "--shape", "8x8", "--attr", attr], capture_output=True, text=True,
                            timeout=300)
    text = " ".join((result.stdout + result.stderr).split())
    said = f"{argument}: '{attr.split('=')[1]}' is not 'last', 'inner' or 'inner<i>'"
    assert result.returncode == 2 and said in text, text
    assert "Traceback" not in text and "tuned" not in text


def test_a_flag_attribute_that_is_neither_yes_nor_no_is_refused():
    rng = np.random.default_rng(0)
    with pytest.raises(RegionError, match=r"^causal: 'maybe' is not a flag"):
        Attention.random("cpu", "float32", {"batch": 1, "heads": 1, "q": 8, "k": 8, "d": 8}, {"causal": "maybe"},
                         rng=rng)
    assert Softmax.random("cpu", "float32", {"rows": 2, "cols": 4}, {"axis": "inner"}).key.attrs == \
        (("axis", "inner"),)
