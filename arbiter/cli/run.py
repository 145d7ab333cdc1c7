"""``arbiter run``: the main job."""
from __future__ import annotations

import time

import typer
from rich.table import Table

import arbiter
from arbiter import dispatch
from arbiter import env as envmod
from arbiter.candidates import params_id
from arbiter.cli import app, console as make_console, friendly, lit
from arbiter.cli.output import Steps, show
from arbiter.store import VerdictKey
from arbiter.suite import suite as get_suite


@app.command()
@friendly
def run(
    suite: str = typer.Option("quick", help="Built-in suite of problems to arbitrate."),
    target: str = typer.Option("cpu", help="Target to run on: cpu, nvidia or rocm."),
    calls: int = typer.Option(3, min=1, help="Dispatches per problem."),
    policy: str = typer.Option(None, help="Miss policy: tier, tune, record or strict "
                                          "(default: $ARBITER_POLICY, else tier)."),
):
    """Dispatch a built-in suite through run_arbitrated: gate every candidate, choose per key, print decisions and counters."""
    console = make_console()
    problems = get_suite(suite)
    st = dispatch.store()
    start = time.perf_counter()
    table = Table(title=f"decisions: suite {suite!r} on {target}", title_justify="left")
    for col in ("problem", "bucket", "winner", "tier", "policy", "rel error", "hits", "loads", "misses", "fallb."):
        table.add_column(col, overflow="fold")
    steps = Steps()  # a log gets a line per key (nothing is shown until the table otherwise)
    for i, problem in enumerate(problems):
        region = problem.region(target, seed=i)
        for _ in range(calls):
            arbiter.run_arbitrated(problem.op, region, policy=policy)
        route = dispatch._table[region.key.id]
        steps.say(f"key {i + 1}/{len(problems)} {problem.label}: {route.label} ({route.policy})")
        env = envmod.environment(region.target)
        verdict = st.load_verdict(VerdictKey(route.candidate.identity(), params_id(route.params), region.key.id,
                                             env.fingerprint))
        table.add_row(lit(problem.label), region.key.shape_text, lit(route.label), route.candidate.tier.name, route.policy,
                      f"{verdict.rel_error:.1e}" if verdict else "", str(route.hits), str(route.loads), str(route.misses),
                      str(route.fallbacks))
    show(console, table)
    arbiter.flush()
    console.print(lit(f"{len(problems)} problems x {calls} calls in {time.perf_counter() - start:.2f} s; "
                  f"{dispatch.verified_count()} verdicts computed in this process "
                  f"(0 when the registry is warm); registry: {st!r}"))
