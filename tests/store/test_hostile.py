"""Read-only and hostile files: each gives a clear message naming the file and the fix, and loses nothing.

Permission cases run as an unprivileged user: root may read and write any file, so as root the test forks
a child that drops to ``nobody`` (the child keeps the interpreter and modules the parent loaded; a fresh
``runuser`` process could not, as the interpreter lives under root's private home here). As another user,
a file of one's own with its permissions removed stands for another user's file.
"""
from __future__ import annotations

import json
import os
import pickle
import re
import stat
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from arbiter.errors import RegistryError
from arbiter.store import SolutionRecord, VerdictKey, default_store, layered
from arbiter.store.sql import SqlStore
from tests.export_support import write_doc
from tests.store._workers import ENV, LabCandidate, key, verdict

NOBODY = 65534


def _unprivileged(fn):
    """Run ``fn()`` in a forked child without root's rights; returns its result (or re-raises its exception)."""
    _load_modules()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        try:
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            layered._warned.clear()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                result = ("ok", fn(), [str(x.message) for x in caught])
        except BaseException as exc:  # handed to the parent, which raises it
            result = ("raised", f"{type(exc).__name__}: {exc}", [])
        with os.fdopen(w, "wb") as f:
            pickle.dump(result, f)
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return pickle.loads(data)


@pytest.fixture
def open_dir():
    """A folder every user can reach (pytest's tmp_path sits under a folder private to its user)."""
    import shutil
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp(prefix="arbiter-hostile-"))
    path.chmod(0o755)
    yield path
    for p in [path, *path.rglob("*")]:
        if p.is_dir():
            p.chmod(0o755)
    shutil.rmtree(path)


def _load_modules() -> None:
    """Import what the child will, before the fork: as nobody it may not read the interpreter's files."""
    import tempfile

    saved = {name: os.environ.pop(name, None) for name in ("ARBITER_DB", "ARBITER_SYSTEM_DB")}
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["ARBITER_DB"] = os.path.join(scratch, "warm.db")
        try:
            for args in (["stats"], ["stats", "--json"], ["prune", "--stale"], ["doctor"]):
                CliRunner().invoke(_app(), args)
        finally:
            for name, value in saved.items():
                os.environ.pop(name, None)
                if value is not None:
                    os.environ[name] = value


def _registry_with_rows(path) -> str:
    st = SqlStore(str(path))
    cand = LabCandidate()
    for i in range(3):
        st.save_solution(SolutionRecord(key(i), cand.name, cand.identity(), {"tile": i}, "measured", ENV, 0.2))
    st.save_verdict(VerdictKey(cand.identity(), "{}", key(0), ENV), verdict(0), cand)
    st.close()
    return str(path)


def _solution_count(path) -> int:
    st = SqlStore(str(path))
    try:
        return st.table_counts()["solutions"]
    finally:
        st.close()  # the last connection folds the -wal back in and removes it


def test_a_registry_in_a_read_only_folder_is_served_read_only_and_left_as_it_was(open_dir, monkeypatch):
    folder = open_dir / "ro"
    folder.mkdir()
    db = _registry_with_rows(folder / "registry.db")
    before = Path(db).read_bytes()
    folder.chmod(0o555)
    monkeypatch.setenv("ARBITER_DB", db)
    monkeypatch.delenv("ARBITER_SYSTEM_DB", raising=False)

    def use_it():
        st = default_store()
        served = st.load_solution(key(1), ENV)
        st.save_solution(SolutionRecord(key(9), "lab_kernel", "lab_kernel@1", {}, "tier", ENV))  # to memory
        stats = CliRunner().invoke(_app(), ["stats", "--json"])
        prune = CliRunner().invoke(_app(), ["prune", "--stale"])
        return (type(st).__name__, type(st.user).__name__, served.params, st.load_solution(key(9), ENV) is not None,
                json.loads(stats.stdout)["solutions"].__len__(), prune.exit_code, " ".join(prune.stdout.split()))

    status, result, caught = _unprivileged(use_it)
    assert status == "ok", result
    kind, top, params, kept_new, listed, prune_rc, prune_out = result
    assert (kind, top, params, kept_new, listed) == ("ReadOnlyUserStore", "MemoryStore", {"tile": 1}, True, 3)
    [message] = [m for m in caught if "cannot be written" in m]
    assert db in message and "folder" in message and "served read-only" in message and "ARBITER_DB" in message
    assert prune_rc == 1 and "not writable by you" in prune_out and "nothing was changed" in prune_out
    folder.chmod(0o755)
    assert Path(db).read_bytes() == before and sorted(os.listdir(folder)) == ["registry.db"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a file another user's (chown) and test as them")
def test_a_registry_file_owned_by_another_user_is_named_with_its_owner_and_untouched(open_dir, monkeypatch):
    db = _registry_with_rows(open_dir / "theirs.db")
    before = Path(db).read_bytes()
    os.chmod(db, 0o600)  # owner only: root's file, opened below by nobody
    open_dir.chmod(0o1777)  # writable by all, sticky (as /tmp): only the file's owner keeps others out (a folder
    # writable by others and not sticky is refused: anyone could replace the registry in it)
    monkeypatch.setenv("ARBITER_DB", db)
    monkeypatch.delenv("ARBITER_SYSTEM_DB", raising=False)

    def use_it():
        st = default_store()
        st.save_solution(SolutionRecord(key(9), "lab_kernel", "lab_kernel@1", {}, "tier", ENV))
        doctor = CliRunner().invoke(_app(), ["doctor"])
        return type(st).__name__, doctor.exit_code, " ".join(doctor.stdout.split())

    status, result, caught = _unprivileged(use_it)
    assert status == "ok", result
    kind, doctor_rc, doctor_out = result
    assert kind == "MemoryStore"
    [message] = [m for m in caught if "cannot be written" in m]
    assert db in message and "owned by root (uid 0)" in message and "you are nobody" in message
    assert "mode 0600" in message and "ARBITER_DB" in message
    assert doctor_rc == 1 and db in doctor_out and "mode 0600" in doctor_out
    assert Path(db).read_bytes() == before and _solution_count(db) == 3
    assert stat.S_IMODE(os.stat(db).st_mode) == 0o600 and sorted(os.listdir(open_dir)) == ["theirs.db"]


def test_a_shipped_wal_system_registry_in_a_root_owned_folder_is_readable_by_everyone(open_dir, monkeypatch):
    folder = open_dir / "share"
    folder.mkdir()
    system = _registry_with_rows(folder / "system.db")  # WAL mode, written and closed by its owner
    folder.chmod(0o755)
    os.chmod(system, 0o644)
    monkeypatch.setenv("ARBITER_SYSTEM_DB", system)
    user_dir = open_dir / "home"
    user_dir.mkdir(mode=0o777)
    user_dir.chmod(0o1777)  # sticky: a folder others may write and not sticky is refused (trust.refusal)
    monkeypatch.setenv("ARBITER_DB", str(user_dir / "registry.db"))

    def use_it():
        st = default_store()
        return type(st).__name__, st.load_solution(key(2), ENV).params

    status, result, caught = _unprivileged(use_it)
    assert status == "ok", result
    assert result == ("LayeredStore", {"tile": 2}) and not [m for m in caught if "kernel-arbiter" in m]
    assert sorted(os.listdir(folder)) == ["system.db"]


@pytest.mark.parametrize("content", [b"GIF89a" + b"\x00" * 200, b"", b"SQLite format 3\x00" + b"\x01" * 40])
def test_a_system_registry_that_is_not_a_database_names_arbiter_system_db(tmp_path, monkeypatch, content):
    user = _registry_with_rows(tmp_path / "user.db")
    system = tmp_path / "system.db"
    system.write_bytes(content)
    monkeypatch.setenv("ARBITER_DB", user)
    monkeypatch.setenv("ARBITER_SYSTEM_DB", str(system))
    with pytest.raises(RegistryError) as err:
        default_store()
    assert str(system) in str(err.value) and "ARBITER_SYSTEM_DB" in str(err.value)
    assert "--repair" not in str(err.value)  # a shared file is not ours to move aside
    result = CliRunner().invoke(_app(), ["stats"])
    assert result.exit_code == 1 and "ARBITER_SYSTEM_DB" in result.stdout and "Traceback" not in result.stdout
    assert system.read_bytes() == content and _solution_count(user) == 3


def test_a_system_registry_that_is_another_programs_database_is_refused(tmp_path, monkeypatch):
    import sqlite3

    system = tmp_path / "places.sqlite"
    with sqlite3.connect(system) as conn:
        conn.execute("create table moz_places (id integer primary key, url text)")
    monkeypatch.setenv("ARBITER_SYSTEM_DB", str(system))
    with pytest.raises(RegistryError, match=r"places\.sqlite: a database, but not a kernel-arbiter registry.*"
                                            r"ARBITER_SYSTEM_DB"):
        default_store()


def _export(tmp_path) -> dict:
    src = _registry_with_rows(tmp_path / "src.db")
    from arbiter.store.transfer import export_registry

    return json.loads(export_registry(SqlStore(src)).model_dump_json())


@pytest.mark.parametrize("name, mutate, fault", [
    ("unknown field", lambda d: d.update(solution_count=10**9), "solution_count: Extra inputs"),
    ("unknown nested field", lambda d: d["solutions"][0].update(kernel_source="int main(){}"),
     "solutions.0.kernel_source"),
    ("huge string", lambda d: d["solutions"][0].update(note="x" * 10**6), "solutions.0.note"),
    ("huge fingerprint field", lambda d: d["environments"][0]["fields"].update(blas="y" * 10**5),
     "environments.0.fields"),
    ("nested parameter", lambda d: d["solutions"][0].update(params={"tile": {"m": {"n": 1}}}), "solutions.0.params"),
    ("absurd parameter count", lambda d: d["solutions"][0].update(params={f"p{i}": i for i in range(10**4)}),
     "solutions.0.params"),
    ("absurd repetitions", lambda d: d["measurements"].append({**d["measurements"][0], "reps": 10**20})
     if d["measurements"] else d.update(measurements=[{"key": d["solutions"][0]["key"], "env": d["solutions"][0]["env"],
                                                       "candidate": "c", "params": "{}", "mode": "device",
                                                       "reps": 10**20, "median_s": 1.0, "p20_s": 1.0, "p80_s": 1.0,
                                                       "spread": 0.0, "warmup_s": 0.0, "screened": False}]),
     "measurements.0.reps"),
    ("too many probes", lambda d: d["verdicts"][0].update(probes=["1x1x1"] * 10**5), "verdicts.0.probes"),
])
def test_import_of_a_hostile_file_names_the_fault_and_changes_nothing(backend, tmp_path, monkeypatch, name, mutate,
                                                                      fault):
    doc = _export(tmp_path)
    mutate(doc)
    f = tmp_path / "hostile.json"
    write_doc(doc, f)
    target = backend.new()
    SqlStore(target).save_solution(SolutionRecord(key(7), "lab_kernel", "lab_kernel@1", {"tile": 7}, "tier", ENV))
    monkeypatch.setenv("ARBITER_DB", target)
    result = CliRunner().invoke(_app(), ["import", str(f)])
    text = " ".join(result.stdout.split())
    assert result.exit_code == 1 and str(f) in text and fault in text and "nothing was imported" in text, text
    assert "arbiter export" in text  # the fix
    assert len(text) < 4000  # the huge value is not echoed back
    assert backend.query(target, "select key from solutions") == [(key(7),)]  # the registry's rows, only those


@pytest.mark.parametrize("depth_or_digits, fault", [("nest", "recursion limit"), ("digits", "number out of range")])
def test_import_of_deeply_nested_or_giant_number_json_is_refused_with_its_position(tmp_path, depth_or_digits, fault):
    f = tmp_path / "hostile.json"
    write_doc(_export(tmp_path), f)
    text = f.read_text()
    at = text.index('"params": {"tile": 0}')
    # 10^5 levels: Python 3.12's C decoder takes 5000 (its C recursion limit is higher than 3.11's).
    bad = ('{"a": ' * 10**5 + "1" + "}" * 10**5) if depth_or_digits == "nest" else ('{"t": ' + "9" * 10**5 + "}")
    f.write_text(text[:at] + '"params": ' + bad + text[at + len('"params": {"tile": 0}'):])
    result = CliRunner().invoke(_app(), ["import", str(f)])
    out = " ".join(result.stdout.split())
    assert result.exit_code == 1 and str(f) in out and fault in out and re.search(r"line \d+ column", out)
    assert not (tmp_path / "registry.db").exists()  # refused before the registry was opened


def test_import_of_a_file_larger_than_any_export_is_refused_unread(tmp_path):
    from arbiter.store.transfer import MAX_FILE_BYTES

    f = tmp_path / "huge.json"
    with open(f, "wb") as out:
        out.truncate(MAX_FILE_BYTES + 1)  # sparse: takes no disk, and is never read
    result = CliRunner().invoke(_app(), ["import", str(f)])
    out = " ".join(result.stdout.split())
    assert result.exit_code == 1 and str(f) in out and "not read" in out and "arbiter export" in out


def test_a_long_problem_key_is_stored_the_same_on_every_backend(backend):
    db = backend.new()
    long_key = "lab:pointwise:float32:R:chain=" + ">".join(["add[s]", "relu"] * 60) + ":n32"
    cand = LabCandidate()
    st = SqlStore(db)
    st.save_solution(SolutionRecord(long_key, cand.name, cand.identity(), {"tile": [64, 64, 32]}, "tier", ENV))
    st.save_verdict(VerdictKey(cand.identity(), "{}", long_key, ENV), verdict(0), cand)
    assert len(long_key) > 512
    assert SqlStore(db).load_solution(long_key, ENV).params == {"tile": [64, 64, 32]}


def _app():
    from arbiter.cli import app

    return app
