"""Issue 28 item 12, the minor ones: huge imported dims (refused on import; report survives stored ones),
control characters in a stored note (escaped when shown), a region that is not a region, a big-endian float32,
and the region memo bounded by memory."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

import arbiter
from arbiter import env as envmod
from arbiter.errors import RegionError
from arbiter.regions import Softmax
from arbiter.store import MeasurementRecord, SolutionRecord
from arbiter.store.sql import SqlStore
from tests.export_support import read_doc, write_doc


def _cli(db, *args, timeout=300) -> subprocess.CompletedProcess:
    env = {**os.environ, "ARBITER_DB": str(db), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    env.pop("ARBITER_SYSTEM_DB", None)
    return subprocess.run([sys.executable, "-m", "arbiter", *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=timeout)


HUGE = {"rows": 10**15, "cols": 10**15}
KEY = "cpu:softmax:float32:R:axis=last:rows1024,cols1024"


def _stored(db, dims, note=""):
    now = envmod.environment("cpu")
    st = SqlStore(str(db))
    st.save_solution(SolutionRecord(KEY, "numpy_softmax", "numpy_softmax@1", {}, "measured", now.fingerprint, 0.1,
                                    note), now)
    st.save_measurements(KEY, now.fingerprint, [MeasurementRecord("numpy_softmax", {}, "latency", 1e-3, 1e-3, 1e-3,
                                                                  0.1, 10, 0.0, dims=dims)])
    st.close()


def test_an_import_with_dims_outside_the_keys_bucket_is_refused(tmp_path):
    # Before: accepted (any integers under 2**62), and `report` then died with a TypeError.
    _stored(tmp_path / "src.db", {"rows": 1000, "cols": 1000})
    assert _cli(tmp_path / "src.db", "export", tmp_path / "good.json").returncode == 0
    doc = read_doc(tmp_path / "good.json")
    doc["measurements"][0]["dims"] = json.dumps(HUGE)
    write_doc(doc, tmp_path / "bad.json")
    result = _cli(tmp_path / "dst.db", "import", tmp_path / "bad.json")
    out = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 1 and "measurements.0" in out and "not in this key's bucket rows1024,cols1024" in out
    assert "nothing was imported" in out and "Traceback" not in out
    assert _cli(tmp_path / "dst.db", "import", tmp_path / "good.json").returncode == 0


def test_report_draws_a_registry_holding_dims_past_int64(tmp_path):
    _stored(tmp_path / "old.db", HUGE)  # stored before import checked dims against the bucket
    result = _cli(tmp_path / "old.db", "report", "--out", tmp_path / "rep")
    assert result.returncode == 0, result.stdout + result.stderr  # before: TypeError from matplotlib's isfinite
    assert KEY in (tmp_path / "rep" / "index.html").read_text()


def test_a_note_with_terminal_escapes_is_shown_escaped(tmp_path):
    note = "\x1b[2J\x1b[31mall clear\x1b]0;pwned\x07\x9b1A"
    now = envmod.environment("cpu")
    key = Softmax(np.ones((8, 64), np.float32)).key.id
    st = SqlStore(str(tmp_path / "r.db"))
    st.save_solution(SolutionRecord(key, "numpy_softmax", "numpy_softmax@1", {}, "measured", now.fingerprint, 0.1,
                                    note), now)
    st.close()
    result = _cli(tmp_path / "r.db", "explain", "--op", "softmax", "--shape", "8x64")
    assert result.returncode == 0, result.stdout + result.stderr
    text = "".join(result.stdout.split())
    assert "\x1b" not in result.stdout and "\x9b" not in result.stdout  # before: printed raw
    assert "\\x1b[31mallclear" in text

    from arbiter.cli.output import lit, printable

    assert printable(note) == "\\x1b[2J\\x1b[31mall clear\\x1b]0;pwned\\x07\\x9b1A"
    assert lit(f"tab\tand\nnewline {note}").plain == f"tab\tand\nnewline {printable(note)}"


@pytest.mark.parametrize("region", [None, np.ones((2, 3), np.float32), "x"])
def test_run_arbitrated_with_something_not_a_region_names_region(region):
    with pytest.raises(RegionError) as err:  # before: AttributeError: 'NoneType' object has no attribute 'op'
        arbiter.run_arbitrated("softmax", region)
    assert err.value.argument == "region" and "Softmax(" in str(err.value)
    assert type(region).__name__ in str(err.value)


def test_a_big_endian_float32_is_refused_for_its_byte_order():
    with pytest.raises(RegionError) as err:  # before: "dtype >f4 is not supported; use one of ... float32 ..."
        Softmax(np.ones((4, 8), dtype=">f4"))
    assert err.value.argument == "x" and "big-endian" in str(err.value) and "newbyteorder" in str(err.value)
    x = np.ones((4, 8), dtype=">f4")
    Softmax(x.astype(x.dtype.newbyteorder("=")))  # the conversion the message gives is accepted
    with pytest.raises(RegionError, match="is not supported; use one of"):
        Softmax(np.ones((4, 8), dtype=">i4"))  # not a float either: the dtype list, as before


def test_the_region_memo_is_bounded_by_memory_when_batch_sizes_vary(monkeypatch):
    from arbiter import region_memo
    from arbiter.region_memo import Memoized

    budget = 2 << 20  # the module's is 16 MiB; a smaller one keeps this test short
    monkeypatch.setattr(region_memo, "_BUDGET", budget, raising=False)
    x = np.ones((3000, 4), np.float32)
    Softmax(x[:1])
    Memoized.recipes.clear()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(1, 3001):
            Softmax(x[:n])  # one signature per batch size
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        Memoized.recipes.clear()
    # Before: every recipe kept until 65,536 of them (about 240 MiB): 3,000 here, about 10 MiB. Now the memo is
    # emptied when its estimate would pass the budget, and what it dropped is freed at once (no cycle).
    assert grown < budget + (2 << 20), grown / 2**20  # + what else a new shape keeps (about 1 MiB here)
