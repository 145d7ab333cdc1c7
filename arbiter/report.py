"""``arbiter report``: the registry's decisions as one self-contained HTML page.

``collect(layers)`` reads SQL registries (``[("user", SqlStore), ("system", SqlStore)]``)
into a ``Report``: one ``Section`` per (environment, target, op, dtype) holding,
per problem key, the stored solution, every stored measurement, the gate's
failed verdicts and the dispatch counters; plus the stale solutions (stored
under an environment that differs from this machine's) with what changed.
``render(report)`` turns it into HTML; ``write(layers, out_dir)`` does both.

What is plotted: per section, one figure per *family* of keys (same layout, same attributes, same
dimensions of size 1: a GEMV is not a point on the square-GEMM curve, causal attention not one on the
non-causal curve), time and throughput versus problem size on a log axis, one line per solution.
Every environment not known to be stale is plotted. An environment whose
target cannot be checked here (a GPU registry read on a laptop) is plotted and
marked "not checked", so a fleet's registry can be read anywhere.

Plots are PNGs from matplotlib's Agg canvas, embedded as base64: the page needs
no network and no other file. matplotlib is the optional ``report`` extra;
without it the page has every table and says how to get the plots.

Throughput. Work (2mnk FLOP for matmul; bytes read + written for row ops) is
counted at the exact shape each measurement timed (stored since schema v3);
measurements from older registries fall back to the bucket's upper bound, an
upper estimate unless the tuned shape was the bound. The page says which.
"""
from __future__ import annotations

import base64
import html
import io
import math
import os
import re
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from arbiter.audit import AUDIT_PREFIX
from arbiter.keys import ProblemKey
from arbiter.ops import OPS
from arbiter.solution import Solution, TimingMode
from arbiter.store import CountDelta, MeasurementRecord, SolutionRecord, inventory

if TYPE_CHECKING:
    from arbiter.store.sql import SqlStore

def _work_of(section, k, m):
    """Work of one measurement: at the dims it timed, or at its key's bucket bound (older registries)."""
    return work(section.op, m.dims or dict(k.key.bucket), section.dtype)


def work(op: str, dims: dict[str, int], dtype: str) -> tuple[float, str] | None:
    """(amount, "FLOP" | "B") one call of ``op`` at ``dims`` does; None when no model is known for the op, or
    the dims are not the op's (a key stored with another op's bucket, by a registry that predates the check).
    The model is the op kind's (``OpKind.work``)."""
    kind = OPS.get(op)
    return None if kind is None or kind.work is None else kind.work(dims, dtype)


@dataclass
class Rejected:
    solution: Solution
    reason: str
    rel_error: float


@dataclass
class KeyEntry:
    """One problem key under one environment: what was decided and what it rests on."""

    key: ProblemKey
    layer: str
    record: SolutionRecord | None  # the stored winner; None when every solution failed the gate
    measurements: list[MeasurementRecord]
    rejected: list[Rejected]
    counts: list[CountDelta]
    looser: dict[str, Any]  # solution label -> its Budget, for solutions that passed under a declared looser one

    @property
    def size(self) -> int:
        return math.prod(max(v, 1) for _, v in self.key.bucket)

    @property
    def winner(self) -> str | None:
        """The winner's label."""
        return None if self.record is None else self.record.solution.label


@dataclass
class Section:
    target: str
    op: str
    dtype: str
    env: str
    keys: list[KeyEntry]

    @property
    def title(self) -> str:
        return f"{self.target} · {self.op} · {self.dtype}"

    @property
    def anchor(self) -> str:
        return f"{self.target}-{self.op}-{self.dtype}-{self.env}"


@dataclass
class StaleEntry:
    layer: str
    record: SolutionRecord
    changed: dict[str, tuple[str | None, str | None]]  # field -> (stored, now); {} when the stored fields are unknown


@dataclass
class Report:
    registry: str
    created: datetime
    environments: dict[str, dict]  # fingerprint -> {"target", "fields", "state", "why"}
    sections: list[Section]
    stale: list[StaleEntry]
    zero_hit: int = 0  # current solutions nobody dispatched


def collect(layers: list[tuple[str, SqlStore]], *, target: str | None = None, op: str | None = None) -> Report:
    """Read every layer (user first: it wins a (key, environment) both hold) into a ``Report``."""
    envs = inventory.environments(layers)
    solutions = inventory.solutions(layers)
    rejected: dict[tuple[str, str], list[Rejected]] = {}
    looser: dict[tuple[str, str], dict[str, Any]] = {}  # label -> its declared Budget
    for _name, sql in layers:
        for imported in (False, True):
            for vkey, candidate_name, verdict in sql.verdicts(imported=imported):
                solution = Solution.from_text(candidate_name, vkey.params_id, vkey.identity)
                if not verdict.passed:
                    # A verdict from a file was not computed by this installation's gate: said so, not hidden
                    reason = f"imported, not verified here: {verdict.reason}" if imported else verdict.reason
                    rejected.setdefault((vkey.key, vkey.env), []).append(
                        Rejected(solution, reason, verdict.rel_error))
                elif verdict.looser_budget and not imported:
                    looser.setdefault((vkey.key, vkey.env), {})[solution.label] = verdict.budget
    counts: dict[tuple[str, str], list[CountDelta]] = {}
    if layers:
        for c in layers[0][1].counts():  # counters are the user's own dispatches
            counts.setdefault((c.key, c.env), []).append(c)

    def wanted(key: ProblemKey) -> bool:
        return (target is None or key.target == target) and (op is None or key.op == op)

    entries: dict[tuple[str, str, str, str], list[KeyEntry]] = {}
    stale: list[StaleEntry] = []
    for key_id, env in sorted(set(solutions) | set(rejected) | set(counts)):
        key = ProblemKey.parse(key_id)
        info = envs.get(env, {"state": "not checked", "fields": {}, "target": key.target})
        if not wanted(key):
            continue
        layer, record = solutions.get((key_id, env), (layers[0][0] if layers else "user", None))
        if info["state"] == "stale":
            if record is not None:
                stale.append(StaleEntry(layer, record, inventory.changed(key.target, info["fields"], env,
                                                                         info["now"])))
            continue
        measurements = []
        for _, sql in layers:
            measurements = sql.load_measurements(key_id, env)
            if measurements:
                break
        entries.setdefault((key.target, key.op, key.dtype, env), []).append(KeyEntry(
            key, layer, record, measurements, rejected.get((key_id, env), []), counts.get((key_id, env), []),
            looser.get((key_id, env), {})))

    sections = [Section(t, o, d, e, sorted(keys, key=lambda k: (k.size, k.key.id)))
                for (t, o, d, e), keys in sorted(entries.items())]
    zero = sum(1 for s in sections if envs.get(s.env, {}).get("state") == "current" for k in s.keys
               if k.record is not None and _hits(k) == 0)
    where = getattr(layers[0][1], "where", "?") if layers else "?"
    return Report(where, datetime.now(timezone.utc), envs, sections, stale, zero)


def _hits(entry: KeyEntry, dispatches: bool = False) -> int:
    """The winner's hits; with ``dispatches``, every call it took (hits, loads, misses and fallbacks)."""
    if entry.record is None:
        return 0
    winner = entry.record.solution
    return sum(c.total() if dispatches else c.hits for c in entry.counts if c.solution == winner)


# --- plots ---------------------------------------------------------------------------------------------------
def _figure_available() -> str:
    """"" when matplotlib can draw here, else why not (the page then carries tables only)."""
    try:
        import matplotlib  # noqa: F401
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
    except ImportError as exc:
        return f"plots need matplotlib (pip install 'kernel-arbiter[report]'): {exc}"
    return ""


def _modes(section: Section) -> list[TimingMode]:
    """Timing modes worth a panel: device, and latency where it differs (on the CPU one run serves both)."""
    by_mode: dict[str, dict] = {}
    for k in section.keys:
        for m in k.measurements:
            by_mode.setdefault(m.mode, {})[(k.key.id, m.solution)] = m.median_s
    modes = [m for m in (TimingMode.DEVICE, TimingMode.LATENCY) if m in by_mode]
    if modes == [TimingMode.DEVICE, TimingMode.LATENCY] and by_mode[TimingMode.DEVICE] == by_mode[TimingMode.LATENCY]:
        modes = [TimingMode.DEVICE]
    return modes


@dataclass
class Family:
    """Keys of one section that belong on one line per solution: same layout, same attributes, and the same
    degenerate dimensions (a GEMV with n=1 is not a point on the square-GEMM curve)."""

    title: str
    keys: list[KeyEntry]


_COUNT_DIMS = ("batch", "heads")  # how many independent problems: one of them is not another kind of problem


def families(section: Section) -> list[Family]:
    """The section's measured keys grouped into families, each ordered by problem size."""
    groups: dict[tuple, list[KeyEntry]] = {}
    for k in section.keys:
        if not k.measurements:  # decided by tier alone: no point to plot
            continue
        unit = tuple(n for n, v in k.key.bucket if v <= 1 and n not in _COUNT_DIMS)
        groups.setdefault((k.key.layout, k.key.attrs, unit), []).append(k)
    out = []
    for (layout, attrs, unit), keys in sorted(groups.items(), key=lambda g: (g[0][2], g[0][1], g[0][0])):
        title = " · ".join(filter(None, [f"layout {layout}", ",".join(f"{a}={v}" for a, v in attrs),
                                          ", ".join(f"{n}=1" for n in unit)]))
        out.append(Family(title, sorted(keys, key=lambda k: (_size(k), k.key.id))))
    return out


def _dims(k: KeyEntry) -> dict[str, int]:
    """The shape a key was timed at (stored since schema v3), else its bucket's upper bound."""
    timed = next((m.dims for m in k.measurements if m.dims), None)
    return dict(timed) if timed else dict(k.key.bucket)


def _size(k: KeyEntry) -> float:
    # a float: a product of stored dims can pass int64 (10^15 x 10^15), which NumPy and matplotlib then hold as
    # Python objects and refuse (TypeError in isfinite) while drawing the axis
    return float(math.prod(max(v, 1) for v in _dims(k).values()))


def _ticks(keys: list[KeyEntry]) -> tuple[list[float], list[str]]:
    """Tick positions and shape labels, dropping a label that would crowd the one before it (log axis)."""
    xs: list[float] = []
    labels: list[str] = []
    last = None
    for k in keys:
        x = _size(k)
        if last is not None and x < last * 2.5:
            continue
        xs.append(x)
        labels.append("x".join(str(v) for v in _dims(k).values()))
        last = x
    return xs, labels


def plot(section: Section, family: Family) -> str | None:
    """``figure(section, family)`` as a base64 PNG, cropped to what it draws (the legend included)."""
    fig = figure(section, family)
    if fig is None:
        return None
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def figure(section: Section, family: Family):
    """One family's matplotlib Figure: median time (p20..p80 bars) and, when the op has a work model,
    throughput, versus problem size (log), one line per solution; the winner of each key starred. None when
    nothing was measured."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    modes = _modes(Section(section.target, section.op, section.dtype, section.env, family.keys))
    if not modes:
        return None
    keys = family.keys
    modelled = work(section.op, _dims(keys[0]), section.dtype)  # (amount, unit) or None
    has_work = modelled is not None
    panels = [(m, "time") for m in modes] + ([(modes[0], "rate")] if has_work else [])
    solutions = sorted({m.solution.label for k in keys for m in k.measurements})
    fig = Figure(figsize=(5.2 * len(panels), 3.8), dpi=96)
    FigureCanvasAgg(fig)
    colors = {s: f"C{i % 10}" for i, s in enumerate(solutions)}
    markers = {s: "osD^v<>ph"[(i // 10) % 9] for i, s in enumerate(solutions)}
    unit_scale, unit = 1.0, ""
    if modelled is not None:
        peak = 0.0
        for k in keys:
            for m in k.measurements:
                w = _work_of(section, k, m)
                if w and m.median_s and m.median_s > 0:
                    peak = max(peak, w[0] / m.median_s)
        base = f"{modelled[1]}/s"
        unit_scale, prefix = next(((s, p) for s, p in ((1e12, "T"), (1e9, "G"), (1e6, "M")) if peak >= s),
                                  (1e3, "k"))
        unit = prefix + base
    tick_x, tick_labels = _ticks(keys)
    size_name = "·".join(_dims(keys[0]))
    for i, (mode, kind) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1)
        for sol in solutions:
            pts = []
            for k in keys:
                for m in k.measurements:
                    if m.mode == mode and m.solution.label == sol and m.median_s == m.median_s:
                        pts.append((_size(k), k, m))
            if not pts:
                continue
            if kind == "time":
                ys = [m.median_s * 1e6 for _, _, m in pts]
                lo = [max(0.0, (m.median_s - m.p20_s) * 1e6) for _, _, m in pts]
                hi = [max(0.0, (m.p80_s - m.median_s) * 1e6) for _, _, m in pts]
                ax.errorbar([x for x, _, _ in pts], ys, yerr=[lo, hi], color=colors[sol], marker=markers[sol],
                            ms=4, lw=1.2, capsize=2, label=sol)
            else:
                ys = [_work_of(section, k, m)[0] / m.median_s / unit_scale for _, k, m in pts]
                ax.plot([x for x, _, _ in pts], ys, color=colors[sol], marker=markers[sol], ms=4, lw=1.2, label=sol)
            screened = [(x, y) for (x, _, m), y in zip(pts, ys) if m.screened]
            if screened:  # stopped early, far slower than the best: an estimate
                sx, sy = zip(*screened)
                ax.scatter(sx, sy, s=40, facecolors="white", edgecolors=colors[sol], zorder=3)
            won = [(x, y) for (x, k, _), y in zip(pts, ys) if k.winner == sol]
            if won:
                wx, wy = zip(*won)
                ax.scatter(wx, wy, marker="*", s=220, color=colors[sol], edgecolors="black", zorder=4)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(tick_x, tick_labels, fontsize=7)
        ax.minorticks_off()
        ax.tick_params(axis="x", which="minor", bottom=False)
        if len(tick_x) == 1:  # one point: widen the axis so the point is not on its edge
            ax.set_xlim(tick_x[0] / 2, tick_x[0] * 2)
        ax.grid(True, which="major", alpha=0.25)
        ax.set_xlabel(f"problem size ({size_name}), log scale")
        if kind == "time":
            ax.set_ylabel(f"median {mode} time, µs (p20..p80)")
            ax.set_title(f"{mode} time", fontsize=10)
        else:
            ax.set_ylabel(f"{unit} at the shape timed")
            ax.set_title(f"throughput ({mode})", fontsize=10)
    handles, labels = fig.axes[0].get_legend_handles_labels()
    fig.tight_layout()
    # Below the panels and outside them: bbox_inches="tight" grows the picture to hold it, so no entry is cut.
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(3, len(labels)),
               fontsize=7, frameon=False, title="★ winner of the key   ○ screened (stopped early: an estimate)",
               title_fontsize=7)
    return fig


# --- HTML ----------------------------------------------------------------------------------------------------
CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1400px;padding:0 16px;color:#222}
h1{font-size:22px}h2{font-size:18px;margin-top:36px;border-bottom:1px solid #ccc}h3{font-size:15px}
table{border-collapse:collapse;margin:8px 0 16px;font-size:12.5px}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.n{text-align:right;font-variant-numeric:tabular-nums}
.stale{color:#b00}.warn{color:#a60}.muted{color:#777}code{font-size:12px}
img{max-width:100%;border:1px solid #eee}
"""


def _e(x) -> str:
    return html.escape(str(x), quote=True)


def _table(headers: list[str], rows: list[list], numeric: tuple[int, ...] = (), cls: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = []
    for r in rows:
        cells = "".join(f"<td{' class=n' if i in numeric else ''}>{c}</td>" for i, c in enumerate(r))
        body.append(f"<tr>{cells}</tr>")
    return f"<table{f' class={cls}' if cls else ''}><tr>{head}</tr>{''.join(body)}</table>"


def _fmt(x, spec: str) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def error_cell(rejected: Rejected) -> str:
    """The rel error column of a gate failure: the error when the output was compared with the oracle;
    what happened instead when it never was (a candidate that raised has no error to show, not 0)."""
    raised = re.search(r"\braised (.+)$", rejected.reason, re.S)
    if raised:
        return f"raised: {raised.group(1)}"
    if "crashed while timed" in rejected.reason:
        return "crashed while timed"
    compared = "relative error" in rejected.reason or "oracle" in rejected.reason
    return _fmt(rejected.rel_error, ".2e") if compared else "not compared"


def _section_html(s: Section, env_state: str, plots: bool) -> str:
    parts = [f'<h2 id="{_e(s.anchor)}">{_e(s.title)} <span class=muted>env {_e(s.env)}'
             f'{" (not checked here)" if env_state == "not checked" else ""}</span></h2>']
    imgs = [(f, plot(s, f)) for f in families(s)] if plots else []
    imgs = [(f, img) for f, img in imgs if img]
    for f, img in imgs:
        parts.append(f"<h3>{_e(f.title)}</h3>"
                     f'<img alt="{_e(s.title)} · {_e(f.title)}: time and throughput versus problem size" '
                     f'src="data:image/png;base64,{img}">')
    if imgs:
        if work(s.op, dict(s.keys[0].key.bucket), s.dtype) is not None:
            what = OPS[s.op].work_text or "the op's work model"
            exact = all(m.dims for k in s.keys for m in k.measurements)
            parts.append(f"<p class=muted>Throughput counts {what} at the exact shape each measurement timed.</p>"
                         if exact else
                         f"<p class=muted>Throughput counts {what} at the shape timed where the registry recorded it, "
                         f"else at the bucket's upper bound (an upper estimate; registries before schema v3).</p>")
    elif not any(k.measurements for k in s.keys):
        parts.append("<p class=muted>Nothing measured for these keys (decided by tier; "
                     "<code>arbiter tune</code> measures them).</p>")
    rows = []
    for k in s.keys:
        r = k.record
        hits = _hits(k)
        b = k.looser.get(k.winner) if r and k.winner else None
        budget = (f"<span class=warn>looser, declared: rel {b.rel_fro:.0e}, atol {b.atol:.0e}, "
                  f"rtol {b.rtol:.0e}</span>" if b is not None else "published" if r else "")
        # A winner whose verdict the audit of real calls failed is never served again (arbiter.audit)
        demoted = r is not None and any(f.solution.label == k.winner and f.reason.startswith(AUDIT_PREFIX)
                                        for f in k.rejected)
        winner = f"<b>{_e(k.winner)}</b>" + (" <span class=stale>demoted by the audit of real calls</span>"
                                             if demoted else "")
        rows.append([f"<code>{_e(k.key.id)}</code>",
                     winner if r else "<span class=stale>none: every solution failed the gate</span>",
                     _e(r.chosen_by) if r else "", _fmt(r.margin * 100 if r and r.margin is not None else None, "+.1f"),
                     _e(r.note) if r else "", budget,
                     (str(hits) if hits or _hits(k, dispatches=True) else
                      "<span class=warn>0 (never dispatched)</span>") if r else "",
                     _e(k.layer)])
    parts.append("<h3>Winners</h3>" + _table(["key", "winner", "policy", "margin %", "note", "budget", "hits",
                                              "layer"], rows, numeric=(3, 6)))
    timed = []
    for k in s.keys:
        for m in sorted(k.measurements, key=lambda m: (m.mode, m.median_s)):
            sol = m.solution.label
            timed.append([_e(k.key.shape_text), ("★ " if sol == k.winner else "") + _e(sol), _e(m.mode),
                          _fmt(m.median_s * 1e6, ",.2f"), _fmt(m.spread * 100, ".1f"),
                          f"{m.reps}{' screened' if m.screened else ''}"])
    if timed:
        parts.append("<details><summary>Measurements</summary>"
                     + _table(["bucket", "solution", "mode", "median µs", "spread %", "reps"], timed,
                              numeric=(3, 4)) + "</details>")
    failed = [[f"<code>{_e(k.key.id)}</code>", _e(f.solution.label), _e(f.reason), _e(error_cell(f))]
              for k in s.keys for f in sorted(k.rejected, key=lambda f: f.solution.label)]
    if failed:
        parts.append("<h3>Rejected by the gate or the audit of real calls</h3>"
                     + _table(["key", "solution", "reason", "rel error"], failed))
    counted = []
    for k in s.keys:
        for c in sorted(k.counts, key=lambda c: (-c.hits, c.candidate_name)):
            sol = c.solution.label
            counted.append([f"<code>{_e(k.key.id)}</code>", ("★ " if sol == k.winner else "") + _e(sol),
                            str(c.hits), str(c.loads), str(c.misses), str(c.fallbacks)])
    if counted:
        parts.append("<h3>Dispatch counters</h3>"
                     + _table(["key", "solution", "hits", "loads", "misses", "fallbacks"], counted,
                              numeric=(2, 3, 4, 5)))
    return "\n".join(parts)


def render(report: Report) -> str:
    """The page as one HTML string (no external resource)."""
    why_no_plots = _figure_available()
    body = [f"<h1>kernel-arbiter report</h1><p>Registry <code>{_e(report.registry)}</code>, "
            f"{report.created:%Y-%m-%d %H:%M} UTC. {len(report.sections)} op/dtype sections, "
            f"{sum(len(s.keys) for s in report.sections)} keys, {len(report.stale)} stale solutions, "
            f"{report.zero_hit} current solutions with zero hits.</p>"]
    if why_no_plots:
        body.append(f"<p class=warn>{_e(why_no_plots)}</p>")
    env_rows = []
    for fp, e in sorted(report.environments.items(), key=lambda x: (x[1]["state"], x[1]["target"], x[0])):
        state = e["state"] + (f" ({e['why']})" if e["state"] == "not checked" and e["why"] else "")
        fields = "<br>".join(f"{_e(k)}: {_e(v)}" for k, v in sorted(e["fields"].items())) or "(unknown)"
        env_rows.append([f"<code>{_e(fp)}</code>", _e(e["target"]),
                         f"<span class=stale>{_e(state)}</span>" if e["state"] == "stale" else _e(state),
                         f"<details><summary>fields</summary>{fields}</details>"])
    body.append("<h2>Environments</h2>" + _table(["fingerprint", "target", "state", "environment key"], env_rows))
    if report.sections:
        body.append("<ul>" + "".join(f'<li><a href="#{_e(s.anchor)}">{_e(s.title)}</a> ({len(s.keys)} keys)</li>'
                                     for s in report.sections) + "</ul>")
    else:
        body.append("<p>No current entries: tune some keys (<code>arbiter tune --suite quick</code>).</p>")
    for s in report.sections:
        body.append(_section_html(s, report.environments.get(s.env, {}).get("state", ""), not why_no_plots))
    body.append('<h2 id="stale">Stale entries</h2>')
    if report.stale:
        rows = []
        for st in sorted(report.stale, key=lambda st: st.record.key):
            changed = "<br>".join(f"{_e(k)}: {_e(a)} → {_e(b)}" for k, (a, b) in st.changed.items()) \
                or "(stored fields unknown)"
            rows.append([f"<code>{_e(st.record.key)}</code>", _e(st.record.solution.label),
                         f"<code>{_e(st.record.env)}</code>", changed, _e(st.layer)])
        body.append("<p>Measured under another environment: never served here. Re-tune them with "
                    "<code>arbiter tune --retune-stale</code>; remove them with <code>arbiter prune --stale</code>.</p>"
                    + _table(["key", "winner", "stored env", "what changed", "layer"], rows, cls="stale"))
    else:
        body.append("<p>None.</p>")
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>kernel-arbiter report</title>"
            f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>")


def write(layers: list[tuple[str, SqlStore]], out_dir: str, *, target: str | None = None,
          op: str | None = None) -> tuple[str, Report]:
    """Render the layers' report into ``out_dir/index.html`` (the folder is created); returns (path, report).

    The page is written to a new file beside it and renamed over ``index.html``: an ``index.html`` that is a
    symbolic link is replaced, never followed (its target, perhaps another user's file, is not written).
    ValueError names ``--out`` when it is not a folder that can be written.
    """
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise ValueError(f"--out: {out_dir} is a file, not a folder; give a folder to write index.html into")
    report = collect(layers, target=target, op=op)
    path = os.path.join(out_dir, "index.html")
    try:
        os.makedirs(out_dir, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".index.html.", dir=out_dir)
    except OSError as exc:
        raise ValueError(f"--out: cannot write into {out_dir} ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(render(report))
        mask = os.umask(0)  # mkstemp made it 0600; a report is as readable as any file the user writes
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path, report
