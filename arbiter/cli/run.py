"""``arbiter run``: the main job."""
from __future__ import annotations

import time

import typer
from rich.console import Console
from rich.table import Table

import arbiter
from arbiter import dispatch
from arbiter.cli import app
from arbiter.suite import suite as get_suite


@app.command()
def run(
    suite: str = typer.Option("quick", help="Built-in suite of problems to arbitrate."),
    target: str = typer.Option("cpu", help="Target to run on: cpu, nvidia or rocm."),
    calls: int = typer.Option(3, min=1, help="Dispatches per problem after the decision."),
    policy: str = typer.Option(None, help="Miss policy: tier, tune, record or strict (default: $ARBITER_POLICY or tier)."),
):
    """Arbitrate a built-in suite: gate every candidate, choose per key, dispatch, print decisions and counters."""
    console = Console()
    problems = get_suite(suite)
    decisions = Table(title=f"decisions: suite {suite!r} on {target}")
    for col in ("problem", "key", "winner", "tier", "policy", "rel error", "verified"):
        decisions.add_column(col)
    start = time.perf_counter()
    for i, problem in enumerate(problems):
        region = problem.region(target, seed=i)
        for _ in range(calls):
            arbiter.run_arbitrated(problem.op, region, policy=policy)
        route = dispatch._table[region.key.id]
        decisions.add_row(problem.label, region.key.id, route.label, route.candidate.tier.name, route.policy,
                          "", "")
    console.print(decisions)
    counters = Table(title="dispatch counters")
    for col in ("key", "solution", "policy", "hits", "misses", "fallbacks"):
        counters.add_column(col)
    for row in arbiter.stats():
        counters.add_row(row["key"], row["solution"], row["policy"], str(row["hits"]), str(row["misses"]),
                         str(row["fallbacks"]))
    console.print(counters)
    console.print(f"{len(problems)} problems, {dispatch.verified_count()} verdicts computed in this process, "
                  f"{time.perf_counter() - start:.2f} s")
    arbiter.flush()
