"""The gate's golden verdicts (issues 27 item 2, 41 item 2): what ``arbiter.gate``'s versions stand for.

Every op kind registered is pinned without being listed here: its smallest quick-suite problem gives one case
per NumPy built-in of the op (the candidates every install has) and a digest of its oracle's output there.
Beside them, hand-picked keys gate the built-ins and the known-wrong and correct alternatives of
``tests/wrong_candidates.py`` where each is exposed. Each case gates one candidate on a fixed gate seed
(``ARBITER_GATE_SEED``) and records the verdict's outcome, reason, probes run, budget and rounded errors, and
its op; plus the published budget table and the versions (the core's and each op's).

``tests/test_gate_version.py`` fails when an op's records change while its versions stay, and names the number
to bump: the op's own ``gate_version`` (only its verdicts are taken again) or, when every op changed, the core's
``GATE_RULES_VERSION``. Then the file is regenerated:

    PYTHONPATH=. python tests/gate_golden.py --write

(from the repository root; it writes ``tests/gate_golden.json``).
"""
from __future__ import annotations

import functools
import json
import math
import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "gate_golden.json"
SEED = 20251203
REGENERATE = "PYTHONPATH=. python tests/gate_golden.py --write"
DTYPES = ("float32", "float64", "float16", "bfloat16", "complex64", "complex128")


def _regions():
    from arbiter.regions import FFT, Attention, Gated, LayerNorm, Matmul, Pointwise, RMSNorm, Softmax

    # the region's own data never reaches the gate (it draws fresh probes): only its key, dims and scalars
    return {
        "matmul": lambda: Matmul.random("cpu", "float32", {"m": 24, "n": 40, "k": 56},
                                        {"activation": "silu", "bias": "1", "residual": "1"}),
        "matmul_square": lambda: Matmul.random("cpu", "float32", {"m": 64, "n": 64, "k": 64}),
        "softmax": lambda: Softmax.random("cpu", "float32", {"rows": 20, "cols": 40}),
        "softmax_strided": lambda: Softmax.random("cpu", "float32", {"rows": 20, "cols": 40}, layout="S"),
        "rmsnorm": lambda: RMSNorm.random("cpu", "float32", {"rows": 16, "cols": 64}, eps=1e-6),
        "layernorm": lambda: LayerNorm.random("cpu", "float32", {"rows": 16, "cols": 256}),
        "attention": lambda: Attention.random("cpu", "float32", {"batch": 1, "heads": 2, "q": 16, "k": 16, "d": 16}),
        "attention_causal": lambda: Attention.random("cpu", "float32", {"batch": 1, "heads": 2, "q": 32, "k": 32,
                                                                        "d": 16}, {"causal": "1"}),
        "fft": lambda: FFT.random("cpu", "complex64", {"batch": 4, "n": 96}, {"kind": "c2c"}),
        "gated": lambda: Gated.random("cpu", "float32", {"m": 16, "n": 32, "k": 24}),
        "pointwise": lambda: Pointwise.random("cpu", "float32", {"size": 500}, {"chain": "add[s]"}, scalars=[1.5]),
        "pointwise_relu": lambda: Pointwise.random("cpu", "float32", {"size": 500}, {"chain": "relu"}),
    }


def _smallest(kind):
    """The kind's quick-suite problem with the fewest elements (the golden set stays quick to take)."""
    from arbiter.suite import Problem

    dims, dtype, attrs = min(kind.suite, key=lambda p: math.prod(p[0].values()))
    return Problem(kind.name, dims, dtype, attrs)


def _suite_regions():
    """``{"<op>@suite": region factory}`` for every registered op kind with a quick-suite problem."""
    from arbiter.ops import OPS

    problems = {op: _smallest(kind) for op, kind in sorted(OPS.items()) if kind.suite}
    return {f"{op}@suite": functools.partial(problem.region, "cpu", seed=SEED % 1000)
            for op, problem in problems.items()}


def _oracle_digest(op: str) -> str:
    """The op's float64 oracle at its suite region: sum and norm of the output to 9 digits, which a change to
    the oracle moves and the BLAS's last bits do not."""
    import numpy as np

    from arbiter.ops import OPS

    ref = np.asarray(OPS[op].oracle(_suite_regions()[f"{op}@suite"]()))
    return f"{complex(ref.sum()):.9g} {float(np.linalg.norm(ref)):.9g}"


def cases():
    """[(case id, candidate, region factory)]: every NumPy built-in at its op's keys, then the wrong and correct
    alternatives of ``wrong_candidates`` at the key that exposes each."""
    sys.path.insert(0, str(HERE))
    import wrong_candidates as w
    from arbiter.candidates import REGISTRY

    regions = _regions()
    found = []
    for rid, make in _suite_regions().items():
        for cand in REGISTRY.candidates("cpu", rid.split("@")[0]):
            if cand.name.startswith("numpy_"):
                found.append((f"{cand.name}@{rid}", cand, make))
    for rid, make in regions.items():
        op = rid.split("_")[0]
        for cand in REGISTRY.candidates("cpu", op):
            if cand.name.startswith("numpy_"):
                found.append((f"{cand.name}@{rid}", cand, make))
    for cls, rid in [(w.Memoized, "softmax"), (w.SoftmaxNoMax, "softmax"), (w.AttentionNoMax, "attention"),
                     (w.RMSNormNoEps, "rmsnorm"), (w.LayerNormNoEps, "layernorm"), (w.LayerNormOnePass, "layernorm"),
                     (w.LayerNormUnshiftedMean, "layernorm"),
                     (w.RMSNormFixedEps, "rmsnorm"), (w.AttentionFixedScale, "attention"),
                     (w.PointwiseFixedScalar, "pointwise"), (w.SquareOnly, "matmul_square"),
                     (w.AssumesDenseRows, "softmax_strided"), (w.SameLengths, "attention_causal"),
                     (w.BottomRightCausal, "attention_causal"), (w.ReluInPlace, "pointwise_relu"),
                     (w.Bf16Matmul, "matmul_square"), (w.StrassenOnce, "matmul_square"),
                     (w.ReversedSoftmax, "softmax")]:
        cand = cls()
        found.append((f"{cand.name}@{rid}", cand, regions[rid]))
    return found


def _rounded(x: float) -> str:
    """An error to one significant digit: what the gate decided on, not the BLAS's last bits."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "nan"
    return "0" if x == 0 else f"{x:.0e}"


_NUMBER = re.compile(r"-?\d+\.\d+(?:e[+-]?\d+)?|-?\d+e[+-]?\d+")


def _reason(text: str) -> str:
    """A verdict's reason with every decimal number to one significant digit (indices, counts and seeds stay)."""
    return _NUMBER.sub(lambda m: f"{float(m.group()):.0e}", text)


def current() -> dict:
    """The golden record as the gate behaves now."""
    from arbiter.gate import GATE_RULES_VERSION
    from arbiter.ops import OPS
    from arbiter.oracles.budgets import budget_for
    from arbiter.verify import verify

    before = os.environ.get("ARBITER_GATE_SEED")
    os.environ["ARBITER_GATE_SEED"] = str(SEED)
    try:
        verdicts = {}
        for cid, cand, make in cases():
            v = verify(cand, cand.param_space()[0], make())
            verdicts[cid] = {"op": cand.op, "passed": v.passed, "reason": _reason(v.reason), "probes": list(v.probes),
                             "budget": [v.budget.rel_fro, v.budget.atol, v.budget.rtol],
                             # a pass's error is the BLAS's last bits; a failure's is what the gate decided on
                             "rel_error": "" if v.passed else _rounded(v.rel_error),
                             "max_excess": "" if v.passed else _rounded(v.max_excess)}
        oracles = {op: _oracle_digest(op) for op in sorted(OPS) if OPS[op].suite}
    finally:
        if before is None:
            del os.environ["ARBITER_GATE_SEED"]
        else:
            os.environ["ARBITER_GATE_SEED"] = before
    budgets = {f"{op} {dt}": [b.rel_fro, b.atol, b.rtol] for op in sorted(OPS) for dt in DTYPES
               for b in [budget_for(op, dt)]}
    versions = {"core": GATE_RULES_VERSION, "ops": {op: OPS[op].gate_version for op in sorted(OPS)}}
    return {"version": versions, "seed": SEED, "budgets": budgets, "oracles": oracles, "verdicts": verdicts}


def _op_of(section: str, key: str, record) -> str:
    if section == "verdicts":
        return record["op"]
    return key.split(" ")[0]  # budgets: "<op> <dtype>"; oracles: "<op>"


def check(golden: dict, now: dict) -> list[str]:
    """What is wrong between the golden file and the gate now, each line saying what to do; [] when they agree.
    An op whose records changed under the same versions names the number to bump."""
    regenerate = f"regenerate it with `{REGENERATE}`"
    old_v, new_v = golden.get("version"), now["version"]
    if not isinstance(old_v, dict) or old_v.get("core") != new_v["core"]:
        return [f"GATE_RULES_VERSION is {new_v['core']} but tests/gate_golden.json records "
                f"{old_v.get('core') if isinstance(old_v, dict) else old_v}: {regenerate}"]
    changed: dict[str, list[str]] = {}
    for section in ("budgets", "oracles", "verdicts"):
        old, new = golden.get(section, {}), now[section]
        for k in sorted(set(old) | set(new)):
            if old.get(k) != new.get(k):
                op = _op_of(section, k, new.get(k) or old.get(k))
                changed.setdefault(op, []).append(f"  {section} {k}:\n    golden {old.get(k)}\n    now    {new.get(k)}")
    problems = []
    old_ops, new_ops = old_v.get("ops", {}), new_v["ops"]
    for op in sorted(set(old_ops) | set(new_ops)):
        if op not in old_ops:
            problems.append(f"op kind {op!r} is not in tests/gate_golden.json (a new kind is pinned from its suite): "
                            f"{regenerate}")
        elif op not in new_ops:
            problems.append(f"op kind {op!r} is no longer registered: {regenerate}")
        elif old_ops[op] != new_ops[op]:
            problems.append(f"op {op!r}'s gate_version is {new_ops[op]} but tests/gate_golden.json records "
                            f"{old_ops[op]}: {regenerate}")
        elif op in changed:
            problems.append(f"the gate decides differently for op {op!r} under the same versions: bump "
                            f"gate_version of its OpKind (arbiter/ops/{op}/__init__.py; only {op}'s stored verdicts "
                            f"are taken again), then {regenerate}. Changed:\n" + "\n".join(changed[op][:8]))
    if len(problems) > 1 and set(changed) == set(old_ops) == set(new_ops):
        problems.insert(0, f"every op decides differently: a change to the core's rules bumps GATE_RULES_VERSION in "
                           f"arbiter/gate.py instead (every stored verdict is taken again), then {regenerate}")
    return problems


def main(argv):
    record = current()
    text = json.dumps(record, indent=1, sort_keys=True) + "\n"
    if "--write" in argv:
        GOLDEN.write_text(text)
        v = record["version"]
        print(f"wrote {GOLDEN}: core rules {v['core']}, {len(v['ops'])} op kinds, {len(record['verdicts'])} verdicts")
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main(sys.argv[1:])
