"""The probe catalogue of the F4 gate: value families per op, beside benign data.

Benign data (standard normal, what ``Region.random`` draws) finds arithmetic and indexing bugs.
It does not find the corners a kernel author cuts on purpose because "real data never does
that": a softmax without max-subtraction (overflows on large logits), a norm that drops ``eps``
(divides by zero on near-constant rows), a one-pass variance ``E[x^2] - E[x]^2`` (cancels on rows
with a large common offset), half-precision accumulation (overflows on large values), a tanh
from ``exp(2x)`` (inf/inf on wide inputs). Each family here draws the values that break one such
corner, and the gate probes every family of the op (``families(op)``) with fresh data. The families are the op
kinds' (``OpKind.families``, defined in ``arbiter/ops/<op>/``); this module gathers and publishes them.

A family rewrites a freshly drawn probe region's operands in place (array-module generic: NumPy
on the host, CuPy on a GPU) and may carry its own budget where the mathematics demands it (a
layernorm row with offset 300 and spread 1 is 300 times worse conditioned than a centred one,
so a correct float32 kernel loses ~300 ulps there). ``markdown()`` publishes the catalogue in
``docs/budgets.md`` (generated with the budget table; a test keeps it in step).

Runtime scalars (``eps``, attention ``scale``, pointwise constants) are not part of the problem
key; the gate varies them instead (``varied_scalars``): the first real-shape probe uses the
caller's values, the others use different ones, so a kernel that hard-codes the value it was
gated with fails (see docs/architecture.md, "Runtime scalars are varied, not keyed").
"""
from __future__ import annotations

from arbiter.ops import OPS
from arbiter.ops.family import (
    BENIGN,
    FINFO_MAX,
    SMALLEST_NORMAL,
    Family,
    exp_range,
    host_array,
    host_rows,
    poke,
    row_offsets,
    write_x,
)
from arbiter.oracles import budgets

__all__ = ["BENIGN", "CATALOGUE", "FINFO_MAX", "SMALLEST_NORMAL", "Family", "catalogue",
           "document", "exp_range", "families", "host_array", "host_rows", "markdown", "poke", "row_offsets",
           "scalar_sentinels", "varied_scalars", "write_x"]


def families(op: str, special_values: bool = True) -> list[Family]:
    """Benign first, then the op's adversarial families (``OpKind.families``); ``special_values``: with the
    special-value ones (``Family.special``), as a target that declares ``special_values_verified`` is probed."""
    kind = OPS.get(op)
    return [BENIGN] + [f for f in (kind.families if kind is not None else ()) if special_values or not f.special]


def catalogue() -> tuple[tuple[Family, tuple[str, ...]], ...]:
    """Every registered op kind's families with the ops that draw each, in registration order; families equal in
    name, text, budget text and targets are one row (their ops joined)."""
    rows: dict[tuple, tuple[Family, list[str]]] = {}
    for name, kind in OPS.items():
        for fam in kind.families:
            row = rows.setdefault((fam.name, fam.text, fam.budget_text, fam.special), (fam, []))
            row[1].append(name)
    return tuple((fam, tuple(ops)) for fam, ops in rows.values())


# The built-in catalogue, as the package registered it.
CATALOGUE: tuple[Family, ...] = tuple(fam for fam, _ in catalogue())


# --- runtime scalars ----------------------------------------------------------
def _default_of(region, name: str):
    """The default of ``name`` in the region type's constructor (eps 1e-6 rmsnorm, 1e-5 layernorm), or None."""
    import inspect

    param = inspect.signature(type(region).__init__).parameters.get(name)
    return None if param is None or param.default is inspect.Parameter.empty else param.default


def scalar_sentinels(region) -> dict[str, list]:
    """Per runtime scalar, the values varied probes take in turn (``varied_scalars``): a different value of
    the caller's, then the sentinels a kernel may treat specially (1.0, 0.0 where legal, the op's default, a
    negative value where legal), so a kernel that reads ``scale == 1.0`` as "not given" meets it."""
    args = region.runtime_args()
    found: dict[str, list] = {}
    if "eps" in args:  # legal: finite and > 0
        eps = args["eps"]
        default = _default_of(region, "eps")
        found["eps"] = [eps * 10.0 if eps * 10.0 <= 0.1 else eps / 10.0, 1.0,
                        default if default is not None and default != eps else eps / 10.0, eps * 100.0 if eps <= 1e-3
                        else eps / 100.0]
    if args.get("scale") is not None:  # attention: any finite scale; None is the default 1/sqrt(d)
        scale = args["scale"]
        found["scale"] = [scale * 1.7, 1.0, None, -scale, 0.0, scale * 0.5]
    if "scalars" in args:
        found["scalars"] = ["draw", 1.0, 0.0, -1.0, "draw", -0.5]
    return found


def varied_scalars(region, rng, index: int | None = None) -> dict:
    """``runtime_args`` for a probe: values other than the caller's ``region.runtime_args()``.

    ``index`` (the probe's place in the plan) picks the turn in ``scalar_sentinels``: index 1 (the real shape's
    second probe) takes a plain change (eps x10 or /10, attention scale x1.7, pointwise constants redrawn from
    +-U(0.25, 3)), later ones the sentinels. Without an index the plain change, as before.
    """
    args = dict(region.runtime_args())
    turn = 0 if index is None else max(index - 1, 0)
    for name, values in scalar_sentinels(region).items():
        value = values[turn % len(values)]
        if name == "scalars":
            args["scalars"] = [float(rng.uniform(0.25, 3.0) * rng.choice([-1.0, 1.0])) if value == "draw"
                               else float(value) for _ in args["scalars"]]
        else:
            args[name] = value
    return args


def markdown() -> str:
    """The catalogue as ``docs/budgets.md`` publishes it (below the budget table)."""
    lines = ["", "## Probe catalogue", "",
             "Every probe draws fresh data (entropy-seeded; a failure names the seed, `ARBITER_GATE_SEED` replays",
             "it). The gate probes, in order (`arbiter.verify.probe_plan`): the real shape with benign data and the",
             "caller's runtime scalars; the real shape again with new data, the op's first adversarial family and",
             "varied scalars (above 2^27 work units at the real shape reduced along its first power-of-two",
             "dimension to 1/16 of the work or as far as it goes, keeping its remainder modulo 128, the others the",
             "caller's: 2048^3 at 128x2048x2048, so a large key runs its real shape once); a shape of the bucket",
             "whose dimensions all differ, with tails that are not multiples of 8, 16, 32, 64 or 128 (always); every",
             "adversarial family at the bucket's low corner; the bucket's corners with each dimension low or high",
             "independently; sizes inside the bucket (each power-of-two",
             "dimension just past 5B/8, 3B/4 and 7B/8 of its bound B, odd tails: 643, 771, 899 for B = 1024). The",
             "families and corners together cost at most 0.2x the real shape's work (or 2^27 work units, so small",
             "buckets are probed fully); the families share half of that, and a family that does not fit at the low",
             "corner runs at a shrunk shape (every power-of-two dimension scaled down together, odd tails): no family",
             "is ever dropped. A candidate may decline a shrunk shape (it is outside the bucket); the family then runs",
             "at the low corner.",
             "",
             "Every probe reproduces the caller's layout of every operand (`arbiter.layouts`: the key's `layouts`",
             "attribute names the class, rank and row alignment of each operand that is not plain: padded, transposed,",
             "permuted, broadcast, strided, another rank), with NaN in every gap and padding element, and alternate",
             "probes put every operand and the output one element off a 16-byte boundary (pointer alignment is not",
             "keyed: both paths are probed under one verdict; a real shape above 2^27 work units stays aligned and the",
             "bucket's other probes alternate). A legal in-place key (`inplace`) is probed in place.",
             "The output sits inside a NaN guard band of 256 elements each side: a write outside it fails.",
             "",
             "Runtime scalars vary in turn: eps x10 (or /10), 1.0, the op's default (rmsnorm 1e-6, layernorm 1e-5),",
             "x100 (or /100); attention scale x1.7, 1.0, the default 1/sqrt(d), the negated caller's, 0.0, x0.5;",
             "pointwise constants redrawn from +-U(0.25, 3), then 1.0, 0.0, -1.0, a redraw, -0.5. A family's budget",
             "replaces the op's budget for its probes only.",
             "",
             "## Special values",
             "",
             "The oracle's float64 semantics are the contract, and the `nonfinite`, `masked_blocks`, `huge`,",
             "`subnormal` and `zero_ends` families probe them. Where the oracle is NaN the output must be NaN, where",
             "it is +-Inf the same infinity (an exact value beyond the output dtype's range counts as that infinity),",
             "and where it is finite the output must be finite and within the budget.",
             "",
             "| op | NaN / Inf inputs | masked (-inf) entries | other |",
             "| --- | --- | --- | --- |",
             # each op kind's own row (``OpKind.special_values``, in its folder)
             *(f"| {name} | {' | '.join(kind.special_values)} |" for name, kind in OPS.items() if kind.special_values),
             "",
             "Flush-to-zero is not allowed under the default contract: a kernel that flushes fails the `subnormal`",
             "family (a looser declared budget is the way to serve it, with the caller's consent).",
             "",
             "## Catch probabilities at large shapes",
             "",
             "* Linear products (matmul without an activation) at more than 2^27 work units: Freivalds products with",
             "  4 random sign vectors bound every row's error norm, so a wrong element of magnitude above the row's",
             "  budget is caught with certainty (each sign vector sees it in full).",
             "* Nonlinear products (an activation, gated) at more than 2^27 work units: beside sampled rows and",
             "  columns and the partial last tile, the exact reference of every output (i, j) with",
             "  `(j - i) mod 8 == s` (s random per probe) at 1/8 of the product's work in float64. Every 1x8 run of a",
             "  row and every 8x1 run of a column holds exactly one checked element, so one wrong 1x8 (or 8x1)",
             "  fragment anywhere in the output is caught with probability 1 (>= 0.999 as required); a single wrong",
             "  element with probability 1/8 per real-shape probe.",
             "* Nonlinear products at more than 2^27 work units: also the exact reference of 10 of their",
             "  128x128 output tiles drawn at random (all of them when fewer), so where a wrong element sits",
             "  inside its tile never decides whether it is seen: a kernel wrong anywhere in a fraction f of the",
             "  tiles is caught with probability >= 1 - (1 - f)^10 (one wrong element in every tile: 1; in half",
             "  the tiles: 0.999). Before, one wrong element at one place in every tile was caught by the",
             "  diagonal's single residue and the random rows 57-65 times in 200. Cost at 2048^3 with GELU: the",
             "  check 85 -> 113 ms beside a 124 ms run (2 cores).",
             "* Attention at large shapes: the exact reference of sampled query rows, each (batch, head) drawing",
             "  its own, ceil(ln(1e-3) / (heads x ln(1 - 1/128))) of them (at least 8), plus the first, the last",
             "  and the last of every partial tile: one wrong row in every 128-row tile of every head, at any",
             "  rows, is missed with probability <= (1 - 1/128)^(rows x heads) <= 1e-3. Before (the same rows in",
             "  every head) the same query row of every tile wrong was caught 13 times in 200. Cost at",
             "  2x8x2048x2048x64: 16 -> 40 ms beside a 240 ms run.",
             "* Repeats: 36 runs of one probe on the same inputs, at the real shape when 36 runs cost at most",
             "  max(0.1x the real shape's work, 2^22 units), else at the real shape shrunk to fit; the first is",
             "  checked against the oracle, the others against the first, bitwise under a deterministic contract",
             "  (the default; `Contract(deterministic=False)`: within the budget). A race that corrupts one call in 8",
             "  escapes all 35 comparisons with probability (7/8)^36 = 0.8%: caught with probability 0.992. Cost:",
             "  0.1x the real shape's work at large keys.",
             "",
             "| op | family | values | budget |", "| --- | --- | --- | --- |"]
    for fam, names in ((BENIGN, ("*",)),) + catalogue():
        ops = "(every op)" if names == ("*",) else ", ".join(names)
        if fam.special:
            ops += " (special values: see below)"
        lines.append(f"| {ops} | {fam.name} | {fam.text} | {fam.budget_text or 'the op budget'} |")
    lines += ["", "Families marked 'special values', and the one-element pointer shift, are drawn on the targets "
              "that declare their candidates verified against them on the device (`Target.special_values_verified`"
              ": cpu, nvidia). rocm shares nvidia's kernel templates but is not verified on an AMD GPU yet; there "
              "these families are not drawn."]
    return "\n".join(lines) + "\n"


def document() -> str:
    """``docs/budgets.md``: the budget table, then this catalogue (``python -m arbiter.probes > docs/budgets.md``)."""
    return budgets.markdown() + markdown()


if __name__ == "__main__":
    print(document(), end="")
