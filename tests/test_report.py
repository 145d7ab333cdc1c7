"""``arbiter report``: the page rendered from a small real registry says what the registry holds."""
import base64
import html
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from matmul_support import SlowVendor, mm
from typer.testing import CliRunner

import arbiter
from arbiter import Candidate, Tier, dispatch
from arbiter.candidates import Contract
from arbiter import env as envmod
from arbiter.cli import app
from arbiter.env import EnvironmentKey
from arbiter.regions import Matmul
from arbiter.report import collect, render, work, write
from arbiter.store import SolutionRecord
from arbiter.store.sql import SqlStore
from arbiter.tune import tune_region


class FastEmitted(Candidate):
    """Correct and fast; declares a budget looser than the published one, which the page must show."""

    name, target, op, tier = "fast_emitted", "cpu", "matmul", Tier.EMITTED
    contract = Contract(accuracy="bounded", rel_fro=1e-3, atol=1e-3, rtol=1e-3)

    def run(self, region, params):
        return mm(region)


class OffByOne(Candidate):
    """Fast and wrong: the gate must reject it, and the page must say why."""

    name, target, op, tier = "off_by_one", "cpu", "matmul", Tier.EMITTED

    def run(self, region, params):
        out = mm(region)
        out += 1.0
        return out


def small(n):
    # FastEmitted declares a looser contract: the caller consents (the key carries accuracy=looser).
    return Matmul.random("cpu", "float32", {"m": n, "n": n, "k": n}).allow_looser()


@pytest.fixture
def registry(tmp_path, only_candidates):
    """A registry file with two tuned keys (one dispatched, one never), a gate failure, and a stale solution
    (the same key, measured before a NumPy upgrade)."""
    only_candidates("cpu", "matmul", SlowVendor(0.002), FastEmitted(), OffByOne())
    path = tmp_path / "registry.db"
    sql = SqlStore(str(path))
    dispatch.configure(store=sql)
    for n in (16, 32):
        tune_region(small(n), sql, budget_s=0.3)
    for _ in range(3):
        arbiter.run_arbitrated("matmul", small(16))
    arbiter.flush()
    now = envmod.environment("cpu")
    before = EnvironmentKey.from_fields("cpu", {**now.as_dict(), "numpy": "1.0.0-old"})
    sql.save_solution(SolutionRecord(small(16).key.id, "slow_vendor", "slow_vendor@old", {}, "tier",
                                     before.fingerprint), before)
    return path, sql


def layers_of(path):
    return [("user", SqlStore(str(path), readonly=True))]


def test_collect_reads_winners_rejections_counters_and_stale(registry):
    path, _ = registry
    report = collect(layers_of(path))
    [section] = report.sections
    assert (section.target, section.op, section.dtype) == ("cpu", "matmul", "float32")
    assert [k.key.shape_text for k in section.keys] == ["16x16x16", "32x32x32"]  # ordered by size
    for k in section.keys:
        assert k.winner == "fast_emitted" and k.solution.policy == "measured"
        assert {m.candidate for m in k.measurements} == {"slow_vendor", "fast_emitted"}
        [rejected] = k.rejected
        assert rejected.solution == "off_by_one" and rejected.reason
        assert k.looser["fast_emitted"].rel_fro == 1e-3
    counted = {k.key.shape_text: [(c.candidate, c.hits, c.loads, c.misses) for c in k.counts] for k in section.keys}
    assert counted == {"16x16x16": [("fast_emitted", 2, 1, 0)], "32x32x32": []}  # the first call loads it
    assert report.zero_hit == 1
    [stale] = report.stale
    assert stale.solution.candidate == "slow_vendor"
    assert stale.changed["numpy"][0] == "1.0.0-old" and stale.changed["numpy"][1] == np.__version__


def test_page_shows_every_part(registry):
    pytest.importorskip("matplotlib")
    path, sql = registry
    page = render(collect(layers_of(path)))
    assert "<h2" in page and "cpu · matmul · float32" in page
    winners = re.findall(r"<code>(cpu:matmul:[^<]+)</code></td><td><b>([^<]+)</b>", page)
    assert {(k.split(":")[-1], w) for k, w in winners} == {("m16,n16,k16", "fast_emitted"),
                                                          ("m32,n32,k32", "fast_emitted")}
    reason = next(v for _, _, v in sql.verdicts() if not v.passed).reason
    assert "exceeds" in reason or "error" in reason  # the gate's own words, not a placeholder
    assert f"<td>off_by_one</td><td>{html.escape(reason)}</td>" in page
    assert "0 (never dispatched)" in page
    assert page.count("looser, declared: rel 1e-03, atol 1e-03, rtol 1e-03") == 2  # one per winner
    assert "numpy: 1.0.0-old → " + np.__version__ in page and "arbiter prune --stale" in page
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 1 and base64.b64decode(images[0]).startswith(b"\x89PNG\r\n\x1a\n")
    assert "http://" not in page and "https://" not in page  # nothing to fetch when viewing it


def test_page_without_matplotlib_keeps_the_tables(registry, monkeypatch):
    path, _ = registry
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    page = render(collect(layers_of(path)))
    assert "kernel-arbiter[report]" in page and "data:image/png" not in page
    assert "<b>fast_emitted</b>" in page and "off_by_one" in page


def test_filters_and_work_model(registry):
    path, _ = registry
    assert collect(layers_of(path), op="softmax").sections == []
    assert work("matmul", {"m": 2, "n": 3, "k": 4}, "float32") == (48.0, "FLOP")
    assert work("softmax", {"rows": 8, "cols": 16}, "float16") == (2 * 8 * 16 * 2, "B")
    assert work("fft", {"batch": 1, "n": 8}, "float32") is None  # no model: time only


def test_cli_writes_the_page_and_never_creates_a_registry(registry, tmp_path):
    path, _ = registry
    runner = CliRunner()
    result = runner.invoke(app, ["--db", str(path), "report", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "1 sections, 2 keys, 1 stale" in result.output
    assert "fast_emitted" in (tmp_path / "out" / "index.html").read_text()
    missing = tmp_path / "nothing.db"
    result = runner.invoke(app, ["--db", str(missing), "report", "--out", str(tmp_path / "out2")])
    assert result.exit_code == 1 and "no registry here" in result.output
    assert not missing.exists()


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")
def test_page_renders_in_headless_chromium(registry, tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    path, _ = registry
    page, _ = write(layers_of(path), str(tmp_path / "out"))
    shot = tmp_path / "shot.png"
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--window-size=1200,900", f"--screenshot={shot}", f"file://{page}"],
                   check=True, capture_output=True, timeout=60)
    pixels = imread(str(shot))[..., :3]
    assert pixels.shape[:2] == (900, 1200)
    # a blank or error page is one colour; a rendered report has text, tables and a plot
    assert (pixels < 0.5).mean() > 0.005 and len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50
