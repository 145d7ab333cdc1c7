"""Registry commands: ``stats``, ``env``, ``list``, ``prune``, ``doctor``, ``export``, ``import``.

Each opens the registry named by ``--db``/``$ARBITER_DB`` (default ``./registry.db``), over
``$ARBITER_SYSTEM_DB`` when set. Registry trouble prints the message (it names the file and
the fix) and exits 1; it never prints a traceback or changes a file it could not read.
"""
from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table
from rich.text import Text

from arbiter.audit import AUDIT_PREFIX
from arbiter.candidates import Tier
from arbiter.cli.common import app, console, error, lit
from arbiter.cli.output import show
from arbiter.errors import RegistryError, unknown
from arbiter.keys import ProblemKey
from arbiter.solution import Solution
from arbiter.store import inventory, trust
from arbiter.timing_audit import PREFIX as TIMING_PREFIX

if TYPE_CHECKING:
    from arbiter.store.sql import SqlStore


@contextmanager
def _registry_errors():
    try:
        yield
    except RegistryError as exc:
        error(exc)
        raise typer.Exit(1) from None


def _where() -> str:
    from arbiter.store.layered import DEFAULT_PATH

    return os.environ.get("ARBITER_DB") or DEFAULT_PATH


def _shown() -> str:
    """The user registry as printed: a server URL's password is replaced by ``***``."""
    from sqlalchemy.engine import make_url

    from arbiter.store.diagnostics import is_url

    where = _where()
    return make_url(where).render_as_string(hide_password=True) if is_url(where) else where


def _layers() -> list[tuple[str, SqlStore]]:
    """[("user", SqlStore), ("system", SqlStore)] of the default store; [] when it fell back to memory."""
    from arbiter.store import default_store

    return inventory.layers(default_store())


def _existing() -> None:
    """Exit 1 naming the registry when it is a SQLite file that does not exist: a command that only reads it
    would otherwise create an empty one and report nothing, as if all were well."""
    from arbiter.store.diagnostics import check_usable_path, sqlite_path, to_url

    path = sqlite_path(to_url(_where()))
    if path is not None:
        try:
            check_usable_path(path)  # a name too long is not "no such file"
        except RegistryError as exc:
            error(exc)
            raise typer.Exit(1) from None
    if path is not None and not os.path.exists(path):
        folder = os.path.dirname(os.path.abspath(path))
        where = (f"its folder {folder} does not exist (create it first, e.g. `mkdir -p {folder}`)"
                 if not os.path.isdir(folder) else "no such file")
        error(f"{path}: no registry here ({where}); `arbiter run` or `arbiter tune` creates one, and "
              f"--db/ARBITER_DB names another")
        raise typer.Exit(1)


def _known(op: str | None, target: str | None) -> None:
    """Exit 2 naming an unknown --op or --target (a typo would otherwise filter everything out)."""
    from arbiter.ops import OPS
    from arbiter.targets import TARGET_NAMES

    for option, value, known in (("--op", op, OPS), ("--target", target, TARGET_NAMES)):
        if value and value not in known:
            error(f"{option}: {unknown(option.lstrip('-'), value, known)}")
            raise typer.Exit(2)


def _user_sql(write: bool):
    """The user registry's SqlStore; RegistryError naming it and the fix when missing (or read-only for a write)."""
    layers = dict(_layers())
    if "user" not in layers:
        raise RegistryError(f"{_shown()}: cannot be read or written by you, so this command has nothing to work "
                            f"on; nothing was changed. Set --db/ARBITER_DB to a path of your own.")
    if write and layers["user"].readonly:
        raise RegistryError(f"{_shown()}: readable but not writable by you, so nothing was changed. Make it "
                            f"writable for you, or set --db/ARBITER_DB to a path of your own.")
    return layers["user"]




@app.command()
def stats(
    op: str = typer.Option(None, help="Only keys of this op."),
    target: str = typer.Option(None, help="Only keys of this target."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    pending: bool = typer.Option(False, "--pending", help="Instead: keys recorded by production but not tuned "
                                                          "yet, per environment, with their claims."),
):
    """Stored solutions per key: winner, policy, tier, persisted hits/loads/misses/fallbacks, stale entries, and
    solutions the audit of real calls demoted (ARBITER_AUDIT).

    Exits 1 when the registry does not exist, 2 on an unknown --op or --target."""
    _known(op, target)
    _existing()
    if pending:
        _pending(target, as_json)
        return
    with _registry_errors():
        layers = _layers()
        rows: list[dict[str, Any]] = []
        stale = []
        audited: list[dict[str, Any]] = []
        for layer, sql in layers:
            tiers = sql.candidate_tiers()
            counts: dict[tuple, list[int]] = {}
            for c in sql.counts():
                slot = counts.setdefault((c.key, c.solution, c.env), [0, 0, 0, 0])
                slot[0] += c.hits
                slot[1] += c.loads
                slot[2] += c.misses
                slot[3] += c.fallbacks
            # Verdicts the audit of real calls failed (arbiter.audit): that solution is demoted at that key.
            demoted = set()
            for v, name, verdict in sql.verdicts(imported=False):
                if verdict.passed or not verdict.reason.startswith(AUDIT_PREFIX):
                    continue
                demoted.add((v.key, v.identity, v.params_id, v.env))
                pk = ProblemKey.parse(v.key)
                if not (op and pk.op != op) and not (target and pk.target != target):
                    audited.append({"layer": layer, "key": v.key, "env": v.env, "reason": verdict.reason,
                                    "solution": Solution.from_text(name, v.params_id).label})
            layer_stale = {e["fingerprint"]: e for e in inventory.stale_environments(sql)}
            stale += [{**e, "layer": layer} for e in layer_stale.values()]
            for r in sql.solutions():
                key = ProblemKey.parse(r.key)
                t, o = key.target, key.op
                if (op and o != op) or (target and t != target):
                    continue
                found, _, why = inventory.state(t, r.env)
                state = ("current" if found == inventory.CURRENT
                         else "stale" if r.env in layer_stale else f"not checked ({why or 'other environment'})")
                if state == "current" and (r.key, r.identity, r.solution.params_id, r.env) in demoted:
                    state = "demoted by the audit"  # never served: its verdict here failed
                hits, loads, misses, fallbacks = counts.get((r.key, r.solution, r.env), (0, 0, 0, 0))
                rows.append({"layer": layer, "key": r.key, "target": t, "op": o, "env": r.env, "state": state,
                             "winner": r.solution.label, "policy": str(r.chosen_by),
                             "tier": tiers.get(r.identity, ""), "margin": r.margin, "note": r.note,
                             "hits": hits, "loads": loads, "misses": misses, "fallbacks": fallbacks})
    zero = [r for r in rows if r["state"] == "current" and r["hits"] == 0]
    counted = ("hits", "loads", "misses", "fallbacks")
    if as_json:
        print(json.dumps({"registry": _shown(), "solutions": rows, "stale_environments": stale,
                          "zero_hit_solutions": len(zero), "audit_failures": audited}, indent=1, default=str))
        return
    out = console()
    table = Table(title=lit(f"registry {_shown()}: stored solutions"))
    for col in ("key", "winner", "policy", "tier", *counted, "state"):
        table.add_column(col, justify="right" if col in counted else "left",
                         no_wrap=col in ("policy", "tier", *counted[1:]))
    for r in sorted(rows, key=lambda r: (r["state"] != "current", r["key"])):
        # "never dispatched" only when no process ever called the key: a load or a miss is a dispatch
        never = not any(r[c] for c in counted)
        hits_cell = lit("0 (never dispatched)", "yellow") if never else str(r["hits"])
        state = r["state"] + (f" [{r['layer']}]" if r["layer"] != "user" else "")
        # a winner the timing audit chose on the program's own calls says so (the JSON keeps the stored policy)
        policy = r["policy"] + (" (program)" if (r["note"] or "").startswith(TIMING_PREFIX) else "")
        table.add_row(lit(r["key"]), lit(r["winner"]), policy, r["tier"], hits_cell,
                      *(str(r[c]) for c in counted[1:]), lit(state, "" if r["state"] == "current" else "red"))
    show(out, table)
    for e in stale:
        what = ", ".join(f"{k}: {v['stored']} -> {v['now']}" for k, v in e["changed"].items()) or "fields unknown"
        out.print(lit(f"stale environment {e['fingerprint']} ({e['target']}, {e['layer']}): "
                      f"{e['rows'].get('solutions', 0)} solutions, {e['rows'].get('verdicts', 0)} verdicts; "
                      f"changed: {what}"), highlight=False)
    for a in audited:
        out.print(lit(f"failed the audit of real calls: {a['solution']} at {a['key']} ({a['env']}): {a['reason']}",
                      "red"), highlight=False, soft_wrap=True)
    n_stale = sum(1 for r in rows if r["state"] == "stale")
    out.print(f"{len(rows)} solutions, {n_stale} stale, {len(zero)} current with zero hits"
              + ("; remove stale entries with `arbiter prune --stale`" if stale else ""), highlight=False)


def _pending(target, as_json: bool) -> None:
    """``stats --pending``: recorded-but-untuned keys per environment (``arbiter.store.claims.pending``)."""
    from arbiter.store.claims import pending

    with _registry_errors():
        rows = [r for r in pending(_user_sql(write=False)) if not target or r["target"] == target]
    failed = [r for r in rows if r["state"] == "failed"]  # not retried by `tune --from-recorded`: not pending
    rows = [r for r in rows if r["state"] != "failed"]
    if as_json:
        print(json.dumps({"registry": _shown(), "pending": rows, "failed": failed}, indent=1, default=str))
        return
    out = console()
    table = Table(title=lit(f"registry {_shown()}: recorded keys not tuned yet"))
    for col in ("environment", "key", "claim", "holder", "lease left s", "attempts"):
        table.add_column(col, no_wrap=col not in ("key", "holder"))
    now = time.time()
    for r in rows:
        left = f"{r['expires'] - now:.0f}" if r["state"] == "claimed" else ""
        table.add_row(r["env"], lit(r["key"]), r["state"], lit(r["holder"]), left, str(r["attempts"]))
    show(out, table)
    per_env: dict[str, int] = {}
    for r in rows:
        per_env[r["env"]] = per_env.get(r["env"], 0) + 1
    out.print(f"{len(rows)} pending key(s)" + "".join(f"; {n} under {fp}" for fp, n in per_env.items())
              + ("; tune them with `arbiter tune --from-recorded` on a host of that environment" if rows else ""),
              highlight=False)
    for r in failed:
        out.print(Text.assemble(("failed", "red"), " ", lit(
            f"{r['key']} under {r['env']} ({r['attempts']} attempt(s)): {r['note'] or 'no reason stored'}")),
            highlight=False, soft_wrap=True)
    if failed:
        out.print(f"{len(failed)} recorded key(s) failed to tune and are not retried by `arbiter tune "
                  f"--from-recorded`; fix the cause, then `arbiter tune --from-recorded --force` retries them",
                  highlight=False)


@app.command("env")
def env_cmd(
    target: str = typer.Option(None, help="Only this target (cpu, nvidia, rocm)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
):
    """The current environment key per target: every field and the fingerprint solutions are stored under."""
    from arbiter.env import current_environment
    from arbiter.targets import TARGET_NAMES

    found: dict[str, dict] = {}
    for name in [target] if target else TARGET_NAMES:
        now, why = current_environment(name)
        found[name] = ({"fingerprint": now.fingerprint, "fields": now.as_dict()} if now is not None
                       else {"unavailable": why})
    if as_json:
        print(json.dumps(found, indent=1))
        return
    out = console()
    for name, info in found.items():
        if "unavailable" in info:
            out.print(lit(f"{name}: unavailable ({info['unavailable']})"), highlight=False)
            continue
        table = Table(title=lit(f"{name} environment {info['fingerprint']}"))
        table.add_column("field")
        table.add_column("value")
        for k, v in info["fields"].items():
            table.add_row(lit(k), lit(v))
        show(out, table)


def _target_status(name: str) -> tuple[bool, str]:
    from arbiter import targets

    try:
        avail = targets.get(name).available()
    except Exception as exc:  # e.g. ImportError: nvidia without cupy
        return False, f"{type(exc).__name__}: {exc}"
    return avail is True, "" if avail is True else str(avail or "available() is False")


@app.command("list")
def list_cmd(
    target: str = typer.Option(None, help="Only this target."),
    op: str = typer.Option(None, help="Only this op."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
):
    """Registered candidates: target, op, tier, availability and the reason when unavailable."""
    from arbiter.candidates import REGISTRY
    from arbiter.targets import TARGET_NAMES

    rows: list[dict[str, Any]] = []
    target_state: dict[str, tuple[bool, str]] = {}
    for name in TARGET_NAMES:
        ok, why = _target_status(name)
        try:
            REGISTRY.load_builtin(name)
        except Exception as exc:  # a target's candidate modules may need its missing library
            ok, why = False, why or f"candidates failed to load: {type(exc).__name__}: {exc}"
        target_state[name] = (ok, why)
    for cand in REGISTRY.all():
        ok, why = target_state.get(cand.target, (True, ""))
        if ok:
            try:
                avail = cand.available()
            except Exception as exc:
                avail = f"available() raised {type(exc).__name__}: {exc}"
            ok, why = avail is True, "" if avail is True else str(avail or "available() is False")
        else:
            why = f"target {cand.target} unavailable: {why}"
        if (target and cand.target != target) or (op and cand.op != op):
            continue
        rows.append({"target": cand.target, "op": cand.op, "name": cand.name, "tier": cand.tier.name,
                     "priority": cand.priority, "available": ok, "reason": why})
    rows.sort(key=lambda r: (r["target"], r["op"], -Tier[r["tier"]],
                             -r["priority"], r["name"]))
    targets_out = {k: {"available": v[0], "reason": v[1]} for k, v in target_state.items()}
    if as_json:
        print(json.dumps({"targets": targets_out, "candidates": rows}, indent=1))
        return
    out = console()
    table = Table(title="registered candidates")
    for col in ("target", "op", "name", "tier", "available", "reason"):
        table.add_column(col, no_wrap=col in ("target", "tier", "available"))
    down = {name for name, (ok, _) in target_state.items() if not ok}
    for r in rows:
        if r["target"] not in down:
            table.add_row(r["target"], lit(r["op"]), lit(r["name"]), r["tier"],
                          "yes" if r["available"] else lit("no", "red"), lit(r["reason"]))
    for name in sorted(down):  # one row per unavailable target, not its reason once per candidate (--json has all)
        mine = [r for r in rows if r["target"] == name]
        if mine:
            ops = sorted({r["op"] for r in mine})
            table.add_row(name, lit(", ".join(ops)), f"{len(mine)} candidates", "", lit("no", "red"),
                          lit("target unavailable (below)"))
    show(out, table, heading=3)  # target op name
    for name, (ok, why) in target_state.items():
        if not ok:
            out.print(lit(f"target {name}: unavailable ({why})"), highlight=False)


@app.command()
def prune(
    stale: bool = typer.Option(False, "--stale", help="Remove entries of environments that differ from this one."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would go; change nothing."),
):
    """Remove stale solutions, verdicts, measurements and counters from the user registry."""
    if not stale:
        console().print("say what to prune: --stale (entries whose environment differs from the current one)")
        raise typer.Exit(2)
    out = console()
    with _registry_errors():
        sql = _user_sql(write=not dry_run)
        found = inventory.stale_environments(sql)
        for e in found:
            what = ", ".join(f"{k}: {v['stored']} -> {v['now']}" for k, v in e["changed"].items()) or "fields unknown"
            out.print(lit(f"stale {e['fingerprint']} ({e['target']}): {e['rows']}; changed: {what}"), highlight=False)
        if dry_run or not found:
            out.print(f"{len(found)} stale environment(s); nothing removed" + (" (--dry-run)" if dry_run else ""))
            return
        removed = sql.prune([e["fingerprint"] for e in found])
    out.print(lit(f"removed from {sql.where}: " + ", ".join(f"{n} {k}" for k, n in removed.items())),
              highlight=False)


def _move_aside(path: str) -> str:
    """Rename ``path`` (and its -wal/-shm companions) to a new name beside it; returns the new name."""
    if not os.path.isfile(path):  # doctor refuses folders before; this guards any other caller
        raise RegistryError(f"{path}: not a file; only a registry file is ever moved aside. Nothing was changed.")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    dest, n = f"{path}.corrupt-{stamp}", 1
    while os.path.exists(dest):
        n += 1
        dest = f"{path}.corrupt-{stamp}-{n}"
    os.replace(path, dest)
    for suffix in ("-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.replace(path + suffix, dest + suffix)
    return dest


@app.command()
def doctor(repair: bool = typer.Option(False, "--repair", help="Move a corrupt registry aside (never deleted) "
                                                               "so a fresh one is created."),
           as_json: bool = typer.Option(False, "--json", help="Print the findings as JSON (same exit status).")):
    """Check the user registry: readable, a registry, schema version, integrity, row counts, stale entries."""
    import io

    from rich.console import Console

    facts: dict[str, Any] = {"registry": _shown()}
    # paths and messages print as they are; with --json the lines are dropped and the facts printed instead
    out = Console(file=io.StringIO(), markup=False) if as_json else console(markup=False)
    status = 0
    try:
        _doctor(repair, out, facts)
    except typer.Exit as exc:
        status = exc.exit_code
        if not as_json:
            raise
    if as_json:
        print(json.dumps({**facts, "ok": status == 0}, indent=1, default=str))
        if status:
            raise typer.Exit(status)


def _doctor(repair: bool, out, facts: dict) -> None:
    from arbiter.store.diagnostics import UnusableSetting, UnwritableRegistry, check_usable_path, sqlite_path, to_url
    from arbiter.store.links import planted_link
    from arbiter.store.migrate import NewerSchemaError
    from arbiter.store.sql import SqlStore

    where = _where()
    path = sqlite_path(to_url(where))
    try:  # a folder (never moved: `--db .` would be the working folder), a name too long: the setting is wrong
        if path is not None:
            check_usable_path(path)
    except UnusableSetting as exc:
        facts.update(state="folder" if path and os.path.isdir(path) else "unusable", problems=[str(exc)])
        out.print(Text.assemble(("problem:", "red"), " ", lit(exc)), highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    if path is not None and not os.path.exists(path) and planted_link(path) is None:  # a planted link: refused below
        facts.update(state="absent")
        out.print(f"{path}: no registry yet (created on first use)", highlight=False)
        return
    problems: list[str] = []
    sql: SqlStore | None = None
    try:
        sql = SqlStore(where)
        problems = sql.integrity_check()
    except (UnwritableRegistry, NewerSchemaError, UnusableSetting) as exc:  # not ours to move: another user's, a
        # newer release's, or no registry at all (a URL whose driver is missing)
        facts.update(state="refused", problems=[str(exc)])
        out.print(Text.assemble(("problem:", "red"), " ", lit(exc)), highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    except RegistryError as exc:
        problems = [str(exc)]
    if problems:
        facts.update(state="damaged", problems=problems)
        for p in problems:
            out.print(Text.assemble(("problem:", "red"), " ", lit(p)), highlight=False, soft_wrap=True)
        if sql is not None:
            sql.close()
        if path is None:  # a server database is repaired by its administrator, never moved by us
            out.print(f"{_shown()}: nothing was changed. Restore it from a backup, "
                      f"or create a fresh database and `arbiter --db NEW_URL import` an export.", highlight=False,
                      soft_wrap=True)
            raise typer.Exit(1)
        if not repair:
            out.print(f"{path} is damaged; nothing was changed. `arbiter --db {path} doctor --repair` moves it "
                      f"aside (kept, renamed) and a fresh registry is created.", highlight=False)
            raise typer.Exit(1)
        dest = _move_aside(path)
        facts.update(state="moved aside", moved_to=dest)
        out.print(f"moved {path} aside to {dest}; a fresh registry will be created at {path}", highlight=False)
        return
    assert sql is not None  # no problems: it opened
    _unreadable_rows(sql, repair, out, facts)
    counts = sql.table_counts()
    stale = inventory.stale_environments(sql)
    doubtful, resting = trust.unvouched(sql)
    facts.update(state="ok", schema=sql.version(), checks=sql.checks(), rows=counts, stale_environments=len(stale),
                 unvouched_verdicts=len(doubtful), unvouched_solutions=len(resting))
    ours = not resting  # every stored winner rests on a verdict this user's gate computed (whatever the file's mode)
    # one fact a line: the row counts alone made a 316-character line
    out.print(f"{sql.where}: {'ok, ' if ours else ''}schema v{sql.version()}, integrity ok ({sql.checks()})",
              highlight=False)
    out.print("rows: " + ", ".join(f"{n} {k}" for k, n in counts.items()), highlight=False)
    out.print(f"{len(stale)} stale environment(s)", highlight=False)
    if ours:
        if doubtful:
            out.print(f"{len(doubtful)} passed verdict(s) not vouched for by your gate, no solution rests on them",
                      highlight=False)
        return
    # A solution resting on a passed verdict this user's gate never computed is a row someone else wrote, or
    # flipped, whatever the file's mode now (a copy of another user's file is yours, its rows are not), or one
    # from before kernel-arbiter kept its ledger.
    facts.update(state="unvouched", problems=[
        f"{r.key}: the stored winner {r.candidate_name} rests on a passed verdict your gate did not compute"
        for r in resting])
    for r in resting[:20]:
        out.print(Text.assemble(("problem:", "red"), " ", lit(
            f"{r.key}: the stored winner {r.candidate_name} rests on a passed verdict your gate did not compute "
            f"(written by another user or host, edited, or from before your gate kept its ledger)")),
            highlight=False, soft_wrap=True)
    more = f" ({len(resting) - 20} not shown)" if len(resting) > 20 else ""
    out.print(f"{len(resting)} solution(s){more} rest on {len(doubtful)} passed verdict(s) your gate did not "
              f"vouch for: each is gated again in your processes before it serves, and your gate's verdict replaces "
              f"the row. Nothing was changed.", highlight=False)
    raise typer.Exit(1)


def _unreadable_rows(sql, repair: bool, out, facts: dict) -> None:
    """Rows that do not decode (bad JSON, an unknown policy, a number that is none; issue 40 item 6): each named
    with its row; readers take them as absent. ``--repair`` drops them alone (the other rows are kept)."""
    bad = sql.unreadable_rows()
    if not bad:
        return
    facts.update(unreadable_rows=[str(b) for b in bad])
    for b in bad[:20]:
        out.print(Text.assemble(("problem:", "red"), " ", lit(b)), highlight=False, soft_wrap=True)
    more = f" ({len(bad) - 20} not shown)" if len(bad) > 20 else ""
    if not repair:
        facts.update(state="unreadable rows", problems=[str(b) for b in bad])
        out.print(f"{len(bad)} row(s){more} cannot be read; dispatch, explain and stats take them as absent (a "
                  f"solution's key is decided again). Nothing was changed. `arbiter --db {sql.where} doctor "
                  f"--repair` drops these rows alone; the other rows are kept.", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    done = sql.drop_unreadable(bad)
    facts.update(repaired={"dropped_unreadable_rows": done})
    out.print(f"dropped {len(bad)} unreadable row(s){more} (" + ", ".join(f"{n} {t}" for t, n in done.items())
              + "); the other rows are kept", highlight=False, soft_wrap=True)


@app.command("export")
def export_cmd(
    file: str | None = typer.Argument(None, help="JSON Lines file to write; - writes standard output."),
    env: str | None = typer.Option(None, "--env", help="With --out: the environment fingerprint to publish."),
    out: str | None = typer.Option(None, "--out", help="Instead of JSON: write a read-only SQLite registry "
                                                          "of --env's solutions and verdicts (ARBITER_SYSTEM_DB)."),
):
    """Write the user registry (environments, candidates, verdicts, measurements, solutions) as JSON Lines; or, with
    --env and --out, publish one environment as a read-only SQLite system registry (docs/fleet.md)."""
    from arbiter.store.transfer import export_registry, write_export

    if out is not None or env is not None:
        if file is not None or out is None or env is None:
            raise typer.BadParameter("publishing takes --env FINGERPRINT and --out FILE, and no JSON file",
                                     param_hint="--out" if out is None else "--env" if env is None else "FILE")
        _publish(env, out)
        return
    if file is None:
        raise typer.BadParameter("give the JSON file to write (or --env and --out to publish)", param_hint="FILE")
    _existing()
    with _registry_errors():
        data = export_registry(_user_sql(write=False))
    if file == "-":  # the JSON Lines alone on stdout, for a pipe
        from arbiter.store.transfer import export_lines

        for line in export_lines(data):
            print(line)
        return
    write_export(data, file)
    console().print(lit(f"wrote {file}: {len(data.solutions)} solutions, {len(data.verdicts)} verdicts, "
                        f"{len(data.measurements)} measurements, {len(data.environments)} environments"),
                    highlight=False)


def _publish(env: str, out: str) -> None:
    from arbiter.store.publish import publish

    with _registry_errors():
        written = publish(_user_sql(write=False), env, out)
    console().print(lit(f"published {env} to {out} (read-only): " + ", ".join(f"{n} {k}" for k, n in
                        written.items()) + f"; serve it with ARBITER_SYSTEM_DB={out}"), highlight=False,
                    soft_wrap=True)


SHOWN_CONFLICTS = 10  # conflict lines printed by `import`; the rest are summed up in one line


@app.command("import")
def import_cmd(
    file: str = typer.Argument(..., help="File written by `arbiter export` (JSON Lines, or the earlier JSON)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="On a conflict, take the file's row."),
):
    """Merge an export into the user registry; conflicts are reported (and kept unless --overwrite)."""
    from arbiter.store.transfer import import_registry, read_export

    out = console()
    with _registry_errors():
        data = read_export(file)
        report = import_registry(_user_sql(write=True), data, overwrite=overwrite)
    conflicts = sum(report["conflict_counts"].values())
    for line in report["conflicts"][:SHOWN_CONFLICTS]:  # the first few say what kind; the count says how many
        out.print(lit(f"conflict: {line}"), highlight=False, soft_wrap=True)
    if conflicts > SHOWN_CONFLICTS:
        out.print(lit(f"... and {conflicts - SHOWN_CONFLICTS} more conflict(s): " + ", ".join(
            f"{n} {k}" for k, n in report["conflict_counts"].items() if n) + ("; the file's rows replaced the "
            "registry's" if overwrite else "; the registry's rows were kept (--overwrite takes the file's)")),
            highlight=False, soft_wrap=True)
    out.print(lit(f"imported {file}: added " + ", ".join(f"{n} {k}" for k, n in report["added"].items())
                  + f"; {report['unchanged']} unchanged, {conflicts} conflict(s), "
                  f"{report['replaced']} replaced"), highlight=False, soft_wrap=True)
