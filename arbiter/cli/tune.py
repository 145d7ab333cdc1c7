"""``arbiter tune`` and ``arbiter explain``: measured selection from the command line."""
from __future__ import annotations

import json

import numpy as np
import typer
from rich.table import Table

from arbiter import dispatch, request
from arbiter.candidates import REGISTRY
from arbiter.cli.common import app, friendly, lit, open_for_writing, require_target
from arbiter.cli.common import console as make_console
from arbiter.cli.output import Steps, ratio_text, show
from arbiter.cli.tune_run import TuneRun, execute, parse_devices, plan, show_plan
from arbiter.decide import decide
from arbiter.errors import NoCandidateError, unknown
from arbiter.keys import ProblemKey
from arbiter.ops import OPS, op_kind
from arbiter.regions import LOOSER_ATTR
from arbiter.select import Status
from arbiter.solution import ChosenBy
from arbiter.suite import Problem
from arbiter.suite import suite as get_suite
from arbiter.tune import explain_rows


def parse_shape(op: str, text: str) -> dict:
    """'512x512x512' -> {'m': 512, 'n': 512, 'k': 512} in the op's dimension order; every size at least 1 (a key of
    an empty problem has nothing to gate or time)."""
    names = op_kind(op).region_type.DIMS
    try:
        values = [int(v) for v in text.lower().split("x")]
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not like {'x'.join(['64'] * len(names))} ({op}: {'x'.join(names)})",
                                 param_hint="--shape") from None
    if len(values) != len(names) or any(v < 1 for v in values):
        raise typer.BadParameter(f"{op} takes {len(names)} sizes of at least 1 ({'x'.join(names)}), got {text!r}",
                                 param_hint="--shape")
    return dict(zip(names, values))


def check_dtype(op: str, dtype: str, hint: str = "--dtype") -> str:
    """``dtype`` when ``op`` takes it; BadParameter naming the option, the closest dtype and the accepted ones."""
    accepted = op_kind(op).region_type.dtypes
    if dtype not in accepted:
        raise typer.BadParameter(unknown('dtype', dtype, accepted, f'{op} takes'), param_hint=hint)
    return dtype


def check_attrs(op: str, attrs: dict, hint: str = "--attr") -> dict:
    """``attrs`` when ``op`` reads every one of them (else it would be ignored silently): BadParameter otherwise."""
    accepted = (*op_kind(op).region_type.ATTRS, LOOSER_ATTR[0])
    for name in attrs:
        if name not in accepted:
            raise typer.BadParameter(unknown("attribute", name, accepted, f"{op} takes"), param_hint=hint)
    return attrs


def problems_from_options(op, shapes, dtypes, activation, bias, residual, attr=()) -> list[Problem]:
    if op not in OPS:
        raise typer.BadParameter(unknown("op", op, OPS), param_hint="--op")
    attrs = {}
    for item in attr:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise typer.BadParameter(f"{item!r} is not like name=value", param_hint="--attr")
        attrs[name.strip()] = value.strip()
    check_attrs(op, attrs)
    if op == "matmul":
        attrs = {"activation": activation, "bias": "1" if bias else "0", "residual": "1" if residual else "0",
                 **attrs}
    elif activation != "none" or bias or residual:
        given = "--activation" if activation != "none" else "--bias" if bias else "--residual"
        raise typer.BadParameter(f"is matmul's epilogue; {op} has none", param_hint=given)
    return [Problem(op, parse_shape(op, s), check_dtype(op, d), attrs) for s in shapes for d in dtypes]


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


def _once_per_reason(items) -> list[tuple]:
    """(row, label) per row of ``items`` = (row, candidate, status, reason, label, mergeable) tuples: the mergeable
    rows of one candidate that share a status and reason (its parameter sets excluded for one cause) merged into
    one, "numba_gemv (3 parameter sets)", so a reason is printed once."""
    merged: dict[tuple, list] = {}
    order: list = []
    for row, candidate, status, reason, label, mergeable in items:
        if mergeable:
            group = merged.setdefault((candidate, status, reason), [])
            if not group:
                order.append(group)
            group.append((row, candidate, label))
        else:
            order.append([(row, candidate, label)])
    return [(group[0][0], group[0][2] if len(group) == 1 else f"{group[0][1]} ({len(group)} parameter sets)")
            for group in order]


def autotune_table(problem_label: str, decision) -> Table:
    table = Table(title=lit(f"AUTOTUNE {problem_label}"), title_justify="left")
    for col in ("solution", "tier", "verdict", "median µs", "spread", "reps", ""):
        table.add_column(col, no_wrap=col in ("tier", "median µs", "spread", ""))
    for row, label in _once_per_reason((r, r.candidate.name, r.status, r.reason, r.label,
                                        r.timing is None and r.status != Status.PASSED) for r in decision.rows):
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


class _Printer:
    """Where ``arbiter tune`` prints (``tune_run``'s ``out``): its console and Steps, and each tuned key as an
    AUTOTUNE table, or (--json) kept for the JSON printed at the end."""

    def __init__(self, as_json: bool):
        self.console = make_console(stderr=as_json)  # with --json, stdout carries the JSON alone
        self.steps = Steps()
        self.as_json = as_json
        self.tuned: list[dict] = []

    @staticmethod
    def why(decision) -> str:
        return why_chosen(decision.chosen_by, decision.margin, decision.note)

    def report(self, label: str, decision) -> None:
        if not self.as_json:
            show(self.console, autotune_table(label, decision))
            return
        self.tuned.append({"problem": label, "key": decision.key.id,
                           "winner": decision.winner.label, "chosen_by": str(decision.chosen_by),
                           "margin": decision.margin, "note": decision.note,
                           "solutions": [{"solution": r.label, "tier": r.candidate.tier.name,
                                          "status": str(r.status), "reason": r.reason,
                                          "median_us": r.timing.median_s * 1e6 if r.timing else None,
                                          "spread": r.timing.spread if r.timing else None}
                                         for r in decision.rows]})

    def print_json(self, target: str) -> None:
        if self.as_json:
            print(json.dumps({"target": target, "tuned": self.tuned}, indent=1, default=str))


def _region_of_key(text: str):
    """(region, label) of a problem key's text: an instance at the bucket's bound, in the key's layout."""
    try:
        key = ProblemKey.parse(text)
        kind = op_kind(key.op)
    except (ValueError, KeyError) as exc:
        raise typer.BadParameter(f"{text!r} is not a problem key as `arbiter stats` prints it "
                                 f"(target:op:dtype:layout:attrs:bucket): {exc}", param_hint="KEY") from None
    dims = {n: max(v, 1) for n, v in key.bucket}
    names = kind.region_type.DIMS
    if sorted(dims) != sorted(names):
        missing, extra = [n for n in names if n not in dims], [n for n in dims if n not in names]
        raise typer.BadParameter(
            f"{text!r}: a {key.op} key's bucket names {', '.join(names)} (like "
            f"{','.join(f'{n}64' for n in names)})" + (f"; {', '.join(missing)} missing" if missing else "") +
            (f"; {', '.join(extra)} unknown" if extra else "") + "; `arbiter stats` prints the stored keys",
            param_hint="KEY")
    check_dtype(key.op, key.dtype, "KEY")
    attrs = dict(key.attrs)
    region = kind.region_type.random(key.target, key.dtype, dims, attrs, layout=key.layout,
                                     rng=np.random.default_rng(0))
    if attrs.get("accuracy") == "looser":
        region = region.allow_looser()
    return region, Problem(key.op, dims, key.dtype, attrs).label


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
    require_target(target)
    if op and not shape:
        raise typer.BadParameter("give at least one --shape with --op", param_hint="--shape")
    problems = (get_suite(suite) if suite else []) + \
        (problems_from_options(op, shape, dtype, activation, bias, residual, attr) if op else [])
    if not dry_run:
        open_for_writing()
    run = TuneRun(target=target, problems=tuple(problems), from_recorded=from_recorded, retune_stale=retune_stale,
                  allow_looser=allow_looser, env_fingerprint=env_fingerprint, mode=mode, budget_s=budget_seconds,
                  force=force, dry_run=dry_run, workers=workers, devices=parse_devices(devices), isolate=isolate,
                  watch=watch, poll_s=poll_seconds, watch_s=watch_seconds, lease_s=lease_seconds, as_json=as_json)
    out = _Printer(as_json)
    planned = plan(run, out)
    for problem, winner in planned.skipped:
        out.console.print(lit(f"skip {problem.label}: tuned already ({winner}); --force re-tunes"))
    if run.dry_run:
        show_plan(run, planned, out)
        return
    execute(run, planned, out)
    if not run.parallel:
        out.print_json(target)


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
        decision = decide(region, request.explain(), st)
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
    for d, label in _once_per_reason((d, r.candidate.name, d["status"], d["reason"], d["solution"],
                                      r.status == Status.EXCLUDED and not d["winner"])
                                     for d, r in zip(rows, decision.rows)):
        detail = d["reason"] or (f"{d['rel_error']:.2e}" if d["rel_error"] is not None and
                                 not np.isnan(d["rel_error"]) else "")
        if d["looser_budget"]:
            detail += " (declared budget, looser than published)"
        tier = d["tier"] + (f"\n{d['contract']}" if d["contract"] else "")  # a delegate shows its contract
        table.add_row(lit(label), lit(tier), d["status"], lit(shorten(detail)), _fmt_us(d["device_us"] and
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
