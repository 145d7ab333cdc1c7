"""``arbiter tune`` and ``arbiter explain``: measured selection from the command line."""
from __future__ import annotations

import dataclasses
import json
import time

import numpy as np
import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from arbiter import cpu_threads, dispatch, select
from arbiter import env as envmod
from arbiter.candidates import REGISTRY
from arbiter.cli.common import app, error, friendly, lit, require_target
from arbiter.cli.common import console as make_console
from arbiter.cli.output import Steps, ratio_text, show
from arbiter.cli.progress import KeyBar, key_bar
from arbiter.errors import NoCandidateError, WorkersDied
from arbiter.keys import ProblemKey
from arbiter.ops import op_kind
from arbiter.select import Status
from arbiter.solution import ChosenBy, Solution
from arbiter.store import inventory
from arbiter.suite import Problem
from arbiter.suite import suite as get_suite
from arbiter.tune import budget_clock, explain_rows, tune_region


def parse_shape(op: str, text: str) -> dict:
    """'512x512x512' -> {'m': 512, 'n': 512, 'k': 512} in the op's dimension order."""
    names = op_kind(op).region_type.DIMS
    try:
        values = [int(v) for v in text.lower().split("x")]
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not like 512x512x512", param_hint="--shape") from None
    if len(values) != len(names) or any(v < 0 for v in values):
        raise typer.BadParameter(f"{op} takes {len(names)} non-negative sizes ({'x'.join(names)}), got {text!r}",
                                 param_hint="--shape")
    return dict(zip(names, values))


def problems_from_options(op, shapes, dtypes, activation, bias, residual, attr=()) -> list[Problem]:
    attrs = {}
    if op == "matmul":
        attrs = {"activation": activation, "bias": "1" if bias else "0", "residual": "1" if residual else "0"}
    for item in attr:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise typer.BadParameter(f"{item!r} is not like name=value", param_hint="--attr")
        attrs[name.strip()] = value.strip()
    return [Problem(op, parse_shape(op, s), d, attrs) for s in shapes for d in dtypes]


def _fmt_us(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds * 1e6:,.1f}"


def shorten(text: str, limit: int = 200) -> str:
    """``text`` cut at a word boundary with " …" when over ``limit`` characters (never mid-word)."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return text[:cut if cut > 0 else limit] + " …"


def why_chosen(chosen_by: ChosenBy, margin: float | None, note: str) -> str:
    """How a solution was chosen, in words (shown as "policy"): the note says who is faster and whether that
    is separated."""
    if note:
        return f"policy {chosen_by}: {note}"
    return f"policy {chosen_by}" + (f", {ratio_text(margin)}" if margin is not None else "")


def _once_per_reason(rows) -> list[tuple]:
    """(row, label) per row, the untimed rows of one candidate that share a status and reason (its parameter
    sets excluded for one cause) merged into one: "numba_gemv (3 parameter sets)"."""
    merged: dict[tuple, list] = {}
    order: list = []
    for row in rows:
        if row.timing is None and row.status != Status.PASSED:
            group = merged.setdefault((row.candidate.name, row.status, row.reason), [])
            if not group:
                order.append(group)
            group.append(row)
        else:
            order.append([row])
    return [(group[0], group[0].label if len(group) == 1 else f"{group[0].candidate.name} ({len(group)} "
             f"parameter sets)") for group in order]


def autotune_table(problem_label: str, decision) -> Table:
    table = Table(title=lit(f"AUTOTUNE {problem_label}"), title_justify="left")
    for col in ("solution", "tier", "verdict", "median µs", "spread", "reps", ""):
        table.add_column(col, no_wrap=col in ("tier", "median µs", "spread", ""))
    for row, label in _once_per_reason(decision.rows):
        m = row.timing
        # (a passed row's reason names the solution timed for it: the same launch)
        verdict = row.reason if row.status != Status.PASSED else \
            "; ".join(filter(None, [f"pass {row.verdict.rel_error:.1e}", row.reason]))
        table.add_row(lit(label), row.candidate.tier.name, lit(shorten(verdict)),
                      _fmt_us(m.median_s) if m else "", f"{m.spread * 100:.1f}%" if m else "",
                      f"{m.reps}{' screened' if m.screened else ''}" if m else "",
                      "WINNER" if row is decision.winner else "")
    table.caption = lit(why_chosen(decision.chosen_by, decision.margin, decision.note))
    table.caption_justify = "left"
    return table


reported: list = []  # [as_json, decision dicts...] of the running `tune` command


def _report(console, label: str, decision) -> None:
    """One tuned key: its AUTOTUNE table, or (--json) its decision kept for the JSON printed at the end."""
    if not reported or not reported[0]:
        show(console, autotune_table(label, decision))
        return
    reported.append({"problem": label, "key": decision.key.id,
                     "winner": decision.winner.label, "chosen_by": str(decision.chosen_by),
                     "margin": decision.margin, "note": decision.note,
                     "solutions": [{"solution": r.label, "tier": r.candidate.tier.name, "status": str(r.status),
                                    "reason": r.reason, "median_us": r.timing.median_s * 1e6 if r.timing else None,
                                    "spread": r.timing.spread if r.timing else None} for r in decision.rows]})


def _print_json(target: str) -> None:
    if reported and reported[0]:
        print(json.dumps({"target": target, "tuned": reported[1:]}, indent=1, default=str))


def _region_of_key(text: str):
    """(region, label) of a problem key's text: an instance at the bucket's bound, in the key's layout."""
    try:
        key = ProblemKey.parse(text)
        kind = op_kind(key.op)
    except (ValueError, KeyError) as exc:
        raise typer.BadParameter(f"{text!r} is not a problem key as `arbiter stats` prints it "
                                 f"(target:op:dtype:layout:attrs:bucket): {exc}", param_hint="KEY") from None
    dims = {n: max(v, 1) for n, v in key.bucket}
    attrs = dict(key.attrs)
    region = kind.region_type.random(key.target, key.dtype, dims, attrs, layout=key.layout,
                                     rng=np.random.default_rng(0))
    if attrs.get("accuracy") == "looser":
        region = region.allow_looser()
    return region, Problem(key.op, dims, key.dtype, attrs).label


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


@app.command()
@friendly
def tune(
    op: str | None = typer.Option(None, help="Op to tune: matmul, softmax, rmsnorm, ..."),
    shape: list[str] = typer.Option([], help="Shape(s) like 512x512x512 (matmul MxNxK) or 4096x1024 (rows x cols)."),
    dtype: list[str] = typer.Option(["float32"], help="Dtype(s)."),
    activation: str = typer.Option("none", help="matmul epilogue activation."),
    bias: bool = typer.Option(False, help="matmul epilogue: add a bias."),
    residual: bool = typer.Option(False, help="matmul epilogue: add a residual."),
    attr: list[str] = typer.Option([], "--attr", help="Op attribute name=value (causal=1, kind=r2c, "
                                                       "chain=mul[t]>relu, ...)."),
    suite: str | None = typer.Option(None, help="Tune a built-in suite instead of --op/--shape."),
    from_recorded: bool = typer.Option(False, "--from-recorded", help="Tune the keys recorded by policy 'record'."),
    retune_stale: bool = typer.Option(False, "--retune-stale", help="Also tune keys whose solution is stale here."),
    target: str = typer.Option("cpu", help="Target: cpu, nvidia or rocm."),
    mode: str = typer.Option("device", help="Timing mode that decides: device (events around one call), "
                                            "latency (host clock + synchronize) or stream (back-to-back calls); "
                                            "GPUs record all three."),
    budget_seconds: float | None = typer.Option(None, envvar="ARBITER_TUNE_BUDGET_SECONDS",
                                                help="Stop starting new keys after this many seconds "
                                                     "(default: $ARBITER_TUNE_BUDGET_SECONDS, else no limit)."),
    force: bool = typer.Option(False, help="Re-tune keys that already have a measured solution here."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List the keys that would be tuned; tune nothing."),
    workers: int = typer.Option(1, min=1, help="Worker processes sharing the keys (CPU). A key whose worker "
                                "dies is retried once; workers that keep dying end the command with exit 1."),
    devices: str | None = typer.Option(None, help="GPU ids, e.g. 0,1: one worker per device."),
    isolate: bool = typer.Option(False, help="Verify and time each solution in a child process, so a crash, hang "
                                             "or memory exhaustion fails only that solution."),
    allow_looser: bool = typer.Option(False, "--allow-looser", help="Consent to candidates declaring accuracy "
                                      "looser than the op's budget (keys get accuracy=looser)."),
    env_fingerprint: str | None = typer.Option(None, "--env", help="Tune for this stored environment "
                                                  "fingerprint instead of this host's own (a compatible host: "
                                                  "results are stored under it)."),
    watch: bool = typer.Option(False, "--watch", help="With --from-recorded: keep claiming keys as production "
                                                      "records them, until SIGINT/SIGTERM."),
    poll_seconds: float = typer.Option(5.0, min=0.01, help="--watch: seconds between looks for new keys."),
    watch_seconds: float | None = typer.Option(None, min=0, help="--watch: stop after this many seconds."),
    lease_seconds: float = typer.Option(60.0, min=0.1, help="A key's claim lasts this long unless renewed "
                                                            "(renewed every third of it while tuning); a dead "
                                                            "host's key is taken over after it."),
    as_json: bool = typer.Option(False, "--json", help="Print each tuned key's decision as JSON (stdout) instead "
                                                       "of tables."),
):
    """Gate and time every solution per key; persist measured winners. Resumable: keys already tuned are skipped.

    With a registry database, keys are claimed one at a time with a lease (docs/fleet.md): hosts sharing one
    registry each tune different keys, and a key is tuned once per environment. Nothing to tune from
    --from-recorded (no key recorded) says so and exits 0."""
    console = make_console(stderr=as_json)  # with --json, stdout carries the JSON alone
    reported.clear()
    reported.append(as_json)
    if allow_looser:
        dispatch.configure(looser_accuracy=True)
    require_target(target)
    if watch and (workers > 1 or devices):
        raise typer.BadParameter("--watch claims one key at a time in this process: start one `arbiter tune "
                                 "--from-recorded --watch` per worker instead of --workers/--devices",
                                 param_hint="--watch")
    if watch and not from_recorded:
        raise typer.BadParameter("--watch claims keys recorded by production: give --from-recorded too",
                                 param_hint="--watch")
    fleet_store = _claims_store()
    if env_fingerprint:
        _adopt_environment(console, target, env_fingerprint, fleet_store)
    problems: list[Problem] = []
    if suite:
        problems += get_suite(suite)
    if op:
        if not shape:
            raise typer.BadParameter("give at least one --shape with --op", param_hint="--shape")
        problems += problems_from_options(op, shape, dtype, activation, bias, residual, attr)
    if from_recorded and (fleet_store is None or workers > 1 or devices):
        # in memory: no claims, the recorded keys of every environment; with workers (which claim nothing):
        # the keys recorded under this environment and not tuned yet (before: "tuned 0 of 0", keys left pending)
        problems += _recorded_problems(target) if fleet_store is None else _pending_problems(fleet_store, target)
    if retune_stale:
        problems += _stale_problems(target)
    if not problems and not (from_recorded and fleet_store is not None):
        raise typer.BadParameter("nothing to tune: give --op/--shape, --suite, --from-recorded or --retune-stale")
    if allow_looser:  # in the problems themselves, so spawned workers build consenting regions too
        problems = [dataclasses.replace(p, attrs={**p.attrs, "accuracy": "looser"}) for p in problems]

    st = dispatch.store()
    env = envmod.environment(target)
    spent = budget_clock(budget_seconds)
    todo, seen = [], set()
    for i, problem in enumerate(problems):
        key = problem.key(target)  # no operands allocated until a key is actually tuned
        if key.id in seen:
            continue
        seen.add(key.id)
        if st.load_measurements(key.id, env.fingerprint) and not force:
            done = st.load_solution(key.id, env.fingerprint)
            console.print(lit(f"skip {problem.label}: tuned already ({done.candidate_name if done else '?'}); "
                              f"--force re-tunes"))
            continue
        todo.append((problem, i, key))
    if dry_run:
        for problem, _, key in todo:
            console.print(lit(f"would tune {problem.label}  [{key.id}]"))
        if from_recorded and fleet_store is not None:
            from arbiter.store.claims import pending

            for row in pending(fleet_store):
                if row["env"] == env.fingerprint:
                    console.print(lit(f"would tune recorded {row['key']} ({row['state']})"))
        return
    if workers > 1 or devices:
        _tune_parallel(console, [p for p, _, _ in todo], target, workers, devices, mode, isolate, budget_seconds)
        return
    if todo and (warning := cpu_threads.busy(target)):
        console.print(lit(f"warning: {warning}", "yellow"), highlight=False)
    inner = None
    if isolate:
        from arbiter.isolate import Isolated

        inner = Isolated()
    steps = Steps()
    runner = _Reporting(inner, steps)
    if fleet_store is not None:
        _tune_claimed(console, st, fleet_store, env, target, todo, runner, steps, mode, from_recorded, force,
                      watch, poll_seconds, watch_seconds, lease_seconds, budget_seconds)
        _print_json(target)
        return
    tuned = 0
    # The bar goes to stderr when that is a terminal; a log gets Steps' lines instead. markup=False: a key's
    # label (chain=mul[t]>...) is shown as it is.
    bar = make_console(stderr=True)
    with Progress(TextColumn("{task.description}", markup=False), BarColumn(),
                  TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(), console=bar,
                  transient=True, disable=not bar.is_terminal) as progress:
        keys_task = progress.add_task("keys", total=len(todo))
        for i, (problem, seed, _) in enumerate(todo, 1):
            if spent():
                console.print(lit(f"--budget-seconds reached; {len(todo) - tuned} key(s) left for the next run",
                                  "yellow"))
                break
            region = problem.region(target, seed=seed)
            n = sum(len(c.param_space()) for c in REGISTRY.candidates(region.target, region.op))
            steps.say(f"key {i}/{len(todo)} {problem.label}: gating and timing {n} solution(s)")
            started = time.perf_counter()
            cand_task = progress.add_task(f"  {problem.label}", total=n)
            try:
                decision = tune_region(region, st, mode=mode, runner=runner,
                                       progress=lambda row, m, task=cand_task: progress.advance(task))
            except NoCandidateError as exc:
                steps.say(f"key {i}/{len(todo)} {problem.label}: no solution passed the gate")
                console.print(lit(exc, "red"))
                continue
            finally:
                progress.remove_task(cand_task)
            steps.say(f"key {i}/{len(todo)} {problem.label}: {decision.winner.label} "
                      f"({why_chosen(decision.chosen_by, decision.margin, decision.note)}) "
                      f"in {time.perf_counter() - started:.1f} s")
            _report(console, problem.label, decision)
            tuned += 1
            progress.advance(keys_task)
    console.print(lit(f"tuned {tuned} key(s) on {target}; registry: {st!r}"))
    _print_json(target)


def _pending_problems(sql, target: str) -> list[Problem]:
    """The recorded keys of this host's environment that are not tuned there, with their recorded dims."""
    from arbiter.fleet import recorded_problem
    from arbiter.store.claims import Claims, pending

    env = envmod.environment(target).fingerprint
    claims = Claims(sql)
    return [recorded_problem(claims, row["key"], env) for row in pending(sql)
            if row["env"] == env and row["target"] == target and row["state"] != "failed"]


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


def _tune_claimed(console, st, sql, env, target, todo, runner, steps, mode, recorded, force, watch, poll_s,
                  watch_s, lease_s, budget_s):
    """The claim loop (``arbiter.fleet``): each key claimed with a lease, tuned, committed with its claim done."""
    import contextlib
    import signal
    import threading

    from arbiter import fleet
    from arbiter.store.claims import Claims

    claims = Claims(sql, lease_s=lease_s)
    stop = threading.Event()
    ends = [time.monotonic() + s for s in (watch_s, budget_s) if s is not None]
    seeds = {key.id: seed for _, seed, key in todo}

    total = "" if recorded else f"/{len(todo)}"  # recorded keys keep arriving: no total to count down
    count = [0]
    bar: KeyBar | None = None  # set while fleet.work runs

    def tune_key(problem, key_id):
        region = problem.region(target, seed=seeds.get(key_id, 0))
        count[0] += 1
        n = sum(len(c.param_space()) for c in REGISTRY.candidates(region.target, region.op))
        label = f"key {count[0]}{total} {problem.label}"
        steps.say(f"{label}: gating and timing {n} solution(s)" + (f" (claimed by {claims.holder})" if recorded
                                                                   else ""))
        started = time.perf_counter()
        try:
            with bar.key(problem.label, n) as advance:  # type: ignore[union-attr]  # set before fleet.work
                decision = tune_region(region, st, mode=mode, runner=runner, progress=advance)
        except NoCandidateError as exc:
            steps.say(f"{label}: no solution passed the gate")
            console.print(lit(exc, "red"))
            raise
        steps.say(f"{label}: {decision.winner.label} "
                  f"({why_chosen(decision.chosen_by, decision.margin, decision.note)}) "
                  f"in {time.perf_counter() - started:.1f} s")
        _report(console, problem.label, decision)
        return decision

    def event(kind, key_id, info):
        if kind == "lost":
            console.print(lit(f"lost {key_id}: {info['why']}", "yellow"))
        elif kind == "skipped":
            console.print(lit(f"skip {key_id}: tuned already"))
        elif kind == "failed" and info.get("decision") is None and not isinstance(info.get("error"), Exception):
            console.print(lit(f"failed {key_id}: {info['error']}", "red"))
        elif kind == "held":
            steps.say("waiting for " + ", ".join(f"{k} (claimed by {h}, lease ends in {e - time.time():.0f} s)"
                                                 for k, h, e in info["held"]))
        elif kind == "waiting":
            steps.say(f"no key left to claim under {env.fingerprint}; looking again every {info['poll_s']:g} s")

    def on_signal(signum, frame):
        if stop.is_set():  # a second signal: stop now; the key's claim is released (KeyboardInterrupt)
            raise KeyboardInterrupt
        console.print(lit(f"{signal.Signals(signum).name}: stopping after the current key", "yellow"))
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)} \
        if watch else {}
    try:
        with fleet.stopping_on_signals() if not watch else contextlib.nullcontext(), \
                key_bar(None if recorded else len(todo)) as bar:
            outcome = fleet.work(st, claims, env.fingerprint, tune_key, problems={k.id: p for p, _, k in todo},
                                 recorded=recorded, force=force, watch=watch, poll_s=poll_s,
                                 until=min(ends) if ends else None, stop=stop, on_event=event)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if budget_s is not None and not watch and time.monotonic() >= min(ends):
        console.print(lit("--budget-seconds reached; the keys left stay open for the next run", "yellow"))
    console.print(lit(f"tuned {len(outcome.tuned)} key(s) on {target} under {env.fingerprint}"
                      + (f", {len(outcome.failed)} failed" if outcome.failed else "")
                      + (f", {len(outcome.lost)} lost to another host" if outcome.lost else "")
                      + f"; registry: {st!r}"))
    if recorded and not (outcome.tuned or outcome.failed or outcome.lost):
        console.print(lit(f"nothing recorded to tune under {env.fingerprint}: production records the keys it "
                          f"misses under policy record (ARBITER_POLICY=record); `arbiter stats --pending` lists "
                          f"them", "yellow"), highlight=False)


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
        from arbiter.verify import verify

        return self._timed("gate", self.inner.verify or verify, candidate, params, *args, **kwargs)

    def measure(self, candidate, params, *args, **kwargs):
        return self._timed("timed", self.inner.measure, candidate, params, *args, **kwargs)


def _tune_parallel(console, problems, target, workers, devices, mode, isolate, budget_seconds):
    from arbiter.parallel import tune_parallel

    device_ids = None
    if devices:
        try:
            device_ids = [int(d) for d in devices.split(",") if d.strip()]
        except ValueError:
            raise typer.BadParameter(f"{devices!r} is not like 0,1,2", param_hint="--devices") from None

    steps = Steps()

    def event(kind, label, info):
        if kind in ("retry", "lost", "failed"):
            console.print(Text.assemble((kind, "yellow"), " ", lit(f"{label}: {str(info).splitlines()[0]}")))
        elif kind == "start":
            steps.say(f"key {label}: started on worker {info['worker']}")
        elif kind == "done":
            steps.say(f"key {label}: {info['winner']} ({info['policy']})")

    try:
        outcome = tune_parallel(problems, target, workers=workers, devices=device_ids, mode=mode, isolate=isolate,
                                on_event=event)
    except WorkersDied as exc:  # what was tuned before is committed; say why the rest was not, in one line
        error(exc)
        raise typer.Exit(1) from None
    table = Table(title=f"tuned {len(outcome.tuned)} of {len(problems)} key(s) with "
                        f"{len(device_ids) if device_ids else workers} worker(s) in {outcome.seconds:.1f} s",
                  title_justify="left")
    for col in ("problem", "winner", "policy", "margin", "device", "environment"):
        table.add_column(col, no_wrap=col in ("policy", "margin", "device"))
    for label, info in outcome.tuned.items():
        table.add_row(lit(label), lit(info["winner"]), info["policy"],
                      "" if info["margin"] is None else f"{info['margin'] * 100:+.1f}%",
                      "" if info["device"] is None else str(info["device"]), lit(info["env"]))
    show(console, table)
    if outcome.lost or outcome.failed:
        raise typer.Exit(1)


@app.command()
@friendly
def explain(
    key: str | None = typer.Argument(None, help="A problem key as `arbiter stats` prints it (instead of --op, "
                                                "--shape, ...)."),
    op: str = typer.Option(None, help="Op: matmul, softmax, rmsnorm, ..."),
    shape: str = typer.Option(None, help="Shape like 512x512x512 (matmul MxNxK) or 4096x1024 (rows x cols)."),
    dtype: str = typer.Option("float32", help="Dtype."),
    activation: str = typer.Option("none", help="matmul epilogue activation."),
    bias: bool = typer.Option(False, help="matmul epilogue: add a bias."),
    residual: bool = typer.Option(False, help="matmul epilogue: add a residual."),
    attr: list[str] = typer.Option([], "--attr", help="Op attribute name=value (causal=1, kind=r2c, "
                                                       "chain=mul[t]>relu, ...)."),
    target: str = typer.Option("cpu", help="Target: cpu, nvidia or rocm."),
    source: str | None = typer.Option(None, help="Also print the code of this candidate (e.g. a synthesized kernel)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    allow_looser: bool = typer.Option(False, "--allow-looser", help="Explain the key that consents to candidates "
                                      "declaring accuracy looser than the op's budget (accuracy=looser)."),
):
    """For one key: every solution with its exclusion reason, verdict and error, stored timings, and why the winner won."""  # noqa: E501 (one line: it is the command's help)
    console = make_console()
    if allow_looser:
        dispatch.configure(looser_accuracy=True)
    if key is not None:
        if op or shape:
            raise typer.BadParameter("give a KEY or --op/--shape, not both", param_hint="KEY")
        region, label = _region_of_key(key)
        target, op = region.target, region.op
        require_target(target)
    else:
        if not op or not shape:
            raise typer.BadParameter("give a KEY (as `arbiter stats` prints it), or --op and --shape",
                                     param_hint="--op" if not op else "--shape")
        require_target(target)
        [problem] = problems_from_options(op, [shape], [dtype], activation, bias, residual, attr)
        region, label = problem.region(target), problem.label
    st = dispatch.store()
    try:
        decision = select.decide(region, st, gate_all=True, all_params=True)
    except NoCandidateError as exc:
        console.print(lit(exc, "red"))
        raise typer.Exit(1) from None
    stored = st.load_solution(region.key.id, decision.env.fingerprint)
    rows = explain_rows(decision, st)
    if stored is not None:
        for row, r in zip(rows, decision.rows):
            row["winner"] = r.solution == stored.solution
    why = (f"stored solution {stored.solution.label}: "
           f"{why_chosen(stored.chosen_by, stored.margin, stored.note)}") if stored else \
        f"no stored solution; tier priority would choose {decision.winner.label}"
    if as_json:
        print(json.dumps({"key": region.key.id, "why": why, "rows": rows}, indent=2, default=str))
        return
    table = Table(title=lit(f"EXPLAIN {label}  [{region.key.id}]"), title_justify="left")
    for col in ("solution", "tier", "status", "reason / rel error", "device µs", "latency µs", "spread", ""):
        table.add_column(col, no_wrap=col in ("status", "device µs", "latency µs", "spread"))
    for d in rows:
        detail = d["reason"] or (f"{d['rel_error']:.2e}" if d["rel_error"] is not None and
                                 not np.isnan(d["rel_error"]) else "")
        if d["looser_budget"]:
            detail += " (declared budget, looser than published)"
        tier = d["tier"] + (f"\n{d['contract']}" if d["contract"] else "")  # a delegate shows its contract
        table.add_row(lit(d["solution"]), lit(tier), d["status"], lit(shorten(detail)), _fmt_us(d["device_us"] and
                      d["device_us"] * 1e-6), _fmt_us(d["latency_us"] and d["latency_us"] * 1e-6),
                      f"{d['spread'] * 100:.1f}%" if d["spread"] is not None else "",
                      ("WINNER" + (" (screened)" if d["screened"] else "")) if d["winner"] else "")
    table.caption = lit(why)
    table.caption_justify = "left"
    show(console, table)
    if source:
        cand = REGISTRY.get(source, target, op)
        if cand is None:
            raise typer.BadParameter(f"no candidate {source!r} for {target}/{op}", param_hint="--source")
        render = getattr(cand, "source_for", None)
        console.print(render(region) if render else cand.source(), markup=False, highlight=False)
