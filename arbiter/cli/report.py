"""``arbiter report``: the registry as one self-contained HTML page (see ``arbiter.report``)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from arbiter.cli.common import app, console, friendly, lit
from arbiter.errors import RegistryError

if TYPE_CHECKING:
    from arbiter.store.sql import SqlStore


def _read_only_layers() -> list[tuple[str, SqlStore]]:
    """The user registry (and ``$ARBITER_SYSTEM_DB``) opened read-only: a report never writes or creates one."""
    from arbiter.store.diagnostics import sqlite_path, to_url
    from arbiter.store.layered import DEFAULT_PATH
    from arbiter.store.sql import SqlStore

    where = os.environ.get("ARBITER_DB") or DEFAULT_PATH
    path = sqlite_path(to_url(where))
    if path is not None and not os.path.exists(path):
        raise RegistryError(f"{path}: no registry here. Tune some keys first (`arbiter --db {where} tune --suite "
                            f"quick`), or name the registry with --db.")
    layers = [("user", SqlStore(where, readonly=True))]
    system = os.environ.get("ARBITER_SYSTEM_DB")
    if system:
        layers.append(("system", SqlStore(system, readonly=True)))
    return layers


@app.command()
@friendly
def report(
    out: Path = typer.Option(..., "--out", help="Folder to write index.html into (created if missing)."),
    target: str = typer.Option(None, help="Only keys of this target."),
    op: str = typer.Option(None, help="Only keys of this op."),
):
    """Write an HTML page of the registry: time and throughput versus shape per solution, winners,
    gate failures with their reasons, dispatch counters, stale entries. Plots need the `report` extra."""
    from arbiter.report import write

    path, rep = write(_read_only_layers(), str(out), target=target, op=op)
    console().print(lit(f"wrote {path}: {len(rep.sections)} sections, {sum(len(s.keys) for s in rep.sections)} "
                        f"keys, {len(rep.stale)} stale solutions"), highlight=False)
