"""``arbiter run``: the main job."""
from __future__ import annotations

import json
import os
import shlex
import time

import typer
from rich.table import Table

import arbiter
from arbiter import cpu_threads, dispatch, request, select, targets
from arbiter import env as envmod
from arbiter.candidates import REGISTRY
from arbiter.cli.common import app, friendly, lit, open_for_writing
from arbiter.cli.common import console as make_console
from arbiter.cli.output import Steps, ratio_text, show
from arbiter.cli.progress import key_bar
from arbiter.decide import decide
from arbiter.errors import NoCandidateError
from arbiter.select import Status
from arbiter.solution import ChosenBy, Solution, TimingMode
from arbiter.store import VerdictKey
from arbiter.suite import suite as get_suite

RUN_HELP = """Arbitrate a built-in suite and dispatch it through run_arbitrated.

For each key without a stored solution (policy tune, the default): gate every candidate against the
float64 oracle, time every solution that passed, and store the winner. Then dispatch each problem
--calls times and print per key the winner, how it was chosen (measured, or the tier default when no
margin beat the noise), its margin and over which solution (the runner-up for a tier default, the
tier default for any other winner), and how many solutions failed the gate. A second
run serves every key from the registry, computes no verdict and no timing, and says so.

--policy strict computes nothing: it lists every key the registry lacks and the command that fills
them, and exits 2. --policy tier gates candidates in tier order and keeps the first that passes
(no timing).
"""


def _fill_command(suite: str, target: str) -> str:
    words = ["arbiter"]
    if os.environ.get("ARBITER_DB"):
        words += ["--db", os.environ["ARBITER_DB"]]
    words += ["tune", "--suite", suite] + ([] if target == "cpu" else ["--target", target])
    return shlex.join(words)


def _gate_counts(region, st, env):
    """(solutions that failed the gate, solutions gated, the tier default) for the key, from the stored
    verdicts only. The tier default is the first solution in tier order that passed."""
    failed = gated = 0
    default = None
    for row in select.screen(region, all_params=True):
        if row.status != Status.PENDING:
            continue  # excluded (unavailable, does not apply): never gated
        solution = Solution.of(row.candidate, row.params)
        verdict = st.load_verdict(VerdictKey.of(solution, region.key.id, env.fingerprint))
        if verdict is not None:
            gated += 1
            failed += not verdict.passed
            if verdict.passed and default is None:
                default = solution
    return failed, gated, default


def _margin(record, st, key_id, env, default: Solution | None) -> tuple[str, str]:
    """(the winner's margin, the solution it is over), as the tuner compared them: a tier default over
    the fastest other solution (negative when that one was faster but within the noise), any other
    winner over the tier default; from the stored timings and the stored margin."""
    timings = {m.solution: m for m in st.load_measurements(key_id, env.fingerprint) if m.mode == TimingMode.DEVICE}
    me = record.solution
    if me not in timings or len(timings) < 2:
        return "", ""
    if default is not None and default != me and default in timings:
        rival = default
    else:
        # Screened solutions keep a short estimate (3 or 10 repetitions): ranked last, as the tuner does.
        rival = min((k for k in timings if k != me), key=lambda k: (timings[k].screened, timings[k].median_s))
    spread = max(timings[me].spread, timings[rival].spread)
    if record.chosen_by == ChosenBy.TIER and "not separated" in (record.note or ""):
        # The tier default stayed because no margin beat the noise: a ratio of medians here ("92x slower ±99%")
        # would contradict the choice it explains (the tuner decided on paired rounds; explain shows them).
        return f"within noise ±{spread * 100:.0f}%", rival.label
    margin = record.margin if record.chosen_by == ChosenBy.MEASURED and record.margin is not None else \
        timings[rival].median_s / timings[me].median_s - 1.0
    return ratio_text(margin, spread, short=True), rival.label


def _how(record, decided_now: bool) -> str:
    """How the winner was chosen: measured (fastest beyond the noise), or the tier default and why."""
    if record.chosen_by in (ChosenBy.MEASURED, ChosenBy.FORCED):
        how = str(record.chosen_by)
    else:
        note = record.note or ""
        # the note's detail (who is faster, the spread) is in the margin and runner-up columns
        why = ("not separated" if "not separated" in note else
               "no other solution to time" if note.startswith("no other solution") else note.split(":")[0])
        how = f"tier default: {why}" if why else "tier default: first to pass the gate (untimed)"
    return how + ("" if decided_now else " (stored)")


def _one_key(console, steps, bar, i, total, problem, region, policy, missing, decided, calls, st, env):
    """Decide (policy tune: gate and time now) and dispatch one key of the suite: (its row, verdicts computed,
    timings taken), or None when no candidate passed the gate."""
    verdicts = timed = 0
    tuning = policy == "tune" and any(r is region for _, r in missing)
    solutions = sum(len(c.param_space()) for c in REGISTRY.candidates(region.target, region.op)) if tuning else None
    with bar.key(problem.label, solutions) as advance:
        if tuning:
            steps.say(f"key {i}/{total} {problem.label}: gating and timing")
            try:
                decision = decide(region, request.tune(mode=TimingMode.DEVICE, progress=advance), st)
            except NoCandidateError as exc:
                console.print(lit(str(exc), "red"))
                return None
            verdicts += decision.verified_now
            timed += sum(r.timing is not None for r in decision.rows)
            decided.add(region.key.id)
        for _ in range(calls):
            arbiter.run_arbitrated(problem.op, region, policy="tier" if policy == "tune" else policy)
    route = dispatch.route(region.key.id)
    assert route is not None  # run_arbitrated above installed it
    record = st.load_solution(region.key.id, env.fingerprint)
    failed, gated, default = _gate_counts(region, st, env)
    margin, runner_up = _margin(record, st, region.key.id, env, default) if record else ("", "")
    now = region.key.id in decided or any(r is region for _, r in missing)
    steps.say(f"key {i}/{total} {problem.label}: {route.label} ({route.chosen_by})")
    return ({"problem": problem.label, "key": region.key.id, "winner": route.label,
             "how_chosen": _how(record, now) if record else "", "margin": margin, "over": runner_up,
             "gate_failed": failed, "gated": gated, "hits": route.hits, "loads": route.loads, "misses": route.misses},
            verdicts, timed)


@app.command(help=RUN_HELP)
@friendly
def run(
    suite: str = typer.Option("quick", help="Built-in suite of problems to arbitrate."),
    target: str = typer.Option("cpu", help="Target to run on: cpu, nvidia or rocm."),
    calls: int = typer.Option(3, min=1, help="Dispatches per problem."),
    policy: str = typer.Option(None, help="For keys the registry lacks: tune (gate every candidate and time "
                                          "the solutions), tier, record or strict (default: $ARBITER_POLICY, "
                                          "else tune)."),
    as_json: bool = typer.Option(False, "--json", help="Print the decisions as JSON instead of the table."),
):
    console = make_console(stderr=as_json)  # with --json, stdout carries the JSON alone
    policy = policy or os.environ.get("ARBITER_POLICY") or "tune"
    if policy not in dispatch.POLICIES:
        raise typer.BadParameter(f"{policy!r} is not one of {', '.join(dispatch.POLICIES)}", param_hint="--policy")
    problems = get_suite(suite)
    open_for_writing()
    st = dispatch.store()
    env = envmod.environment(target)
    start = time.perf_counter()
    regions = [problem.region(target, seed=i) for i, problem in enumerate(problems)]
    missing = [(p, r) for p, r in zip(problems, regions) if st.load_solution(r.key.id, env.fingerprint) is None]
    if policy == "strict" and missing:
        console.print(lit(f"policy strict: {len(missing)} of {len(problems)} key(s) of suite {suite!r} have no "
                          f"solution stored for this environment:", "red"), highlight=False)
        for problem, region in missing:
            console.print(lit(f"  {problem.label}  [{region.key.id}]"), highlight=False)
        console.print(lit(f"fill them (gate and time every candidate; keys already tuned are skipped):\n"
                          f"  {_fill_command(suite, target)}"), highlight=False)
        raise typer.Exit(2)

    if policy == "tune" and missing and (warning := cpu_threads.busy(targets.get(target).host_cores)):
        console.print(lit(f"warning: {warning}", "yellow"), highlight=False)
    verdicts, timed, decided, rows = 0, 0, set[str](), list[dict]()
    table = Table(title=lit(f"decisions: suite {suite!r} on {target}, policy {policy}"), title_justify="left")
    for col in ("problem", "winner", "how chosen", "margin", "over", "gate failed", "hits", "loads", "misses"):
        table.add_column(col, overflow="fold", no_wrap=col == "margin")  # "1.90x faster ±7%" stays one line
    steps = Steps()  # a log gets a line per key (nothing is shown until the table otherwise)
    with key_bar(len(problems)) as bar:  # on stderr, only on a terminal
        for i, (problem, region) in enumerate(zip(problems, regions), 1):
            row = _one_key(console, steps, bar, i, len(problems), problem, region, policy, missing, decided, calls,
                           st, env)
            if row is not None:
                rows.append(row[0])
                verdicts += row[1]
                timed += row[2]

    arbiter.flush()
    verdicts += dispatch.verified_count()
    seconds = time.perf_counter() - start
    if as_json:
        print(json.dumps({"suite": suite, "target": target, "policy": policy, "decided_now": len(missing),
                          "verdicts": verdicts, "timings": timed, "seconds": round(seconds, 3), "keys": rows,
                          "registry": repr(st)}, indent=1))
        return
    for r in rows:
        table.add_row(lit(r["problem"]), lit(r["winner"]), lit(r["how_chosen"]), r["margin"], lit(r["over"]),
                      f"{r['gate_failed']} of {r['gated']}", str(r["hits"]), str(r["loads"]), str(r["misses"]))
    show(console, table)
    if not missing:
        console.print(lit(f"all {len(problems)} keys served from the registry: {verdicts} verdicts and {timed} "
                          f"timings computed ({len(problems)} x {calls} calls in {seconds:.2f} s); "
                          f"registry: {st!r}"), highlight=False)
    else:
        console.print(lit(f"{len(missing)} of {len(problems)} keys decided now: {verdicts} verdicts and {timed} "
                          f"timings computed, {len(problems) - len(missing)} served from the registry; "
                          f"{len(problems)} x {calls} calls in {seconds:.2f} s; registry: {st!r}"),
                      highlight=False)
