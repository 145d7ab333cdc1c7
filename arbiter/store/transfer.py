"""Export and import a registry as validated JSON Lines (pydantic models, schema version inside).

``export_registry(store)`` reads every environment, candidate, verdict,
measurement and solution of a ``SqlStore`` into a ``RegistryExport``;
``write_export`` writes it as JSON Lines (``export_lines``): a header line
(format, schema version, time), then one row per line with its ``section``.
``read_export(path)`` checks a file entry by entry, a line at a time (memory
does not grow with the file; ``json.loads`` per line, no tokenizer of our own):
a malformed one raises ``ImportFileError`` naming the file and each field at
fault (JSON syntax errors name the line and column), and nothing is imported
from it. A file in the first format (one JSON object, written before JSON
Lines) is still read, whole. ``import_registry(store, data)`` then merges it in
transactions of ``BATCH_ROWS`` rows, so a serving process waiting for the write
lock waits for one batch, never for the whole file: new rows are added,
identical ones skipped, and a differing row (another winner for the same key
and environment, a verdict that disagrees) is a *conflict*: kept as it is and
reported, or replaced with ``overwrite=True``.

Nothing from a file is ever executed, and nothing from it is trusted to be
correct: candidates are referenced by name and code identity (only a registered
candidate can run), an environment's fingerprint must be the digest of its
fields, and imported verdicts are stored with ``origin = "imported"``: they
never serve, the gate runs again on first use and replaces them.
"""
from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Any, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)
from sqlalchemy import insert, select, update

from arbiter.env import EnvironmentKey
from arbiter.errors import RegistryError
from arbiter.keys import ProblemKey, bucket_of
from arbiter.ops import OPS
from arbiter.store.models import (
    SCHEMA_VERSION,
    CandidateRow,
    Environment,
    MeasurementRow,
    ProblemKeyRow,
    SolutionRow,
    VerdictRow,
    utcnow,
)

FORMAT: Final = "kernel-arbiter-registry"
Text = Field(max_length=4096)
# An export of 100,000 solutions with their verdicts and measurements is about 100 MiB; a file far larger is not
# an export, and is refused before it is read. Files below it are streamed, never held whole in memory.
MAX_FILE_BYTES = 512 * 2**20
# No entry of an export comes near this (the largest, an environment, is < 300 kB at the field limits): the
# streaming reader never holds more than this of one entry, and an entry longer than it is refused.
MAX_ENTRY_BYTES = 8 * 2**20
# Rows per write transaction of an import: a serving process that needs the write lock waits for one batch
# (tens of milliseconds), far inside SQLite's busy timeout, instead of for the whole file.
BATCH_ROWS = 500
# Conflict lines kept for the report (the count is always exact).
MAX_CONFLICT_LINES = 1000
SECTIONS = ("environments", "candidates", "verdicts", "measurements", "solutions")


class ImportFileError(RegistryError):
    """An import file that is not valid JSON or not a registry export; the message names each fault."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")


# Figures an export holds: never negative, a NaN is written as null; only an error may be infinite.
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Error = Annotated[float, Field(ge=0)]
Probe = Annotated[str, Field(max_length=256)]


def _scalar(x) -> bool:
    return (x is None or (isinstance(x, (bool, int)) and abs(x) < 2**63)
            or (isinstance(x, float) and math.isfinite(x)) or (isinstance(x, str) and len(x) <= 256))


def _solution_index(v: dict) -> dict:
    """A solution index is a few named scalars or short lists of them (tile shapes): never nested, never huge."""
    if not isinstance(v, dict):
        raise ValueError(f"must be a JSON object of named parameters, not {type(v).__name__}")
    if len(v) > 64:
        raise ValueError(f"{len(v)} parameters; a solution index has at most 64")
    for name, x in v.items():
        if len(name) > 128 or not (_scalar(x) or (isinstance(x, list) and len(x) <= 64 and all(map(_scalar, x)))):
            raise ValueError(f"parameter {name[:40]!r}: must be a bool, integer, finite number, string of at "
                             f"most 256 characters, or a list of at most 64 of those")
    return v


def _json_text(v: str, what: str):
    try:
        return json.loads(v)
    except (ValueError, RecursionError):
        raise ValueError(f"must be {what} as JSON text") from None


def _op_dims(op: str) -> tuple[str, ...] | None:
    """The dimension names of ``op``, when this installation knows the op (None otherwise)."""
    kind = OPS.get(op)
    return None if kind is None else tuple(kind.region_type.DIMS)


class _Keyed(_Model):
    key: str = Field(max_length=4096)

    @field_validator("key")
    @classmethod
    def _problem_key(cls, v: str) -> str:
        parsed = ProblemKey.parse(v)  # raises ValueError naming the text
        want = _op_dims(parsed.op)
        have = tuple(name for name, _ in parsed.bucket)
        if want is not None and have != want:  # e.g. a matmul bucket on a softmax key: nothing could read it
            raise ValueError(f"bucket {','.join(have)} does not fit op {parsed.op} (its dimensions are "
                             f"{','.join(want)})")
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

    @model_validator(mode="after")
    def _digest(self):
        """The fingerprint is the digest of the fields: edited fields would be stored under a fingerprint that is
        not theirs (and served as if they were). Only a fingerprint-only entry (no fields) cannot be checked."""
        if self.fields:
            digest = EnvironmentKey.from_fields(self.target, self.fields).fingerprint
            if digest != self.fingerprint:
                raise ValueError(f"fingerprint {self.fingerprint} is not the digest of its fields ({digest}): "
                                 f"the fields were edited or belong to another environment")
        return self


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
    env: str = Field(max_length=64)  # a fingerprint
    passed: StrictBool  # "yes", 1 or "true" are refused, not read as True
    reason: str = Text
    rel_error: Error | None
    max_excess: Error | None
    probes: list[Probe] = Field(max_length=64)
    budget_rel_fro: Seconds
    budget_atol: Seconds
    budget_rtol: Seconds
    looser_budget: StrictBool
    seconds: Seconds

    @field_validator("params")
    @classmethod
    def _params(cls, v: str) -> str:
        _solution_index(_json_text(v, "a solution index (a JSON object)"))
        return v


class MeasurementModel(_Keyed):
    env: str = Field(max_length=64)  # a fingerprint
    candidate: str = Field(max_length=128)
    params: str = Field(max_length=4096)
    mode: Literal["device", "latency", "stream"]
    reps: StrictInt = Field(ge=0, le=2**31 - 1)  # an INTEGER column on every dialect
    median_s: Seconds | None
    p20_s: Seconds | None
    p80_s: Seconds | None
    spread: Seconds | None
    warmup_s: Seconds | None
    screened: StrictBool
    dims: str | None = Field(default=None, max_length=4096)

    @field_validator("params")
    @classmethod
    def _params(cls, v: str) -> str:
        _solution_index(_json_text(v, "a solution index (a JSON object)"))
        return v

    @model_validator(mode="after")
    def _dims(self):
        """The exact dimensions timed: a JSON object of the op's dimension names to sizes (report reads it)."""
        if self.dims is None:
            return self
        dims = _json_text(self.dims, "an object of dimension sizes")
        if not isinstance(dims, dict) or len(dims) > 16 or not all(
                isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**62 for n in dims.values()):
            raise ValueError("dims: must be a JSON object of at most 16 dimension names to sizes (integers >= 0)")
        parsed = ProblemKey.parse(self.key)  # the key passed its own check first
        want = _op_dims(parsed.op)
        if want is not None and tuple(dims) != want:
            raise ValueError(f"dims: {','.join(dims)} are not the dimensions of this key's op ({','.join(want)})")
        kind = OPS.get(parsed.op)
        if kind is not None and bucket_of(dims, kind.region_type.bucket_policy) != parsed.bucket:
            # a measurement is taken at a shape of its key's bucket; others (10^15 x 10^15 on rows1024,cols1024)
            # would be shown in reports as what the key was timed at
            shown = ",".join(f"{n}={v}" for n, v in dims.items())
            bucket = ",".join(f"{n}{v}" for n, v in parsed.bucket)
            raise ValueError(f"dims: {shown} are not in this key's bucket {bucket} (a measurement is "
                             f"taken at a shape of its key's bucket)")
        return self


class SolutionModel(_Keyed):
    env: str = Field(max_length=64)  # a fingerprint
    candidate: str = Field(max_length=128)
    identity: str = Field(max_length=256)
    params: dict
    policy: Literal["tier", "measured", "forced"]
    margin: Annotated[float, Field(ge=-1, allow_inf_nan=False)] | None
    note: str = Text
    created: datetime

    @field_validator("params")
    @classmethod
    def _solution_index(cls, v: dict) -> dict:
        return _solution_index(v)


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

    data = store.transact(read, write=False)
    for section in ("verdicts", "measurements", "solutions"):
        for row in data[section]:
            for name, value in row.items():
                row[name] = _plain(value)
    for env in data["environments"]:
        env["fields"] = env["fields"] or {}
    return RegistryExport(format=FORMAT, schema_version=SCHEMA_VERSION, exported=utcnow(), **data)


def export_lines(data: RegistryExport) -> Iterator[str]:
    """The export as JSON Lines: the header (format, schema version, time) first, then one line per row with
    its ``section`` (environments, candidates, verdicts, measurements, solutions, in that order)."""
    yield json.dumps({"format": data.format, "schema_version": data.schema_version,
                      "exported": data.exported.isoformat()})
    for section in SECTIONS:
        for row in getattr(data, section):
            yield json.dumps({"section": section, **row.model_dump(mode="json")}, allow_nan=False)


def write_export(data: RegistryExport, path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for line in export_lines(data):
            f.write(line + "\n")


_MODELS: dict[str, type[_Model]] = {
    "environments": EnvironmentModel, "candidates": CandidateModel, "verdicts": VerdictModel,
    "measurements": MeasurementModel, "solutions": SolutionModel}


class _Header(_Model):
    format: Literal["kernel-arbiter-registry"]
    schema_version: StrictInt = Field(ge=1, le=SCHEMA_VERSION)
    exported: datetime


class _Fault(Exception):
    """A JSON syntax fault at a position of the file."""


_LIST = object()  # what the readers yield where a section opens (the section is there, even when empty)


def _loads(text: str, line: int):
    """One JSON value of line ``line``, or a _Fault naming its position."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _Fault(f"{exc.msg} at line {line + exc.lineno - 1} column {exc.colno}") from None
    except RecursionError:
        raise _Fault(f"nested beyond the recursion limit at line {line} column 1") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise _Fault(f"number out of range ({exc}) at line {line} column 1") from None


def _lines(f, first: str) -> Iterator[tuple[str, int | None, object]]:
    """The entries of a JSON Lines export (``first``: its header line, read already): (field, None, value) for
    the header's fields, then (section, index within the section, row) per line. One line in memory at a time."""
    for name, value in _loads(first, 1).items():
        yield name, None, value
    index = dict.fromkeys(SECTIONS, 0)
    line = 1
    while True:
        text = f.readline(MAX_ENTRY_BYTES + 1)
        line += 1
        if not text:
            return
        if len(text) > MAX_ENTRY_BYTES:
            raise _Fault(f"an entry longer than {MAX_ENTRY_BYTES // 2**20} MiB at line {line}: not an export entry")
        if not text.strip():
            continue
        row = _loads(text, line)
        section = row.pop("section", None) if isinstance(row, dict) else None
        if section not in SECTIONS:
            raise _Fault(f"line {line} is not a row of an export (its \"section\" must be one of "
                         f"{', '.join(SECTIONS)})")
        if index[section] == 0:
            yield section, None, _LIST
        yield section, index[section], row
        index[section] += 1


def _whole(f, first: str) -> Iterator[tuple[str, int | None, object]]:
    """The entries of an export in the first format (one JSON object, before JSON Lines), read whole: a file
    exported before is never lost. (field, None, value) per plain field, (section, None, _LIST) and then
    (section, index, row) per section."""
    doc = _loads(first + f.read(), 1)
    if not isinstance(doc, dict):
        raise _Fault("expected { at line 1 column 1 (an export is one JSON object, or JSON Lines)")
    for name, value in doc.items():
        if name in SECTIONS and isinstance(value, list):
            yield name, None, _LIST
            for i, row in enumerate(value):
                yield name, i, row
        else:
            yield name, None, value


def _entries(f) -> tuple[bool, Iterator[tuple[str, int | None, object]]]:
    """(whether it is JSON Lines, the entries) of an open export file, whichever its format: JSON Lines when its
    first line is a header object on its own, else the first format (one object, possibly over many lines)."""
    first = f.readline(MAX_ENTRY_BYTES + 1)
    try:
        header = json.loads(first)
    except (ValueError, RecursionError):
        header = None
    if isinstance(header, dict) and "format" in header and not any(s in header for s in SECTIONS):
        return True, _lines(f, first)
    return False, _whole(f, first)


class ExportFile:
    """An export file checked by ``read_export``: its header, entry counts, and the path to stream it again."""

    def __init__(self, path: str, header: _Header, counts: dict[str, int]):
        self.path, self.header, self.counts = path, header, counts

    def rows(self) -> Iterator[tuple[str, _Model]]:
        try:
            with open(self.path, encoding="utf-8") as f:
                for name, i, value in _entries(f)[1]:
                    if i is not None:
                        yield name, _MODELS[name].model_validate(value)
        except (OSError, UnicodeDecodeError, _Fault, ValidationError) as exc:  # it was sound when checked
            raise ImportFileError(f"{self.path}: changed while it was imported ({str(exc)[:200]}); the batches "
                                  f"before this point were imported. Import it again once it is complete.") from None


def _scan(path: str, f) -> ExportFile:
    """Validate every entry of an open export file; raises ImportFileError listing up to 20 faults."""
    problems: list[str] = []
    more = 0
    header, counts, seen = {}, dict.fromkeys(SECTIONS, 0), set()
    envs, idents = set(), set()
    refs: dict[tuple[str, str], str] = {}  # (kind, value) -> where the file first refers to it
    lines = False  # a JSON Lines export: a section without rows has no line

    def fault(where: str, msg: str):
        nonlocal more
        if len(problems) < 20:
            problems.append(f"  {where}: {msg}")
        else:
            more += 1

    try:
        lines, entries = _entries(f)
        for name, i, value in entries:
            if i is None:
                if name in seen:
                    fault(name, "appears twice")
                seen.add(name)
                if name in SECTIONS:
                    if value is not _LIST:
                        fault(name, "must be a list")
                elif name in _Header.model_fields:
                    header[name] = value
                else:
                    fault(name, "Extra inputs are not permitted")
                continue
            seen.add(name)
            counts[name] += 1
            try:
                row: Any = _MODELS[name].model_validate(value)  # that section's model
            except ValidationError as exc:
                for err in exc.errors():
                    loc = ".".join(str(p) for p in (name, i, *err["loc"]))
                    fault(loc, err["msg"])
                continue
            if name == "environments":
                envs.add(row.fingerprint)
            elif name == "candidates":
                idents.add(row.identity)
            else:  # references not resolved yet are checked at the end: the sections may come in any order
                if row.env not in envs:
                    refs.setdefault(("env", row.env), f"{name}.{i}.env")
                if name != "measurements" and row.identity not in idents:
                    refs.setdefault(("identity", row.identity), f"{name}.{i}.identity")
    except _Fault as exc:
        raise ImportFileError(f"{path}: not valid JSON: {exc}; nothing was imported. Write the file again with "
                              f"`arbiter export`.") from None
    try:
        parsed = _Header.model_validate(header)
    except ValidationError as exc:
        parsed = None
        for err in exc.errors():
            fault(".".join(str(p) for p in err["loc"]) or "(file)", err["msg"])
    for section in SECTIONS:
        if section not in seen and not lines:
            fault(section, "Field required")
    for (kind, value), where in refs.items():
        if kind == "env" and value not in envs:
            fault(where, f"{value!r} is not among the file's environments")
        if kind == "identity" and value not in idents:
            fault(where, f"{value[:80]!r} is not among the file's candidates")
    if problems:
        tail = f"\n  ... and {more} more" if more else ""
        raise ImportFileError(f"{path}: not a valid kernel-arbiter export; nothing was imported:\n"
                              + "\n".join(problems) + tail
                              + "\nFix those fields, or write the file again with `arbiter export`.")
    assert parsed is not None  # a header that did not validate is a fault above
    return ExportFile(path, parsed, counts)


def read_export(path: str) -> ExportFile:
    """Check an export file entry by entry; ImportFileError names the file and every field at fault.

    A file over ``MAX_FILE_BYTES`` is refused unread. Others are streamed (a chunk and one entry in memory at
    a time): JSON nested beyond the parser's limit, numbers out of range, unknown fields, over-long texts or
    lists, negative timings, non-boolean flags, parameters or dimensions that are not JSON of their shape, a
    bucket that does not fit its op and a fingerprint that is not its fields' digest are faults like any other.
    Nothing is imported from a faulty file.
    """
    try:
        size = os.stat(path).st_size
        if size > MAX_FILE_BYTES:
            raise ImportFileError(f"{path}: {size / 2**20:,.0f} MiB, more than any registry export "
                                  f"({MAX_FILE_BYTES // 2**20} MiB at most); it was not read and nothing was "
                                  f"imported. Check that it is a file written by `arbiter export`.")
        with open(path, encoding="utf-8") as f:
            return _scan(path, f)
    except (OSError, UnicodeDecodeError) as exc:
        raise ImportFileError(f"{path}: cannot be read ({exc}); nothing was imported.") from exc


def _batches(data) -> Iterator[list[tuple[str, _Model]]]:
    """The rows of ``data`` (an ExportFile, streamed, or a RegistryExport) in batches of ``BATCH_ROWS``."""
    rows = data.rows() if isinstance(data, ExportFile) else (
        (section, row) for section in SECTIONS for row in getattr(data, section))
    batch = []
    for item in rows:
        batch.append(item)
        if len(batch) >= BATCH_ROWS:
            yield batch
            batch = []
    if batch:
        yield batch


def import_registry(store, data: ExportFile | RegistryExport, *, overwrite: bool = False) -> dict:
    """Merge ``data`` into ``store``, ``BATCH_ROWS`` rows per transaction (parents first: a batch's rows never
    point at a row a later batch adds). Returns {"added": {...}, "replaced": n, "unchanged": n,
    "conflicts": [lines, at most MAX_CONFLICT_LINES], "conflict_counts": {section: n}, "batches": n,
    "longest_batch_s": the longest write transaction (what a waiting writer waits at most)}.

    A crash between batches leaves the batches before it imported, each whole: importing the file again adds
    the rest (identical rows are skipped). Imported verdicts are stored with origin "imported" (never served).
    """
    report: dict[str, Any] = {"added": dict.fromkeys(SECTIONS, 0), "replaced": 0, "unchanged": 0, "conflicts": [],
              "conflict_counts": dict.fromkeys(SECTIONS[2:], 0), "batches": 0, "longest_batch_s": 0.0}
    for batch in _batches(data):
        part: dict[str, Any] = {"added": dict.fromkeys(SECTIONS, 0), "replaced": 0, "unchanged": 0, "conflicts": [],
                "conflict_counts": dict.fromkeys(SECTIONS[2:], 0)}

        def write(conn, batch=batch, part=part):
            for k in part["added"]:  # a retried transaction starts its counts again
                part["added"][k] = 0
            part["replaced"], part["unchanged"], part["conflicts"][:] = 0, 0, []
            part["conflict_counts"] = dict.fromkeys(SECTIONS[2:], 0)
            _write_batch(conn, batch, part, overwrite)

        t0 = time.perf_counter()
        store.transact(write, write=True)
        report["batches"] += 1
        report["longest_batch_s"] = max(report["longest_batch_s"], time.perf_counter() - t0)
        for k, n in part["added"].items():
            report["added"][k] += n
        for k, n in part["conflict_counts"].items():
            report["conflict_counts"][k] += n
        report["replaced"] += part["replaced"]
        report["unchanged"] += part["unchanged"]
        room = MAX_CONFLICT_LINES - len(report["conflicts"])
        report["conflicts"] += part["conflicts"][:max(room, 0)]
    store.forget_cached()
    return report


# section: (model, columns that identify a row, columns compared for a conflict, extra values)
_MERGE: dict[str, tuple[Any, tuple[str, ...], tuple[str, ...], dict]] = {
    "verdicts": (VerdictRow, ("identity", "params", "key", "env"), ("passed",), {"origin": "imported"}),
    "measurements": (MeasurementRow, ("key", "env", "candidate", "params", "mode"), ("median_s",), {}),
    "solutions": (SolutionRow, ("key", "env"), ("candidate", "params"), {}),
}


def _write_batch(conn, batch, report, overwrite) -> None:
    """One batch in the open transaction: parents first, then each section's rows with one query for the rows
    already there and one multi-row insert for the new ones."""
    def same(a, b) -> bool:
        return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)

    keys = sorted({row.key for section, row in batch if section in _MERGE})
    for section, row in batch:
        if section == "environments":
            found = conn.execute(select(Environment.fields).where(Environment.fingerprint == row.fingerprint)).first()
            if found is None:
                conn.execute(insert(Environment).values(fingerprint=row.fingerprint, target=row.target,
                                                        fields=row.fields))
                report["added"]["environments"] += 1
            elif not found.fields and row.fields:  # checked: these fields digest to this fingerprint
                conn.execute(update(Environment).where(Environment.fingerprint == row.fingerprint)
                             .values(fields=row.fields))
        elif section == "candidates" and conn.execute(
                select(CandidateRow.identity).where(CandidateRow.identity == row.identity)).first() is None:
            conn.execute(insert(CandidateRow).values(**row.model_dump()))
            report["added"]["candidates"] += 1
    if keys:
        known = set(conn.execute(select(ProblemKeyRow.id).where(ProblemKeyRow.id.in_(keys))).scalars())
        parsed = [(k, ProblemKey.parse(k)) for k in keys if k not in known]
        if parsed:
            conn.execute(insert(ProblemKeyRow), [
                dict(id=k, **p.fields) for k, p in parsed])
    for section, (model, match, compare, extra) in _MERGE.items():
        rows = [row for s, row in batch if s == section]
        if not rows:
            continue
        cols = tuple(getattr(model, c) for c in match + compare)
        found = {tuple(r[:len(match)]): tuple(r[len(match):]) for r in conn.execute(
            select(*cols).where(model.key.in_(sorted({row.key for row in rows})))).all()}
        new = []
        for row in rows:
            values = {**row.model_dump(), **extra}
            ident = tuple(values[c] for c in match)
            theirs = tuple(values[c] for c in compare)
            mine = found.get(ident)
            if mine is None:
                new.append(values)
                found[ident] = theirs  # a repeated entry of the file is then unchanged or a conflict
                report["added"][section] += 1
            elif same(mine, theirs):
                report["unchanged"] += 1
            else:
                report["conflict_counts"][section] += 1
                report["conflicts"].append(f"{section[:-1]} {' '.join(str(v) for v in ident)}: registry has "
                                           f"{mine}, file has {theirs}"
                                           + (" (replaced)" if overwrite else " (kept the registry's)"))
                if overwrite:
                    conn.execute(update(model).where(*(getattr(model, c) == values[c] for c in match))
                                 .values(**values))
                    found[ident] = theirs
                    report["replaced"] += 1
        if new:
            conn.execute(insert(model), new)
