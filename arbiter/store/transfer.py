"""Export and import a registry as validated JSON (pydantic models, schema version inside).

``export_registry(store)`` reads every environment, candidate, verdict,
measurement and solution of a ``SqlStore`` into a ``RegistryExport``.
``read_export(path)`` parses and validates a file: a malformed one raises
``ImportFileError`` naming the file and each field at fault (JSON syntax errors
name the line and column). ``import_registry(store, data)`` merges in one
transaction: new rows are added, identical ones skipped, and a differing row
(another winner for the same key and environment, a verdict that disagrees) is
a *conflict*: kept as it is and reported, or replaced with ``overwrite=True``.
Nothing from a file is ever executed: candidates are referenced by name and
code identity, and only a registered candidate can run.
"""
from __future__ import annotations

import json
import math
import os
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from sqlalchemy import insert, select, update

from arbiter.errors import RegistryError
from arbiter.keys import ProblemKey
from arbiter.store.models import (SCHEMA_VERSION, CandidateRow, Environment, MeasurementRow, ProblemKeyRow,
                                  SolutionRow, VerdictRow, utcnow)

FORMAT = "kernel-arbiter-registry"
Text = Field(max_length=4096)
# An export of 100,000 solutions with their verdicts and measurements is about 100 MiB; a file far larger is not
# an export, and is refused before it is read into memory.
MAX_FILE_BYTES = 512 * 2**20


class ImportFileError(RegistryError):
    """An import file that is not valid JSON or not a registry export; the message names each fault."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")


class _Keyed(_Model):
    key: str = Field(max_length=4096)

    @field_validator("key")
    @classmethod
    def _problem_key(cls, v: str) -> str:
        ProblemKey.parse(v)  # raises ValueError naming the text
        return v


class EnvironmentModel(_Model):
    fingerprint: str = Field(pattern=r"^[0-9a-f]{8,64}$")
    target: str = Field(max_length=32)
    fields: dict[str, str] = Field(max_length=256)

    @field_validator("fields")
    @classmethod
    def _short(cls, v: dict) -> dict:
        for name, value in v.items():
            if len(name) > 128 or len(value) > 1024:
                raise ValueError(f"field {name[:40]!r}: names are at most 128 characters, values at most 1024")
        return v


class CandidateModel(_Model):
    identity: str = Field(max_length=256)
    name: str = Field(max_length=128)
    target: str = Field(max_length=32)
    op: str = Field(max_length=64)
    tier: Literal["COMPOSED", "SYNTHESIZED", "EMITTED", "HAND_TUNED", ""]
    contract: str | None = Field(default=None, max_length=4096)


class VerdictModel(_Keyed):
    identity: str = Field(max_length=256)
    params: str = Field(max_length=4096)
    env: str
    passed: bool
    reason: str = Text
    rel_error: float | None
    max_excess: float | None
    probes: list[str] = Field(max_length=64)
    budget_rel_fro: float
    budget_atol: float
    budget_rtol: float
    looser_budget: bool
    seconds: float


class MeasurementModel(_Keyed):
    env: str
    candidate: str = Field(max_length=128)
    params: str = Field(max_length=4096)
    mode: Literal["device", "latency", "stream"]
    reps: int = Field(ge=0, le=2**31 - 1)  # an INTEGER column on every dialect
    median_s: float | None
    p20_s: float | None
    p80_s: float | None
    spread: float | None
    warmup_s: float | None
    screened: bool
    dims: str | None = Field(default=None, max_length=4096)


class SolutionModel(_Keyed):
    env: str
    candidate: str = Field(max_length=128)
    identity: str = Field(max_length=256)
    params: dict
    policy: Literal["tier", "measured", "forced"]
    margin: float | None
    note: str = Text
    created: datetime

    @field_validator("params")
    @classmethod
    def _solution_index(cls, v: dict) -> dict:
        """A solution index is a few named scalars or short lists of them (tile shapes): never nested, never huge."""
        def scalar(x):
            return (x is None or isinstance(x, (bool, int)) and abs(x) < 2**63
                    or isinstance(x, float) and math.isfinite(x) or isinstance(x, str) and len(x) <= 256)

        if len(v) > 64:
            raise ValueError(f"{len(v)} parameters; a solution index has at most 64")
        for name, x in v.items():
            if len(name) > 128 or not (scalar(x) or isinstance(x, list) and len(x) <= 64 and all(map(scalar, x))):
                raise ValueError(f"parameter {name[:40]!r}: must be a bool, integer, finite number, string of at "
                                 f"most 256 characters, or a list of at most 64 of those")
        return v


class RegistryExport(_Model):
    format: Literal["kernel-arbiter-registry"]
    schema_version: int = Field(ge=1, le=SCHEMA_VERSION)
    exported: datetime
    environments: list[EnvironmentModel]
    candidates: list[CandidateModel]
    verdicts: list[VerdictModel]
    measurements: list[MeasurementModel]
    solutions: list[SolutionModel]

    @model_validator(mode="after")
    def _references(self):
        envs = {e.fingerprint for e in self.environments}
        idents = {c.identity for c in self.candidates}
        for section in ("verdicts", "measurements", "solutions"):
            for i, row in enumerate(getattr(self, section)):
                if row.env not in envs:
                    raise ValueError(f"{section}.{i}.env: {row.env!r} is not among the file's environments")
                if section != "measurements" and row.identity not in idents:
                    raise ValueError(f"{section}.{i}.identity: {row.identity!r} is not among the file's candidates")
        return self


def _plain(x):
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def export_registry(store) -> RegistryExport:
    """Everything a ``SqlStore`` holds except counters (they describe this user's dispatches)."""
    def read(conn):
        def rows(model, cols):
            return [dict(zip(cols, r)) for r in conn.execute(select(*(getattr(model, c) for c in cols))).all()]

        return dict(
            environments=rows(Environment, ("fingerprint", "target", "fields")),
            candidates=rows(CandidateRow, tuple(CandidateModel.model_fields)),
            verdicts=rows(VerdictRow, tuple(VerdictModel.model_fields)),
            measurements=rows(MeasurementRow, tuple(MeasurementModel.model_fields)),
            solutions=rows(SolutionRow, tuple(SolutionModel.model_fields)),
        )

    data = store._run(read, write=False)
    for section in ("verdicts", "measurements", "solutions"):
        for row in data[section]:
            for name, value in row.items():
                row[name] = _plain(value)
    for env in data["environments"]:
        env["fields"] = env["fields"] or {}
    return RegistryExport(format=FORMAT, schema_version=SCHEMA_VERSION, exported=utcnow(), **data)


def write_export(data: RegistryExport, path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(data.model_dump_json(indent=1))


def read_export(path: str) -> RegistryExport:
    """Parse and validate an export file; ImportFileError names the file and every field at fault.

    A file over ``MAX_FILE_BYTES`` is refused unread; JSON nested beyond the parser's limit, numbers out of range,
    unknown fields and over-long texts or lists are faults like any other. Nothing is imported from a faulty file.
    """
    try:
        size = os.stat(path).st_size
        if size > MAX_FILE_BYTES:
            raise ImportFileError(f"{path}: {size / 2**20:,.0f} MiB, more than any registry export "
                                  f"({MAX_FILE_BYTES // 2**20} MiB at most); it was not read and nothing was "
                                  f"imported. Check that it is a file written by `arbiter export`.")
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ImportFileError(f"{path}: cannot be read ({exc}); nothing was imported.") from exc
    try:
        return RegistryExport.model_validate_json(text)
    except ValidationError as exc:
        problems = []
        for err in exc.errors()[:20]:
            where = ".".join(str(p) for p in err["loc"]) or "(file)"
            problems.append(f"  {where}: {err['msg']}")
        more = f"\n  ... and {exc.error_count() - 20} more" if exc.error_count() > 20 else ""
        raise ImportFileError(f"{path}: not a valid kernel-arbiter export; nothing was imported:\n"
                              + "\n".join(problems) + more
                              + "\nFix those fields, or write the file again with `arbiter export`.") from None


def import_registry(store, data: RegistryExport, *, overwrite: bool = False) -> dict:
    """Merge ``data`` into ``store`` in one transaction. Returns {"added": {...}, "unchanged": n, "conflicts": [...]}."""
    report = {"added": {"environments": 0, "candidates": 0, "verdicts": 0, "measurements": 0, "solutions": 0},
              "replaced": 0, "unchanged": 0, "conflicts": []}

    def conflict(what: str, mine, theirs):
        report["conflicts"].append(f"{what}: registry has {mine}, file has {theirs}"
                                   + (" (replaced)" if overwrite else " (kept the registry's)"))

    def write(conn):
        for k in report["added"]:
            report["added"][k] = 0
        report["replaced"], report["unchanged"], report["conflicts"][:] = 0, 0, []
        for e in data.environments:
            row = conn.execute(select(Environment.fields).where(Environment.fingerprint == e.fingerprint)).first()
            if row is None:
                conn.execute(insert(Environment).values(fingerprint=e.fingerprint, target=e.target, fields=e.fields))
                report["added"]["environments"] += 1
            elif not row.fields:
                conn.execute(update(Environment).where(Environment.fingerprint == e.fingerprint)
                             .values(fields=e.fields))
        for c in data.candidates:
            if conn.execute(select(CandidateRow.identity).where(CandidateRow.identity == c.identity)).first() is None:
                conn.execute(insert(CandidateRow).values(**c.model_dump()))
                report["added"]["candidates"] += 1
        keys = {r.key for s in (data.verdicts, data.measurements, data.solutions) for r in s}
        for key in keys:
            if conn.execute(select(ProblemKeyRow.id).where(ProblemKeyRow.id == key)).first() is None:
                p = ProblemKey.parse(key)
                conn.execute(insert(ProblemKeyRow).values(
                    id=key, target=p.target, op=p.op, dtype=p.dtype, layout=p.layout,
                    attrs=key.split(":")[4], bucket=key.split(":")[5]))
        _merge(conn, VerdictRow, data.verdicts, ("identity", "params", "key", "env"), ("passed",),
               "verdicts", report, conflict, overwrite)
        _merge(conn, MeasurementRow, data.measurements, ("key", "env", "candidate", "params", "mode"),
               ("median_s",), "measurements", report, conflict, overwrite)
        _merge(conn, SolutionRow, data.solutions, ("key", "env"), ("candidate", "params"),
               "solutions", report, conflict, overwrite)

    store._run(write, write=True)
    store._loaded.clear()  # caches refill from the database on next use
    store._solutions.clear()
    store._verdicts.clear()
    return report


def _merge(conn, model, rows, match, compare, section, report, conflict, overwrite):
    for row in rows:
        values = row.model_dump()
        where = [getattr(model, c) == values[c] for c in match]
        found = conn.execute(select(*(getattr(model, c) for c in compare)).where(*where)).first()
        if found is None:
            conn.execute(insert(model).values(**values))
            report["added"][section] += 1
            continue
        mine = tuple(found)
        theirs = tuple(values[c] for c in compare)
        if json.dumps(mine, sort_keys=True, default=str) == json.dumps(theirs, sort_keys=True, default=str):
            report["unchanged"] += 1
            continue
        conflict(f"{section[:-1]} {' '.join(str(values[c]) for c in match)}", mine, theirs)
        if overwrite:
            conn.execute(update(model).where(*where).values(**values))
            report["replaced"] += 1
