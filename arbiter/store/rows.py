"""Reading stored rows one at a time, so that one bad row breaks no caller (issue 40 item 6).

A registry is written by every process that shares it, and on a server database by anyone with its credentials:
a row can hold text that is not JSON in a JSON column, JSON of the wrong shape, a name that is no member of its
enumeration (``solutions.policy``), or a number that is not one (SQLite keeps whatever it is given). Before,
such a row made every dispatch raise a raw ``JSONDecodeError`` (the bulk load of an environment's solutions
decoded every row in one go), ``doctor`` end in a traceback and ``explain`` print ``Expecting value: line 1
column 1``. Now:

* the columns that need decoding are read raw (``raw``: no SQLAlchemy result processing) and decoded here per row;
  a row that does not decode raises ``BadRow`` naming the column and what it holds;
* the store's readers skip such a row as absent (a solution: the key is decided again by the miss policy, and the
  decision replaces the row; a verdict: the gate runs again), with one warning per row naming the registry, the
  table, the key and the fix (``SqlStore.unreadable``);
* ``doctor`` lists every such row (``scan``) and ``doctor --repair`` drops them (``SqlStore.drop_unreadable``):
  other rows are untouched.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timezone

from sqlalchemy import Text, type_coerce


class BadRow(ValueError):
    """A stored row that cannot be decoded; the message names the column and what it holds."""


@dataclass(frozen=True)
class Unreadable:
    """A row ``scan`` found that cannot be decoded: its table, primary key, problem key and environment (where
    the table has them), why, and the row as stored (shortened)."""

    table: str
    ident: object  # the row's primary key (id; an environment's fingerprint; a candidate's identity)
    key: str
    env: str
    why: str
    row: str

    def __str__(self):
        where = f" of key {self.key}" if self.key else ""
        where += f" (environment {self.env})" if self.env else ""
        return f"{self.table} row {self.ident}{where} cannot be read: {self.why}; stored: {self.row}"


def raw(column):
    """``column`` selected with no result processing: a JSON column's text comes back as stored (SQLite) or as
    the driver decoded it (psycopg), a date as the driver gives it, to be decoded per row here."""
    return type_coerce(column, Text).label(column.key)


def shown(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def json_value(value, column: str, kind: type = dict, *, default=None):
    """The JSON ``value`` of ``column`` as a ``kind`` (dict or list); NULL gives ``default`` (an empty one)."""
    if value is None:
        return kind() if default is None else default
    if isinstance(value, (bytes, bytearray)):
        value = value.decode(errors="replace")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise BadRow(f"{column} is not JSON: {shown(value)}") from None
    if value is None:
        return kind() if default is None else default
    if not isinstance(value, kind):
        raise BadRow(f"{column} is JSON but not {'an object' if kind is dict else 'a list'}: {shown(value)}")
    return value


def json_text(value, column: str):
    """A Text column holding JSON (``measurements.params``, ``candidates.contract``): its decoded value, any
    shape. None stays None."""
    if value is None:
        return None
    try:
        return json.loads(value)
    except (TypeError, ValueError):
        raise BadRow(f"{column} is not JSON: {shown(value)}") from None


def number(value, column: str, *, nullable: bool = True) -> float | None:
    """A Float column's value (NULL is None where ``nullable``; NaN is stored as NULL)."""
    if value is None:
        if nullable:
            return None
        raise BadRow(f"{column} is NULL, not a number")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(value)  # (a Decimal from a server)
        except (TypeError, ValueError):
            raise BadRow(f"{column} is not a number: {shown(value)}") from None
    return float(value)


def required(value, column: str) -> float:
    """A Float column's value that must be there (a budget's bound)."""
    found = number(value, column, nullable=False)
    assert found is not None  # (number raised for NULL)
    return found


def whole(value, column: str) -> int:
    """An Integer column's value."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise BadRow(f"{column} is not a whole number: {shown(value)}")
    return value


def flag(value, column: str) -> bool:
    """A Boolean column's value (SQLite stores 0 or 1)."""
    if value in (0, 1):  # (True and False are 1 and 0)
        return bool(value)
    raise BadRow(f"{column} is not a boolean: {shown(value)}")


def member(enum, value, column: str):
    """``value`` as a member of ``enum`` (``ChosenBy``, ``TimingMode``)."""
    try:
        return enum(value)
    except ValueError:
        names = ", ".join(m.value for m in enum)
        raise BadRow(f"{column} is {shown(value)}, not one of {names}") from None


def when(value, column: str) -> datetime | None:
    """A DateTime column's value as an aware UTC datetime (SQLite gives the stored text back)."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise BadRow(f"{column} is not a date and time: {shown(value)}") from None
    if not isinstance(value, datetime):
        raise BadRow(f"{column} is not a date and time: {shown(value)}")
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value


def finite_or_nan(x: float | None) -> float:
    return math.nan if x is None else x
