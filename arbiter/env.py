"""Environment keys: everything a verdict or a measurement depends on.

Each target reports its own fields (device, architecture, driver/runtime and
vendor library versions, package versions, thread counts); the project version
is added here. The fingerprint is a stable digest of the sorted fields. A
solution or verdict recorded under another fingerprint is *stale*: never
served, counted, listed, and removed by ``arbiter prune --stale``.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from arbiter import targets


def project_version() -> str:
    """This package's version from its installed metadata (``pyproject.toml``), never a literal."""
    from importlib import metadata

    try:
        return metadata.version("kernel-arbiter")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "uninstalled"


@dataclass(frozen=True)
class EnvironmentKey:
    target: str
    fields: tuple[tuple[str, str], ...]
    fingerprint: str

    @classmethod
    def from_fields(cls, target: str, fields: dict[str, str]) -> EnvironmentKey:
        items = tuple(sorted((str(k), str(v)) for k, v in fields.items()))
        digest = hashlib.sha256(json.dumps([target, items]).encode()).hexdigest()[:20]
        return cls(target, items, digest)

    def as_dict(self) -> dict[str, str]:
        return dict(self.fields)

    def diff(self, other: EnvironmentKey) -> dict[str, tuple[str | None, str | None]]:
        """Fields that differ: name -> (this value, other value)."""
        a, b = self.as_dict(), other.as_dict()
        return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


_cache: dict[str, EnvironmentKey] = {}


def environment(target: str) -> EnvironmentKey:
    """The current environment key of ``target`` (captured once per process; ``reset()`` re-reads)."""
    key = _cache.get(target)
    if key is None:
        fields = dict(targets.get(target).environment())
        fields["project"] = project_version()
        key = _cache[target] = EnvironmentKey.from_fields(target, fields)
    return key


def adopt(target: str, fingerprint: str, fields: dict[str, str]) -> EnvironmentKey:
    """Take a stored environment key as this process's own for ``target`` (``arbiter tune --env``: a host
    stated to be compatible tunes for another's environment, and everything it stores is keyed under it)."""
    key = EnvironmentKey(target, tuple(sorted((str(k), str(v)) for k, v in fields.items())), fingerprint)
    _cache[target] = key
    return key


def reset() -> None:
    """Forget the captured keys (after a library upgrade in-process, or in tests)."""
    _cache.clear()


def current_environment(target: str) -> tuple[EnvironmentKey | None, str]:
    """``(EnvironmentKey, "")`` for a target usable here, else ``(None, why not)``."""
    try:
        return environment(target), ""
    except Exception as exc:  # a target whose library is missing cannot say what its environment is
        return None, f"{type(exc).__name__}: {exc}"
