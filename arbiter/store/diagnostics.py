"""What is wrong with a registry, said so that its user can act: the path or URL behind ``--db``, whether the
file is a SQLite database at all, who owns what when permissions refuse, the schema a database lacks, and the
``RegistryError`` a database failure becomes (naming the registry and the command that recovers it).

Nothing here writes: these are the checks and sentences the record storage (``arbiter.store.sql``), ``arbiter
doctor`` and the layering of registries (``arbiter.store.layered``) share.
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import urllib.parse

from sqlalchemy import UniqueConstraint, inspect
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import OperationalError

from arbiter.errors import RegistryError, UnwritableRegistry
from arbiter.store.models import Base, SchemaVersion

SQLITE_MAGIC = b"SQLite format 3\x00"
_FULL = ("database or disk is full", "no space left on device", "disk full", "could not extend file")
_UNWRITABLE = ("unable to open database file", "readonly database", "read-only file system",
               "attempt to write a readonly")


class DiskFullRegistry(UnwritableRegistry):
    """The registry's disk is full: a sound registry that cannot take a write (nor, on SQLite in WAL mode, the
    ``-wal``/``-shm`` files it needs even to be opened for writing). Never damage: ``doctor --repair`` moves nothing,
    and a process serves the file read-only (``open_user``)."""


class UntrustedRegistry(UnwritableRegistry):
    """The registry file, or a folder above it, can be written by another user, and the caller did not name it
    in ``$ARBITER_TRUST_REGISTRY`` (``arbiter.store.trust``): it is not opened (``open_default`` degrades)."""


class UnusableSetting(RegistryError):
    """``--db``/``ARBITER_DB`` (or ``ARBITER_SYSTEM_DB``) names nothing a registry can be: a folder, a path too
    long, a URL scheme SQLAlchemy does not know or whose driver is not installed. Nothing was opened, so there is
    nothing to repair: the setting is what to change."""


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(where: str) -> bool:
    """Whether ``where`` is a URL: only a string that starts with a scheme (``sqlite://``, ``postgresql+x://``)."""
    return bool(_SCHEME.match(where))


def to_url(where: str | URL) -> URL:
    """A SQLAlchemy URL for ``where``: a URL is parsed, anything else is a file path, taken literally.

    A path is never parsed as URL text: ``q?mode=ro.db`` is a file of that name (not ``q`` with a query) and
    ``pct%41.db`` keeps its ``%41``, so the URL is built from its parts rather than by pasting the path in.
    """
    if isinstance(where, URL):
        return where
    if is_url(where):
        return make_url(where)
    return URL.create("sqlite", database=os.path.abspath(os.path.expanduser(where)))


def sqlite_path(url: str | URL) -> str | None:
    """The file behind a SQLite URL; None for another dialect or an in-memory database."""
    u = make_url(url)
    if u.get_backend_name() != "sqlite" or u.database in (None, "", ":memory:"):
        return None
    return u.database


def shortened(text: str, keep: int = 60) -> str:
    """``text`` as a message names it: its first ``keep`` characters and ``…`` when longer."""
    return text if len(text) <= keep + 1 else text[:keep] + "…"


def folder_message(path: str, setting: str = "--db/ARBITER_DB") -> str:
    """What ``setting`` naming the folder ``path`` is told: a registry is a file, so name one in it."""
    return (f"{path}: is a folder, not a registry file; nothing was changed. Name a file in it: {setting} "
            f"{os.path.join(path, 'registry.db')}.")


def _name_limits(path: str) -> tuple[int, int]:
    """(longest file name, longest path) in bytes on the filesystem of ``path``'s nearest existing folder."""
    folder = os.path.dirname(path) or "."
    while len(folder) > 1 and not os.path.isdir(folder):  # os.path.isdir is False for a name too long
        folder = os.path.dirname(folder)
    try:
        return os.pathconf(folder, "PC_NAME_MAX"), os.pathconf(folder, "PC_PATH_MAX")
    except (OSError, ValueError):
        return 255, 4096


def check_usable_path(path: str, setting: str = "--db/ARBITER_DB") -> None:
    """Raise RegistryError when no registry can be kept at ``path`` whatever its permissions: a folder (named
    with the file to give instead), or a name the filesystem refuses as too long (named shortened, with the
    limit it passes)."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno != errno.ENAMETOOLONG:
            return  # missing, unreachable, ...: the checks that follow name it
        name_max, path_max = _name_limits(path)
        longest = max(path.split(os.sep), key=lambda part: len(os.fsencode(part)))
        size = len(os.fsencode(longest))
        why = (f"one name in it is {size} bytes, over the {name_max} a file or folder name may have there"
               if size > name_max else f"it is {len(os.fsencode(path))} bytes, over the {path_max} a path may have")
        raise UnusableSetting(f"{shortened(path)} ({len(path)} characters): cannot be a registry: the file name "
                            f"is too long ({why}). Nothing was changed. Set {setting} to a shorter path.") from None
    if os.path.isdir(path):
        raise UnusableSetting(folder_message(path, setting))


def check_driver(url: URL, shown: str, setting: str = "--db/ARBITER_DB") -> None:
    """Raise RegistryError when SQLAlchemy has no dialect for ``url``'s scheme, or its driver is not installed:
    names the setting, the scheme, and the fix (a SQLite path, a URL SQLAlchemy knows, the driver's extra)."""
    scheme = url.drivername
    try:
        dialect = url.get_dialect()
    except Exception as exc:  # sqlalchemy.exc.NoSuchModuleError, or a dialect module that fails to import
        raise UnusableSetting(
            f"{setting} {shown}: SQLAlchemy knows no database of scheme {scheme!r} ({exc}). Nothing was "
            f"changed. Give a SQLite file path (e.g. registry.db), or a SQLAlchemy URL such as "
            f"postgresql+psycopg://USER:PASS@HOST/DB (pip install 'kernel-arbiter[postgres]').") from None
    try:
        dialect.import_dbapi()
    except ImportError as exc:
        module = getattr(exc, "name", None) or str(exc)
        extra = ("pip install 'kernel-arbiter[postgres]' (psycopg 3) and use postgresql+psycopg://..."
                 if url.get_backend_name() == "postgresql"
                 else f"install the Python driver {module} that {scheme} needs")
        raise UnusableSetting(
            f"{setting} {shown}: the driver of scheme {scheme!r} is not installed (no module {module!r}). "
            f"Nothing was changed. Fix: {extra}, or give a SQLite file path (e.g. registry.db).") from None


def repair_hint(where: str) -> str:
    return f"Nothing was changed. Run `arbiter --db {where} doctor --repair` to move it aside and start afresh."


SYSTEM_FIX = "Nothing was changed. Point ARBITER_SYSTEM_DB at a kernel-arbiter registry file, or unset it."


def check_sqlite_file(path: str, fix: str | None = None) -> None:
    """Raise RegistryError naming ``path`` when it exists but is not a readable SQLite database.

    ``fix`` is the recovery sentence (default: ``repair_hint``, for a registry of one's own).
    """
    try:
        with open(path, "rb") as f:
            head = f.read(100)
    except FileNotFoundError:
        return
    except IsADirectoryError:
        raise UnusableSetting(folder_message(path)) from None
    except OSError as exc:
        raise RegistryError(f"{path}: cannot be read ({exc.strerror}; {ownership(path)}). "
                            f"{fix or 'Ask its owner for access, or use another --db/ARBITER_DB.'}") from exc
    if head and (len(head) < 100 or not head.startswith(SQLITE_MAGIC)):
        what = "truncated" if SQLITE_MAGIC.startswith(head[:16]) else "not a SQLite database"
        raise RegistryError(f"{path}: {what} ({os.path.getsize(path)} bytes). {fix or repair_hint(path)}")


def ownership(path: str) -> str:
    """``owned by alice (uid 1000), mode 0600; you are bob (uid 1001)``: what a permission message needs."""
    import pwd

    def name(uid):
        try:
            return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
        except KeyError:
            return f"uid {uid}"

    try:
        st = os.stat(path)
    except OSError:
        return f"you are {name(os.geteuid())}"
    return f"owned by {name(st.st_uid)}, mode {st.st_mode & 0o777:04o}; you are {name(os.geteuid())}"


class ReadOnlyFilesystemRegistry(UnwritableRegistry):
    """The registry's folder is on a filesystem mounted read-only: served read-only, never a permissions matter."""


def read_only_filesystem(folder: str) -> bool:
    """Whether ``folder`` is on a filesystem mounted read-only (``statvfs``'s ``ST_RDONLY``)."""
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def unwritable_reason(path: str) -> str | None:
    """Why this process cannot keep a registry at ``path`` (None when it can): names the folder or the file."""
    folder = os.path.dirname(path) or "."
    # A missing folder is not created: a mistyped --db/ARBITER_DB would otherwise leave folders behind silently.
    if not os.path.exists(folder):
        return f"its folder {folder} does not exist (create it first, e.g. `mkdir -p {folder}`)"
    if not os.path.isdir(folder):
        return f"{folder} is not a folder"
    if read_only_filesystem(folder):  # os.access says "not writable" too, but no chmod or owner would fix it
        return f"its folder {folder} is on a read-only filesystem (mounted read-only; not a matter of permissions)"
    if not os.access(folder, os.W_OK | os.X_OK):  # SQLite creates its -wal/-shm files beside the registry
        return f"its folder {folder} is not writable ({ownership(folder)})"
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return f"the file is not writable ({ownership(path)})"
    return None


FULL_BELOW = 1 << 20  # a folder with less space than this free is "full" for a failed open (SQLite needs a
# 32 KiB ``-shm`` and WAL frames of a page each)


def disk_full(folder: str) -> str | None:
    """``"0 bytes free"`` when the filesystem of ``folder`` is (nearly) full of space or of inodes; None otherwise."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    free = (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize  # root may use the reserved blocks
    if st.f_files and not (st.f_ffree if os.geteuid() == 0 else st.f_favail):
        return "no inode free"
    return f"{free} bytes free" if free < FULL_BELOW else None


def _full_message(where: str, detail: str) -> str:
    return (f"{where}: cannot be written: its disk is full ({detail}). The registry is not damaged and nothing in "
            f"it was changed; free space there, or set ARBITER_DB or --db to a registry on another disk.")


def drop_new_companions(created: list[str]) -> None:
    """Remove the ``-wal``/``-shm`` files in ``created`` (absent before a failed open on a full disk, made by it):
    an empty ``-wal`` and its ``-shm`` hold nothing; a ``-wal`` with frames (someone else's commits) is kept."""
    wal = [f for f in created if f.endswith("-wal")]
    if any(os.path.exists(f) and os.path.getsize(f) > 0 for f in wal):
        return
    for f in created:
        with contextlib.suppress(OSError):
            os.unlink(f)


def refuse_foreign(path: str) -> None:
    """Raise RegistryError when the SQLite file at ``path`` is another program's database (tables, none of them
    ``schema_version``), found by reading it read-only, before anything opens it for writing: opening it as a
    registry first switches its journal to WAL (a write), which would change a file that is not ours. A file in
    WAL mode already (a registry, or a database someone else put in WAL mode) is left to the registry's own
    check, which refuses before any write."""
    import sqlite3

    try:
        with open(path, "rb") as f:
            head = f.read(100)
    except OSError:
        return
    if len(head) < 100 or not head.startswith(SQLITE_MAGIC) or head[18] == 2:  # 2: WAL (rollback journal: 1)
        return
    try:  # a legacy-journal file read with mode=ro: no journal, -wal or -shm is created, nothing is written
        conn = sqlite3.connect("file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro", uri=True,
                               timeout=10)
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
    except sqlite3.Error:
        return  # unreadable now: the registry's own open says why
    if tables and SchemaVersion.__tablename__ not in tables:
        raise RegistryError(f"{path}: this database has tables but no schema_version; it is not a kernel-arbiter "
                            f"registry. Nothing was changed. Point --db/ARBITER_DB at another file.")


def readonly_sqlite_url(path: str) -> URL:
    """The URL that opens ``path`` for reading only, also where this process cannot write its folder.

    A WAL-mode registry needs a ``-shm`` file beside it even to be read; in a folder we cannot write (a shipped
    system registry, another user's folder) SQLite cannot create it and refuses to open. Then the file is opened
    ``immutable``: read as it is on disk, which is the whole registry when no ``-wal`` holds commits not yet
    copied into it (SQLite copies them when the last writer closes).
    """
    # A SQLite URI: the path is %-quoted, so "?", "#" and "%" in a file name stay part of the name.
    query = {"mode": "ro", "uri": "true"}
    url = URL.create("sqlite", database="file:" + urllib.parse.quote(os.path.abspath(path)), query=query)
    folder = os.path.dirname(path) or "."
    full = disk_full(folder)  # on a full disk SQLite cannot create the -shm either (nor an empty -wal)
    if (os.access(folder, os.W_OK | os.X_OK) and not full) or os.path.exists(path + "-shm"):
        return url
    wal = path + "-wal"
    if os.path.exists(wal) and os.path.getsize(wal) > 0:
        if full:
            raise RegistryError(f"{path}: its {wal} holds commits not yet in the file, and its disk is full "
                                f"({full}), so they cannot be read. Nothing was changed. Free space there.")
        raise RegistryError(f"{path}: its {wal} holds commits not yet in the file, and its folder is not writable "
                            f"by you ({ownership(folder)}), so they cannot be read. Nothing was changed. Its owner "
                            f"can fold them in with `arbiter --db {path} doctor`.")
    return url.update_query_dict({"immutable": "1"})


def registry_error(exc, where: str, path: str | None, fix: str) -> RegistryError:
    """The ``RegistryError`` a database failure becomes: names the registry (``where``; ``path`` for a SQLite
    file, None for a server) and what to do about it (``fix`` when the file is not a registry)."""
    detail = str(getattr(exc, "orig", exc))
    if path is not None and any(s in detail.lower() for s in ("disk i/o error", "unable to open database file")):
        full = disk_full(os.path.dirname(path) or ".")  # SQLite's own words for a -wal/-shm it could not create
        if full is not None:
            return DiskFullRegistry(_full_message(where, f"{full}; SQLite: {detail.strip()}"), readable=True)
    if any(s in detail.lower() for s in _UNWRITABLE):
        if path is not None and read_only_filesystem(os.path.dirname(path) or "."):
            return ReadOnlyFilesystemRegistry(f"{where}: cannot be written: it is on a read-only filesystem "
                                              f"({detail}).")
        return UnwritableRegistry(f"{where}: cannot be written ({detail}).")
    if any(s in detail.lower() for s in _FULL) or str(getattr(getattr(exc, "orig", None), "sqlstate", "")) \
            .startswith("53"):  # SQLite's SQLITE_FULL; PostgreSQL's class 53, insufficient resources (disk full)
        return DiskFullRegistry(_full_message(where, detail.strip()), readable=True)
    if path is not None and any(s in detail for s in ("not a database", "malformed", "corrupt")):
        return RegistryError(f"{where}: {detail}. {fix}")
    if path is None and isinstance(exc, OperationalError) and "connect" in detail.lower():
        return RegistryError(f"{where}: cannot connect ({detail.strip()}). Check the URL, that the server "
                             f"is running, and that the database exists (CREATE DATABASE); nothing was written.")
    return RegistryError(f"{where}: {detail}. Check it with `arbiter --db {where} doctor`.")


def schema_problems(conn) -> list[str]:
    """Tables, columns and unique constraints the models have but the database lacks (a hand-edited or
    half-restored registry); an extra table or column is not a problem."""
    found, problems = inspect(conn), []
    tables = set(found.get_table_names())
    for table in Base.metadata.sorted_tables:
        if table.name not in tables:
            problems.append(f"table {table.name} is missing")
            continue
        have = {c["name"] for c in found.get_columns(table.name)}
        problems += [f"column {table.name}.{c.name} is missing" for c in table.columns if c.name not in have]
        uniques = {tuple(sorted(u["column_names"])) for u in found.get_unique_constraints(table.name)}
        uniques |= {tuple(sorted(i["column_names"])) for i in found.get_indexes(table.name) if i.get("unique")}
        for want in (c for c in table.constraints if isinstance(c, UniqueConstraint)):
            if tuple(sorted(c.name for c in want.columns)) not in uniques:
                problems.append(f"unique constraint {want.name} on {table.name} is missing: two writers "
                                f"could store duplicates")
    return problems
