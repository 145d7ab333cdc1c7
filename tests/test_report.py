"""``arbiter report``: the page rendered from a small real registry says what the registry holds."""
import base64
import html
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

import arbiter
from arbiter import Candidate, Tier, dispatch
from arbiter import env as envmod
from arbiter.candidates import Contract
from arbiter.cli import app
from arbiter.env import EnvironmentKey
from arbiter.keys import ProblemKey
from arbiter.regions import Matmul
from arbiter.report import collect, render, work, write
from arbiter.store import SolutionRecord
from arbiter.store.sql import SqlStore
from arbiter.tune import tune_region
from matmul_support import SlowVendor, mm


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
        assert k.winner == "fast_emitted" and k.record.chosen_by == "measured"
        assert {m.candidate_name for m in k.measurements} == {"slow_vendor", "fast_emitted"}
        [rejected] = k.rejected
        assert rejected.solution.label == "off_by_one" and rejected.reason
        assert k.looser["fast_emitted"].rel_fro == 1e-3
    counted = {k.key.shape_text: [(c.candidate_name, c.hits, c.loads, c.misses) for c in k.counts]
               for k in section.keys}
    assert counted == {"16x16x16": [("fast_emitted", 2, 1, 0)], "32x32x32": []}  # the first call loads it
    assert report.zero_hit == 1
    [stale] = report.stale
    assert stale.record.candidate_name == "slow_vendor"
    assert stale.changed["numpy"][0] == "1.0.0-old" and stale.changed["numpy"][1] == np.__version__


def test_page_shows_every_part(registry):
    pytest.importorskip("matplotlib")
    path, sql = registry
    page = render(collect(layers_of(path)))
    assert "<h2" in page and "cpu · matmul · float32" in page
    winners = re.findall(r"<code>(cpu:matmul:[^<]+)</code></td><td><b>([^<]+)</b>", page)
    assert {(ProblemKey.parse(k).shape_text, w) for k, w in winners} == {("16x16x16", "fast_emitted"),
                                                                        ("32x32x32", "fast_emitted")}
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


class Raises(Candidate):
    """Raises on every call: the gate fails it, and there is no relative error to show for it."""

    name, target, op, tier = "raises", "cpu", "matmul", Tier.EMITTED

    def run(self, region, params):
        raise ValueError("boom")


def test_unlike_keys_get_figures_of_their_own_on_a_numeric_size_axis(tmp_path, only_candidates):
    pytest.importorskip("matplotlib")
    from arbiter.report import families, figure

    only_candidates("cpu", "matmul", SlowVendor(0.002), FastEmitted())
    path = tmp_path / "registry.db"
    sql = SqlStore(str(path))
    dims = [(16, 16, 16), (32, 32, 32), (64, 64, 64), (1, 64, 64), (64, 1, 64)]  # square; GEMV m=1; GEMV n=1
    for m, n, k in dims:
        tune_region(Matmul.random("cpu", "float32", {"m": m, "n": n, "k": k}), sql, budget_s=0.3)
    [section] = collect(layers_of(path)).sections
    found = families(section)
    plain = "layout RR · activation=none,bias=0,residual=0"
    assert [(f.title, [k.key.shape_text for k in f.keys]) for f in found] == [
        (plain, ["16x16x16", "32x32x32", "64x64x64"]),  # one line per solution through these, by size
        (plain + " · m=1", ["1x64x64"]), (plain + " · n=1", ["64x1x64"])]

    fig = figure(section, found[0])
    for ax in fig.axes:
        assert ax.get_xscale() == "log"  # a size axis, not a category axis
        ticks = ax.get_xticklabels()
        assert [t.get_text() for t in ticks] == ["16x16x16", "32x32x32", "64x64x64"]
        assert all(t.get_rotation() == 0 for t in ticks)
        assert [round(x) for x in ax.get_xticks()] == [16 ** 3, 32 ** 3, 64 ** 3]

    result = CliRunner().invoke(app, ["--db", str(path), "report", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "out" / "index.html").read_text()
    assert [h for h in re.findall(r"<h3>([^<]*)</h3><img", page)] == [html.escape(f.title) for f in found]
    from matplotlib.image import imread

    for encoded in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page):
        png = tmp_path / "figure.png"
        png.write_bytes(base64.b64decode(encoded))
        pixels = imread(str(png))[..., :3]
        height = pixels.shape[0]
        ink = (pixels < 0.9).any(axis=2)
        assert ink[int(height * 0.85):].any()  # the legend is drawn below the panels...
        assert not ink[-1].any() and not ink[:, -1].any()  # ...and nothing runs off the picture's edge


def test_a_candidate_that_raised_shows_its_error_not_a_relative_error_of_zero(tmp_path, only_candidates):
    only_candidates("cpu", "matmul", SlowVendor(0.0), Raises())
    path = tmp_path / "registry.db"
    tune_region(small(16), SqlStore(str(path)), budget_s=0.2)
    result = CliRunner().invoke(app, ["--db", str(path), "report", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "out" / "index.html").read_text()
    row = re.search(r"<td>raises</td><td>([^<]*)</td><td>([^<]*)</td>", page)
    assert row and re.fullmatch(r"at \S+: raised ValueError: boom", row.group(1))
    assert row.group(2) == "raised: ValueError: boom" and "0.00e+00" not in page
