"""One ``arbiter tune`` run: ``TuneRun`` (the options, checked once), ``plan`` (which keys, where) and its three
ways to run (``run_serial``, ``run_parallel``, ``run_claimed``).

The command is parse -> ``TuneRun`` -> ``plan`` -> ``run(run, plan, out)`` -> print. ``out`` is the command's
printer: ``console``, ``steps`` (``Steps``), ``report(label, decision)`` (one tuned key) and
``why(decision)`` (how its winner was chosen, in words); the runners print through it and nothing else.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from arbiter import cpu_threads, dispatch, request, targets
from arbiter import env as envmod
from arbiter.candidates import REGISTRY
from arbiter.cli.common import error, lit
from arbiter.cli.output import Steps, show
from arbiter.cli.progress import KeyBar, key_bar
from arbiter.decide import decide
from arbiter.errors import NoCandidateError, WorkersDied
from arbiter.keys import ProblemKey
from arbiter.solution import Solution
from arbiter.store import inventory
from arbiter.suite import Problem
from arbiter.tune import budget_clock


@dataclass(frozen=True)
class TuneRun:
    """What to tune and how: the options of one ``arbiter tune``, checked once (``BadParameter`` naming the
    option). ``problems``: those given by --suite and --op/--shape (the recorded and stale keys are found by
    ``plan``)."""

    target: str = "cpu"
    problems: tuple[Problem, ...] = ()
    from_recorded: bool = False
    retune_stale: bool = False
    allow_looser: bool = False
    env_fingerprint: str | None = None  # --env: tune for this stored environment
    mode: str = "device"
    budget_s: float | None = None  # stop starting new keys after this long
    force: bool = False
    dry_run: bool = False
    workers: int = 1
    devices: tuple[int, ...] = ()
    isolate: bool = False
    watch: bool = False
    poll_s: float = 5.0
    watch_s: float | None = None
    lease_s: float = 60.0
    as_json: bool = False

    def __post_init__(self):
        if self.watch and self.parallel:
            raise typer.BadParameter("--watch claims one key at a time in this process: start one `arbiter tune "
                                     "--from-recorded --watch` per worker instead of --workers/--devices",
                                     param_hint="--watch")
        if self.watch and not self.from_recorded:
            raise typer.BadParameter("--watch claims keys recorded by production: give --from-recorded too",
                                     param_hint="--watch")

    @property
    def parallel(self) -> bool:
        """Whether worker processes share the keys (--workers N, --devices)."""
        return self.workers > 1 or bool(self.devices)


def parse_devices(text: str | None) -> tuple[int, ...]:
    """'0,1' -> (0, 1); None or '' -> ()."""
    try:
        return tuple(int(d) for d in (text or "").split(",") if d.strip())
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not like 0,1,2", param_hint="--devices") from None


@dataclass
class Planned:
    """A key to tune: its problem, the seed its operands are drawn with, its key."""

    problem: Problem
    seed: int
    key: ProblemKey


@dataclass
class Plan:
    """Where a run tunes and what: the store (``sql``: its database when claims can be shared, else None), the
    environment, the keys to tune, and those skipped as tuned already (with the stored winner's name)."""

    store: Any
    sql: Any
    env: Any
    todo: list[Planned] = field(default_factory=list)
    skipped: list[tuple[Problem, str]] = field(default_factory=list)


def plan(run: TuneRun, out) -> Plan:
    """Open the store, take the environment (--env adopts a stored one), and list the keys to tune: the run's
    problems, then the recorded and stale ones, each key once, those measured here already skipped unless
    --force. Raises BadParameter when there is nothing to tune."""
    if run.allow_looser:
        dispatch.configure(looser_accuracy=True)
    sql = _claims_store()
    if run.env_fingerprint:
        _adopt_environment(out.console, run.target, run.env_fingerprint, sql)
    problems = list(run.problems)
    if run.from_recorded and (sql is None or run.parallel):
        # in memory: no claims, the recorded keys of every environment; with workers (which claim nothing):
        # the keys recorded under this environment and not tuned yet (before: "tuned 0 of 0", keys left pending)
        problems += _recorded_problems(run.target) if sql is None else _pending_problems(sql, run.target)
    elif run.from_recorded and run.force and not run.dry_run:  # claimed: keys whose tuning failed open again
        _reopen_failed(sql, run.target)
    if run.retune_stale:
        problems += _stale_problems(run.target)
    if not problems and not (run.from_recorded and sql is not None):
        raise typer.BadParameter("nothing to tune: give --op/--shape, --suite, --from-recorded or --retune-stale")
    if run.allow_looser:  # in the problems themselves, so spawned workers build consenting regions too
        problems = [dataclasses.replace(p, attrs={**p.attrs, "accuracy": "looser"}) for p in problems]
    st = dispatch.store()
    found = Plan(st, sql, envmod.environment(run.target))
    seen = set()
    for seed, problem in enumerate(problems):
        key = problem.key(run.target)  # no operands allocated until a key is actually tuned
        if key.id in seen:
            continue
        seen.add(key.id)
        if st.load_measurements(key.id, found.env.fingerprint) and not run.force:
            done = st.load_solution(key.id, found.env.fingerprint)
            found.skipped.append((problem, done.candidate_name if done else "?"))
            continue
        found.todo.append(Planned(problem, seed, key))
    return found


def show_plan(run: TuneRun, planned: Plan, out) -> None:
    """--dry-run: the keys that would be tuned (and, claimed, the recorded keys open under this environment)."""
    for item in planned.todo:
        out.console.print(lit(f"would tune {item.problem.label}  [{item.key.id}]"))
    if run.from_recorded and planned.sql is not None:
        from arbiter.store.claims import pending

        for row in pending(planned.sql):
            if row["env"] == planned.env.fingerprint:
                out.console.print(lit(f"would tune recorded {row['key']} ({row['state']})"))


def execute(run: TuneRun, planned: Plan, out) -> None:
    """Run the plan its way: worker processes, claims with leases, or one key after another here."""
    if run.parallel:
        run_parallel(run, planned, out)
    elif planned.sql is not None:  # a database: keys are claimed one at a time, with a lease
        run_claimed(run, planned, out)
    else:
        run_serial(run, planned, out)


def run_serial(run: TuneRun, planned: Plan, out) -> None:
    """One key after another in this process (an in-memory registry: nothing to claim)."""
    keys = _Keys(run, planned, out)
    spent = budget_clock(run.budget_s)
    todo, tuned, failed = planned.todo, 0, 0
    with key_bar(len(todo)) as bar:
        for i, item in enumerate(todo, 1):
            if spent():
                out.console.print(lit(f"--budget-seconds reached; {len(todo) - tuned} key(s) left for the next "
                                      f"run", "yellow"))
                break
            if keys.tune(item.problem, item.seed, f"key {i}/{len(todo)} {item.problem.label}", bar,
                         raising=False) is not None:
                tuned += 1
            else:
                failed += 1
    out.console.print(lit(f"tuned {tuned} key(s) on {run.target}; registry: {planned.store!r}"))
    if failed and not tuned:  # every key it tried failed: not a success (issue 40 item 10), as the claimed run
        raise typer.Exit(1)


class _Keys:
    """Tunes one key at a time for a run, with its progress lines; the runner (in this process, or a child per
    solution with --isolate) reports slow steps."""

    def __init__(self, run: TuneRun, planned: Plan, out):
        self.run, self.planned, self.out = run, planned, out
        inner = None
        if planned.todo and (warning := cpu_threads.busy(targets.get(run.target).host_cores)):
            out.console.print(lit(f"warning: {warning}", "yellow"), highlight=False)
        if run.isolate:
            from arbiter.isolate import Isolated

            inner = Isolated()
        self.runner = _Reporting(inner, out.steps)

    def tune(self, problem: Problem, seed: int, label: str, bar: KeyBar, *, raising: bool, claimed_by: str = ""):
        """Gate and time one key; its Decision, or None when nothing passed the gate (``raising``: raise the
        NoCandidateError instead)."""
        out, region = self.out, problem.region(self.run.target, seed=seed)
        n = sum(len(c.param_space()) for c in REGISTRY.candidates(region.target, region.op))
        out.steps.say(f"{label}: gating and timing {n} solution(s)" + (f" (claimed by {claimed_by})" if claimed_by
                                                                       else ""))
        started = time.perf_counter()
        try:
            with bar.key(problem.label, n) as advance:
                decision = decide(region, request.tune(mode=self.run.mode, runner=self.runner, progress=advance),
                                  self.planned.store)
        except NoCandidateError as exc:
            out.steps.say(f"{label}: no solution passed the gate")
            out.console.print(lit(exc, "red"))
            if raising:
                raise
            return None
        out.steps.say(f"{label}: {decision.winner.label} ({out.why(decision)}) in "
                      f"{time.perf_counter() - started:.1f} s")
        out.report(problem.label, decision)
        return decision


def run_claimed(run: TuneRun, planned: Plan, out) -> None:
    """The claim loop (``arbiter.fleet``): each key claimed with a lease, tuned, committed with its claim done."""
    import contextlib
    import signal
    import threading

    from arbiter import fleet
    from arbiter.store.claims import Claims

    claims = Claims(planned.sql, lease_s=run.lease_s)
    keys = _Keys(run, planned, out)
    stop = threading.Event()
    ends = [time.monotonic() + s for s in (run.watch_s, run.budget_s) if s is not None]
    seeds = {item.key.id: item.seed for item in planned.todo}
    total = "" if run.from_recorded else f"/{len(planned.todo)}"  # recorded keys keep arriving: no total
    count = [0]
    bar: KeyBar | None = None  # set while fleet.work runs

    def tune_key(problem, key_id):
        count[0] += 1
        assert bar is not None  # (set before fleet.work)
        return keys.tune(problem, seeds.get(key_id, 0), f"key {count[0]}{total} {problem.label}", bar,
                         raising=True, claimed_by=claims.holder if run.from_recorded else "")

    def on_signal(signum, frame):
        if stop.is_set():  # a second signal: stop now; the key's claim is released (KeyboardInterrupt)
            raise KeyboardInterrupt
        out.console.print(lit(f"{signal.Signals(signum).name}: stopping after the current key", "yellow"))
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)} \
        if run.watch else {}
    claiming = fleet.Claiming(recorded=run.from_recorded, force=run.force, watch=run.watch, poll_s=run.poll_s,
                              until=min(ends) if ends else None)
    try:
        with fleet.stopping_on_signals() if not run.watch else contextlib.nullcontext(), \
                key_bar(None if run.from_recorded else len(planned.todo)) as bar:
            outcome = fleet.work(planned.store, claims, planned.env.fingerprint, tune_key, claiming,
                                 problems={item.key.id: item.problem for item in planned.todo}, stop=stop,
                                 on_event=_claim_events(planned, out))
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    _say_claimed(run, planned, outcome, out, budget_spent=bool(ends) and time.monotonic() >= min(ends))


def _claim_events(planned: Plan, out):
    """``fleet.work``'s ``on_event``: a line per key lost, skipped or failed, and while waiting."""
    def event(kind, key_id, info):
        if kind == "lost":
            out.console.print(lit(f"lost {key_id}: {info['why']}", "yellow"))
        elif kind == "skipped":
            out.console.print(lit(f"skip {key_id}: tuned already"))
        elif kind == "failed" and info.get("decision") is None and not isinstance(info.get("error"), Exception):
            out.console.print(lit(f"failed {key_id}: {info['error']}", "red"))
        elif kind == "held":
            out.steps.say("waiting for " + ", ".join(f"{k} (claimed by {h}, lease ends in {e - time.time():.0f} s)"
                                                     for k, h, e in info["held"]))
        elif kind == "waiting":
            out.steps.say(f"no key left to claim under {planned.env.fingerprint}; looking again every "
                          f"{info['poll_s']:g} s")
    return event


def _say_claimed(run: TuneRun, planned: Plan, outcome, out, *, budget_spent: bool) -> None:
    """The claim loop's last lines: what was tuned, failed and lost; why nothing was, for recorded keys."""
    fingerprint = planned.env.fingerprint
    if run.budget_s is not None and not run.watch and budget_spent:
        out.console.print(lit("--budget-seconds reached; the keys left stay open for the next run", "yellow"))
    out.console.print(lit(f"tuned {len(outcome.tuned)} key(s) on {run.target} under {fingerprint}"
                          + (f", {len(outcome.failed)} failed" if outcome.failed else "")
                          + (f", {len(outcome.lost)} lost to another host" if outcome.lost else "")
                          + f"; registry: {planned.store!r}"))
    if run.from_recorded and not (outcome.tuned or outcome.failed or outcome.lost):
        failed = 0 if planned.sql is None else _failed_recorded(planned.sql, fingerprint, run.target)
        if failed:  # `stats --pending` lists them: say they are there, and why they were not tuned
            out.console.print(lit(f"nothing left to tune under {fingerprint}: {failed} recorded key(s) failed to "
                                  f"tune before and are not retried (`arbiter stats --pending` shows why); fix the "
                                  f"cause, then `arbiter tune --from-recorded --force` retries them", "yellow"),
                              highlight=False)
            return
        out.console.print(lit(f"nothing recorded to tune under {fingerprint}: production records the keys it "
                              f"misses under policy record (ARBITER_POLICY=record); `arbiter stats --pending` "
                              f"lists them", "yellow"), highlight=False)


def run_parallel(run: TuneRun, planned: Plan, out) -> None:
    """Worker processes share the keys (``arbiter.parallel``); a table of what each key got."""
    from arbiter.parallel import tune_parallel

    problems = [item.problem for item in planned.todo]

    def event(kind, label, info):
        if kind in ("retry", "lost", "failed"):
            out.console.print(Text.assemble((kind, "yellow"), " ", lit(f"{label}: {str(info).splitlines()[0]}")))
        elif kind == "start":
            out.steps.say(f"key {label}: started on worker {info['worker']}")
        elif kind == "done":
            out.steps.say(f"key {label}: {info['winner']} ({info['policy']})")

    try:
        outcome = tune_parallel(problems, run.target, workers=run.workers, devices=list(run.devices) or None,
                                mode=run.mode, isolate=run.isolate, on_event=event)
    except WorkersDied as exc:  # what was tuned before is committed; say why the rest was not, in one line
        error(exc)
        raise typer.Exit(1) from None
    table = Table(title=f"tuned {len(outcome.tuned)} of {len(problems)} key(s) with "
                        f"{len(run.devices) or run.workers} worker(s) in {outcome.seconds:.1f} s",
                  title_justify="left")
    for col in ("problem", "winner", "policy", "margin", "device", "environment"):
        table.add_column(col, no_wrap=col in ("policy", "margin", "device"))
    for label, info in outcome.tuned.items():
        table.add_row(lit(label), lit(info["winner"]), info["policy"],
                      "" if info["margin"] is None else f"{info['margin'] * 100:+.1f}%",
                      "" if info["device"] is None else str(info["device"]), lit(info["env"]))
    show(out.console, table)
    if outcome.lost or outcome.failed:
        raise typer.Exit(1)


class _Reporting:
    """The runner ``tune_region`` is given, reporting each solution whose gate or timing is slow (a log
    otherwise goes silent for as long as one key takes)."""

    def __init__(self, inner, steps: Steps):
        from arbiter.tune import InProcess

        self.inner, self.steps = inner or InProcess(), steps

    def _timed(self, what: str, fn, candidate, params, *args, **kwargs):
        start = time.perf_counter()
        result = fn(candidate, params, *args, **kwargs)
        seconds = time.perf_counter() - start
        if self.steps.slow(seconds):
            self.steps.say(f"  {what} {Solution(candidate.name, params).label}: {seconds:.1f} s")
        return result

    # Arguments pass through as given: the runner's contract belongs to arbiter.tune, not to this wrapper.
    def verify(self, candidate, params, *args, **kwargs):
        from arbiter.verify import default_verifier

        return self._timed("gate", self.inner.verify or default_verifier(candidate), candidate, params, *args,
                           **kwargs)

    def measure(self, candidate, params, *args, **kwargs):
        return self._timed("timed", self.inner.measure, candidate, params, *args, **kwargs)


def _stale_problems(target: str) -> list[Problem]:
    """Keys whose stored solution was measured under another environment, at their bucket bounds."""
    return [Problem(key.op, {n: max(v, 1) for n, v in key.bucket}, key.dtype, dict(key.attrs))
            for key in inventory.stale_keys(dispatch.store(), target)]


def _recorded_problems(target: str) -> list[Problem]:
    out = []
    for key_id, dims in dispatch.store().recorded_keys():
        key = ProblemKey.parse(key_id)
        if key.target == target:
            out.append(Problem(key.op, dict(dims), key.dtype, dict(key.attrs)))
    return out


def _pending_problems(sql, target: str) -> list[Problem]:
    """The recorded keys of this host's environment that are not tuned there, with their recorded dims."""
    from arbiter.fleet import recorded_problem
    from arbiter.store.claims import Claims, pending

    env = envmod.environment(target).fingerprint
    claims = Claims(sql)
    return [recorded_problem(claims, row["key"], env) for row in pending(sql)
            if row["env"] == env and row["target"] == target and row["state"] != "failed"]


def _reopen_failed(sql, target: str) -> None:
    """``tune --from-recorded --force``: the recorded keys of this environment whose tuning failed are open again
    (claimed and checked as any recorded key: one whose dims fall in another key fails again, with why)."""
    from arbiter.store.claims import Claims, pending

    env = envmod.environment(target).fingerprint
    keys = [r["key"] for r in pending(sql) if r["env"] == env and r["target"] == target and r["state"] == "failed"]
    if keys:
        Claims(sql).offer(keys, env, reopen=True)


def _failed_recorded(sql, env: str, target: str) -> int:
    """How many recorded keys of ``env`` failed to tune (not retried without --force)."""
    from arbiter.store.claims import pending

    return sum(r["env"] == env and r["target"] == target and r["state"] == "failed" for r in pending(sql))


def _claims_store():
    """The registry database claims live in; None when the registry is in memory (nothing to share)."""
    from arbiter.errors import RegistryError
    from arbiter.store.claims import sql_store

    try:
        return sql_store(dispatch.store())
    except RegistryError:
        return None


def _adopt_environment(console, target: str, fingerprint: str, sql) -> None:
    """``--env``: this process takes a stored environment key as its own (the user states the hosts are
    compatible), so claims, verdicts, measurements and solutions are all stored under it."""
    stored = {e["fingerprint"]: e for e in (sql.environments() if sql is not None else [])}
    found = stored.get(fingerprint)
    if found is None or found["target"] != target or not found["fields"]:
        known = ", ".join(sorted(fp for fp, e in stored.items() if e["target"] == target)) or "none"
        raise typer.BadParameter(f"{fingerprint!r} is not an environment of target {target} stored (with its "
                                 f"fields) in this registry; stored: {known}", param_hint="--env")
    mine = envmod.environment(target)
    adopted = envmod.adopt(target, fingerprint, found["fields"])
    changed = ", ".join(f"{k}: {a} here, {b} there" for k, (a, b) in mine.diff(adopted).items()) or "none"
    console.print(lit(f"tuning for environment {fingerprint} (stated compatible; differs from this host's "
                      f"{mine.fingerprint} in: {changed})", "yellow"), highlight=False, soft_wrap=True)
