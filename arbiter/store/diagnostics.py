"""What is wrong with a registry, said so that its user can act: the path or URL behind ``--db``, whether the
file is a SQLite database at all, who owns what when permissions refuse, the schema a database lacks, and the
``RegistryError`` a database failure becomes (naming the registry and the command that recovers it).

Nothing here writes: these are the checks and sentences the record storage (``arbiter.store.sql``), ``arbiter
doctor`` and the layering of registries (``arbiter.store.layered``) share.
"""
from __future__ import annotations

import os
import re
import urllib.parse

from sqlalchemy import UniqueConstraint, inspect
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import OperationalError

from arbiter.errors import RegistryError, UnwritableRegistry
from arbiter.store.models import Base

SQLITE_MAGIC = b"SQLite format 3\x00"
_FULL = ("database or disk is full", "no space left on device", "disk full", "could not extend file")
_UNWRITABLE = ("unable to open database file", "readonly database", "read-only file system",
               "attempt to write a readonly")


class UntrustedRegistry(UnwritableRegistry):
    """The registry file, or a folder above it, can be written by another user, and the caller did not name it
    in ``$ARBITER_TRUST_REGISTRY`` (``arbiter.store.trust``): it is not opened (``open_default`` degrades)."""


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
        raise RegistryError(f"{path}: is a folder, not a registry file. {fix or 'Give the path of a file in it.'}") \
            from None
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


def unwritable_reason(path: str) -> str | None:
    """Why this process cannot keep a registry at ``path`` (None when it can): names the folder or the file."""
    folder = os.path.dirname(path) or "."
    # A missing folder is not created: a mistyped --db/ARBITER_DB would otherwise leave folders behind silently.
    if not os.path.exists(folder):
        return f"its folder {folder} does not exist (create it first, e.g. `mkdir -p {folder}`)"
    if not os.path.isdir(folder):
        return f"{folder} is not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):  # SQLite creates its -wal/-shm files beside the registry
        return f"its folder {folder} is not writable ({ownership(folder)})"
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return f"the file is not writable ({ownership(path)})"
    return None


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
    if os.access(folder, os.W_OK | os.X_OK) or os.path.exists(path + "-shm"):
        return url
    wal = path + "-wal"
    if os.path.exists(wal) and os.path.getsize(wal) > 0:
        raise RegistryError(f"{path}: its {wal} holds commits not yet in the file, and its folder is not writable "
                            f"by you ({ownership(folder)}), so they cannot be read. Nothing was changed. Its owner "
                            f"can fold them in with `arbiter --db {path} doctor`.")
    return url.update_query_dict({"immutable": "1"})


def registry_error(exc, where: str, path: str | None, fix: str) -> RegistryError:
    """The ``RegistryError`` a database failure becomes: names the registry (``where``; ``path`` for a SQLite
    file, None for a server) and what to do about it (``fix`` when the file is not a registry)."""
    detail = str(getattr(exc, "orig", exc))
    if any(s in detail.lower() for s in _UNWRITABLE):
        return UnwritableRegistry(f"{where}: cannot be written ({detail}).")
    if any(s in detail.lower() for s in _FULL) or str(getattr(getattr(exc, "orig", None), "sqlstate", "")) \
            .startswith("53"):  # SQLite's SQLITE_FULL; PostgreSQL's class 53, insufficient resources (disk full)
        return UnwritableRegistry(f"{where}: cannot be written: its disk is full ({detail.strip()}). Free space "
                                  f"there, or set ARBITER_DB or --db to a registry on another disk.",
                                  readable=True)
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
