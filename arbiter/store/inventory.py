"""What a registry holds and whether it is current here: the one reading that ``arbiter stats``, ``list``,
``prune`` and ``doctor``, the HTML report (``arbiter.report.collect``) and ``tune --retune-stale`` share.

* ``layers(store)``: the SQL registries behind a store, user first: ``[("user", SqlStore), ("system",
  SqlStore)]`` (a system registry is layered read-only under the user's; a user registry this process may
  only read is the one under its in-memory layer; a store wholly in memory has none).
* ``state(target, fingerprint)``: an environment is ``current`` (this machine's now), ``stale`` (the target is
  usable here and its environment differs) or ``not checked`` (the target is not usable here: a GPU
  registry read on a laptop), with the environment found now and why not.
* ``environments(layers)``: every stored environment over the layers (the user layer's fields win), with its
  state; ``stale_environments(sql)``: a registry's stale environments that still hold rows, with what changed.
* ``solutions(layers)``: every stored solution over the layers, the user's winning a (key, environment) both
  hold, as lookups read them.
* ``stale_keys(store, target)``: the keys whose stored solution is stale here (``tune --retune-stale``).

Pruning is ``stale_environments`` then ``SqlStore.prune`` (the rows' deletion is the record storage's).
"""
from __future__ import annotations

from arbiter.env import EnvironmentKey, current_environment, environment
from arbiter.keys import ProblemKey
from arbiter.store.base import SolutionRecord, Store
from arbiter.store.layered import LayeredStore, ReadOnlyUserStore
from arbiter.store.sql import SqlStore

CURRENT, STALE, NOT_CHECKED = "current", "stale", "not checked"


def layers(store: Store) -> list[tuple[str, SqlStore]]:
    """[("user", SqlStore), ("system", SqlStore)] behind ``store``; [] when it is wholly in memory."""
    pairs: list[tuple[str, Store]] = [("user", store)]
    if isinstance(store, LayeredStore) and not isinstance(store, ReadOnlyUserStore):
        pairs = [("user", store.user), ("system", store.system)]
    # A user registry this process cannot write is served read-only under an in-memory layer: that one.
    pairs = [(name, s.system if isinstance(s, ReadOnlyUserStore) else s) for name, s in pairs]
    return [(name, s) for name, s in pairs if isinstance(s, SqlStore)]


def state(target: str, fingerprint: str) -> tuple[str, EnvironmentKey | None, str]:
    """(``CURRENT`` | ``STALE`` | ``NOT_CHECKED``, the target's environment now or None, why it has none)."""
    now, why = current_environment(target)
    if now is None:
        return NOT_CHECKED, None, why
    return (CURRENT if now.fingerprint == fingerprint else STALE), now, why


def changed(target: str, fields: dict, fingerprint: str, now: EnvironmentKey) -> dict[str, tuple]:
    """Field -> (stored, now) where a stored environment differs from ``now``; {} when its fields are unknown."""
    if not fields:
        return {}
    return EnvironmentKey(target, tuple(sorted(fields.items())), fingerprint).diff(now)


def environments(found: list[tuple[str, SqlStore]]) -> dict[str, dict]:
    """Fingerprint -> {"target", "fields", "rows", "state", "now", "why"} over the layers ``found``; the user
    layer's fields win, and ``rows`` counts the rows of every layer."""
    envs: dict[str, dict] = {}
    for _, sql in reversed(found):  # the user layer's fields win
        for e in sql.environments():
            slot = envs.get(e["fingerprint"])
            if slot is None or e["fields"]:
                rows = {} if slot is None else slot["rows"]
                slot = envs[e["fingerprint"]] = {"target": e["target"], "fields": e["fields"], "rows": rows}
            for kind, n in e["rows"].items():
                slot["rows"][kind] = slot["rows"].get(kind, 0) + n
    for fp, e in envs.items():
        e["state"], e["now"], e["why"] = state(e["target"], fp)
    return envs


def stale_environments(sql: SqlStore) -> list[dict]:
    """``sql``'s stale environments that still hold rows (a pruned one keeps only its row, naming the change):
    {"fingerprint", "target", "fields", "rows", "changed": {field: {"stored", "now"}}}."""
    found = []
    for fp, e in environments([("", sql)]).items():
        if e["state"] != STALE or not any(e["rows"].values()):
            continue
        diff = changed(e["target"], e["fields"], fp, e["now"])
        found.append({"fingerprint": fp, "target": e["target"], "fields": e["fields"], "rows": e["rows"],
                      "changed": {k: {"stored": a, "now": b} for k, (a, b) in diff.items()}})
    return found


def solutions(found: list[tuple[str, SqlStore]]) -> dict[tuple[str, str], tuple[str, SolutionRecord]]:
    """(key, environment) -> (layer, solution) over the layers; the user's wins one both hold."""
    out: dict[tuple[str, str], tuple[str, SolutionRecord]] = {}
    for name, sql in found:
        for r in sql.solutions():
            out.setdefault((r.key, r.env), (name, r))
    return out


def stale_keys(store: Store, target: str) -> list[ProblemKey]:
    """Keys of ``target`` whose stored solution was chosen under an environment that is not this one (each
    once, in stored order): what ``tune --retune-stale`` tunes again. Raises when ``target`` is not usable."""
    environment(target)  # the target must be usable here to say what is stale
    found: dict[str, ProblemKey] = {}
    for record in store.solutions():
        key = ProblemKey.parse(record.key)
        if key.target == target and key.id not in found and state(target, record.env)[0] == STALE:
            found[key.id] = key
    return list(found.values())

