"""The arbiter on the CPU against the peers a user has: NumPy and torch CPU eager, on the user's path, one run.

For each shape (all 8 op kinds, float32 unless said, shapes of this benchmark's own, none from a suite), in one
process and one run:

* **numpy**: the obvious NumPy formula a user writes (``x / sqrt(mean(x*x) + eps) * w``, ``scipy.special.erf``
  for exact GELU);
* **torch**: torch CPU eager on tensors made once (``torch.from_numpy``), the op a torch user calls;
* **default**: ``run_arbitrated(op, Region(...))`` with the region built per call, no ``out=``, on a fresh
  in-memory registry under the ``tier`` policy (the first call gates the tier default);
* **tuned**: the same call on another fresh registry after ``tune_region`` decided the key (``policy=tune``'s
  work, done before the loop), and every gated solution's ``serve`` (what the dispatcher runs for it, the region
  built once): **regret** = the tuned pick's time / the fastest gated solution's.

The contestants of a phase (default: numpy, torch, default; tuned: numpy, torch, tuned, each gated solution) are
timed in interleaved rounds, in a fresh random order each round (a rotation always put the same contestant before
another, and its thread pool may still spin); each sample is one untimed call (the switch from the
previous contestant) and then calls back to back for about 0.5 ms, per call. Medians and spreads ((p80 - p20) /
median) per contestant; ratios ``numpy / default`` and ``torch / tuned`` above 1 mean the arbiter is faster.
The load average (``os.getloadavg``) is printed beside the figures: the box may be shared.

    python benchmarks/cpu_peers.py [--quick] [--busy] [--out DIR] [--tunes N]

``--busy``: the same with one other CPU-bound process running on the box for the whole run (what a user's
machine often is: a second job, a build, a browser), stated in the report's first line.
``--quick``: three small shapes, 5 rounds, 0.5 s tuning budget (a smoke run; its figures are not results).
``--tunes N``: also tune every key N times into fresh registries and print whether the winners agree wherever a
margin of 20% or more was measured (the three-tune agreement check). ``--out DIR``: ``DIR/cpu_peers.md``.
"""
from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import arbiter  # noqa: E402
from _busy import busy_box  # noqa: E402
from arbiter import dispatch  # noqa: E402
from arbiter.candidates import serve  # noqa: E402
from arbiter.regions import FFT, Attention, Gated, LayerNorm, Matmul, Pointwise, RMSNorm, Softmax  # noqa: E402
from arbiter.store import MemoryStore  # noqa: E402
from arbiter.tune import tune_region  # noqa: E402

SAMPLE_S = 5e-4


def _erf(z):
    from scipy.special import erf

    return erf(z)


def _shapes(rng):
    """(label, op, make_region() -> Region, numpy_fn, torch_fn) per shape; inputs drawn once."""
    import torch
    import torch.nn.functional as F

    def f32(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    def t(a):
        return torch.from_numpy(a)

    out = []

    def matmul(m, n, k, epilogue=None, dtype=np.float32):
        a, b = f32(m, k).astype(dtype), (f32(k, n) / math.sqrt(k)).astype(dtype)
        bias = f32(n).astype(dtype) if epilogue else None
        act = epilogue or "none"
        label = f"matmul {m}x{n}x{k}" + (f" +bias {act}" if epilogue else "") + ("" if dtype == np.float32
                                                                                  else " float64")

        def npf():
            z = a @ b
            if bias is None:
                return z
            z = z + bias
            return 0.5 * z * (1.0 + _erf(z / math.sqrt(2.0))) if act == "gelu" else np.maximum(z, 0)

        ta, tb, tbias = t(a), t(b), None if bias is None else t(bias)

        def tf():
            if tbias is None:
                return ta @ tb
            z = torch.addmm(tbias, ta, tb)
            return F.gelu(z) if act == "gelu" else F.relu(z)

        out.append((label, "matmul", lambda: Matmul(a, b, bias=bias, activation=act), npf, tf))

    matmul(128, 128, 128, dtype=np.float64)
    matmul(300, 500, 700, "gelu")
    matmul(1, 1024, 1024)
    matmul(256, 256, 256, "relu")
    matmul(64, 64, 64)
    matmul(256, 256, 256)  # issue 39's: its tune's stored median against `a @ b` in a loop

    for rows, cols in ((7, 3000), (512, 1024), (1, 4096)):
        x, w = f32(rows, cols), f32(cols)
        tx, tw = t(x), t(w)
        out.append((f"rmsnorm {rows}x{cols}", "rmsnorm", lambda x=x, w=w: RMSNorm(x, w, eps=1e-6),
                    lambda x=x, w=w: x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w,
                    lambda tx=tx, tw=tw, cols=cols: F.rms_norm(tx, (cols,), tw, 1e-6)))
    for rows, cols in ((4, 768), (256, 1024)):
        x, w, b = f32(rows, cols), f32(cols), f32(cols)
        tx, tw, tb = t(x), t(w), t(b)

        def ln(x=x, w=w, b=b):
            mu = x.mean(axis=-1, keepdims=True)
            var = x.var(axis=-1, keepdims=True)
            return (x - mu) / np.sqrt(var + 1e-5) * w + b

        out.append((f"layernorm {rows}x{cols}", "layernorm", lambda x=x, w=w, b=b: LayerNorm(x, w, b, eps=1e-5), ln,
                    lambda tx=tx, tw=tw, tb=tb, cols=cols: F.layer_norm(tx, (cols,), tw, tb, 1e-5)))
    for rows, cols in ((64, 1000), (512, 512)):
        x = f32(rows, cols)
        tx = t(x)

        def sm(x=x):
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)

        out.append((f"softmax {rows}x{cols}", "softmax", lambda x=x: Softmax(x), sm,
                    lambda tx=tx: torch.softmax(tx, -1)))
    for b_, h, sq, sk, d, causal in ((1, 8, 300, 300, 64, False), (2, 4, 128, 128, 64, True),
                                     (2, 4, 1, 700, 64, False)):  # a decode step (issue 39's regret 137)
        q, k, v = f32(b_, h, sq, d), f32(b_, h, sk, d), f32(b_, h, sk, d)
        tq, tk, tv = t(q), t(k), t(v)
        scale = 1 / math.sqrt(d)

        def at(q=q, k=k, v=v, causal=causal, scale=scale):
            s = (q @ np.swapaxes(k, -1, -2)) * scale
            if causal:
                s = np.where(np.triu(np.ones(s.shape[-2:], bool), 1), -np.inf, s)
            e = np.exp(s - s.max(axis=-1, keepdims=True))
            return (e / e.sum(axis=-1, keepdims=True)) @ v

        out.append((f"attention {b_}x{h}x{sq}x{sk}x{d}" + (" causal" if causal else ""), "attention",
                    lambda q=q, k=k, v=v, causal=causal: Attention(q, k, v, causal=causal), at,
                    lambda tq=tq, tk=tk, tv=tv, causal=causal: F.scaled_dot_product_attention(tq, tk, tv,
                                                                                              is_causal=causal)))
    for m, n, k in ((16, 1024, 512), (128, 256, 256)):
        x, wg, wu = f32(m, k), f32(k, n) / math.sqrt(k), f32(k, n) / math.sqrt(k)
        tx, twg, twu = t(x), t(wg), t(wu)

        def gated(x=x, wg=wg, wu=wu):
            g = x @ wg
            return g / (1.0 + np.exp(-g)) * (x @ wu)

        out.append((f"gated {m}x{n}x{k}", "gated", lambda x=x, wg=wg, wu=wu: Gated(x, wg, wu), gated,
                    lambda tx=tx, twg=twg, twu=twu: F.silu(tx @ twg) * (tx @ twu)))
    for size in (4096, 200_000):
        x, y = f32(size), f32(size)
        tx, ty = t(x), t(y)
        out.append((f"pointwise {size} mul[t]>add[s]>silu", "pointwise",
                    lambda x=x, y=y: Pointwise(x, [("mul", y), ("add", 0.5), ("silu",)]),
                    lambda x=x, y=y: (lambda z: z / (1.0 + np.exp(-z)))(x * y + 0.5),
                    lambda tx=tx, ty=ty: F.silu(tx * ty + 0.5)))
    for batch, n, kind in ((16, 1024, "c2c"), (8, 1000, "r2c")):
        x = f32(batch, n) if kind == "r2c" else (f32(batch, n) + 1j * f32(batch, n)).astype(np.complex64)
        tx = t(x)
        out.append((f"fft {batch}x{n} {kind}", "fft", lambda x=x, kind=kind: FFT(x, kind=kind),
                    lambda x=x, kind=kind: np.fft.rfft(x) if kind == "r2c" else np.fft.fft(x),
                    lambda tx=tx, kind=kind: torch.fft.rfft(tx) if kind == "r2c" else torch.fft.fft(tx)))
    return out


def interleaved(contestants: dict, rounds: int, cap_s: float) -> dict:
    """{name: (median s, spread)} of zero-argument calls timed in rotated interleaved rounds (see the docstring)."""
    names = list(contestants)
    per = {}
    for name in names:  # warm up and estimate: calls per sample
        fn = contestants[name]
        fn()
        t0 = time.perf_counter()
        fn()
        fn()
        per[name] = max(1, math.ceil(SAMPLE_S / max((time.perf_counter() - t0) / 2, 1e-9)))
    samples: dict = {n: [] for n in names}
    deadline = time.perf_counter() + cap_s
    order = np.random.default_rng(len(names))  # fixed seed: the same orders every run
    for r in range(rounds):
        # A fresh order each round, so each contestant follows every other about equally often: a rotation
        # always puts the same one before it, whose pool may still spin (torch's OpenMP threads after a torch
        # call), a bias that the shuffle spreads over all
        for i in order.permutation(len(names)):
            name = names[i]
            fn, n = contestants[name], per[name]
            fn()  # untimed: the switch from the previous contestant
            t0 = time.perf_counter_ns()
            for _ in range(n):
                fn()
            samples[name].append((time.perf_counter_ns() - t0) * 1e-9 / n)
        if r >= 4 and time.perf_counter() > deadline:
            break
    result = {}
    for name, s in samples.items():
        a = np.asarray(s)
        med = float(np.median(a))
        p20, p80 = np.percentile(a, [20, 80])
        result[name] = (med, float((p80 - p20) / med))
    return result


def _geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def run(quick: bool, tunes: int) -> tuple[list[dict], str, list[str]]:
    rng = np.random.default_rng(31)
    shapes = _shapes(rng)
    if quick:
        shapes = [s for s in shapes if s[0] in ("rmsnorm 7x3000", "softmax 64x1000", "matmul 64x64x64")]
    rounds, cap, budget = (5, 0.3, 0.5) if quick else (15, 2.0, None)
    rows = []
    load_before = os.getloadavg()
    for label, op, make, npf, tf in shapes:
        # default: a fresh registry, policy tier
        dispatch.configure(store=MemoryStore(), policy="tier")
        dispatch.reset()
        arbiter.run_arbitrated(op, make())
        default_pick = dispatch.store().solutions()[0].candidate_name if dispatch.store().solutions() else "?"
        def user(op=op, make=make):
            return arbiter.run_arbitrated(op, make())

        d = interleaved({"numpy": npf, "torch": tf, "default": user}, rounds, cap)
        # tuned: another fresh registry, tuned, then served as stored
        dispatch.configure(store=MemoryStore(), policy="tier")
        dispatch.reset()
        region = make()
        decision = tune_region(region, dispatch.store(), budget_s=budget)
        pick = decision.winner
        gated = {f"sol:{r.label}": (lambda r=r, region=region: serve(r.candidate, r.params, region))
                 for r in decision.rows if r.status == "passed" and r.timing is not None}
        tmed = interleaved({"numpy": npf, "torch": tf, "tuned": user, **gated}, rounds, cap)
        fastest = min((v[0] for k, v in tmed.items() if k.startswith("sol:")), default=float("nan"))
        served_pick = tmed.get(f"sol:{pick.label}", (float("nan"),))[0]
        rows.append({
            "shape": label, "numpy": tmed["numpy"], "torch": tmed["torch"], "default": d["default"],
            "numpy_d": d["numpy"], "tuned": tmed["tuned"], "default_pick": default_pick, "pick": pick.label,
            "chosen_by": str(decision.chosen_by),
            "default_vs_numpy": d["numpy"][0] / d["default"][0],
            "tuned_vs_torch": tmed["torch"][0] / tmed["tuned"][0],
            "regret": served_pick / fastest,
            "fastest": min((k for k in tmed if k.startswith("sol:")), key=lambda k: tmed[k][0])[4:],
        })
        print(f"{label}: default/numpy {rows[-1]['default_vs_numpy']:.2f}x tuned/torch "
              f"{rows[-1]['tuned_vs_torch']:.2f}x regret {rows[-1]['regret']:.2f} pick {pick.label} "
              f"[{decision.chosen_by}: {decision.note}]", flush=True)
    load = f"load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
    agreement = three_tunes(shapes, tunes, budget) if tunes else []
    return rows, load, agreement


def three_tunes(shapes, tunes: int, budget) -> list[str]:
    """Tune every key ``tunes`` times into fresh registries; per key the winners, margins and whether they agree
    wherever a margin of 20% or more was measured (policy measured)."""
    lines = ["| shape | " + " | ".join(f"tune {i + 1}" for i in range(tunes)) + " | agree where >= 20% |",
             "|---|" + "---|" * tunes + "---|"]
    for label, _op, make, _npf, _tf in shapes:
        results = []
        for _ in range(tunes):
            dispatch.configure(store=MemoryStore(), policy="tier")
            dispatch.reset()
            d = tune_region(make(), dispatch.store(), budget_s=budget)
            results.append((d.winner.label, str(d.chosen_by), d.margin))
        strong = {w for w, by, m in results if by == "measured" and m is not None and m >= 0.2}
        agree = "yes" if len(strong) <= 1 else "NO"
        cells = [f"{w} ({by} {'' if m is None else f'{m * 100:+.0f}%'})" for w, by, m in results]
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {agree} |")
        print(lines[-1], flush=True)
    return lines


def _fmt(pair) -> str:
    med, spread = pair
    return f"{med * 1e6:,.1f} ±{spread * 100:.0f}%"


def report(rows, load, agreement, busy: bool = False) -> str:
    condition = "one other CPU-bound process running" if busy else "no other process started"
    lines = [f"# CPU peers: the arbiter against NumPy and torch CPU eager ({datetime.date.today()})", "",
             f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; {condition}; {load}. "
             "Times in us per call (median ±(p80-p20)/median), interleaved rounds in one run; "
             "ratios above 1: the arbiter is faster.", "",
             "| shape | numpy | torch | default | tuned | default pick | tuned pick | numpy/default | torch/tuned "
             "| regret |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {_fmt(r['numpy'])} | {_fmt(r['torch'])} | {_fmt(r['default'])} | "
                     f"{_fmt(r['tuned'])} | {r['default_pick']} | {r['pick']} ({r['chosen_by']}) | "
                     f"{r['default_vs_numpy']:.2f}x | {r['tuned_vs_torch']:.2f}x | {r['regret']:.2f} |")
    g = {k: _geomean([r[k] for r in rows]) for k in ("default_vs_numpy", "tuned_vs_torch", "regret")}
    worst = {k: min(rows, key=lambda r: r[k]) for k in ("default_vs_numpy", "tuned_vs_torch")}
    lines += ["", f"- default / NumPy: geomean {g['default_vs_numpy']:.2f}x, worst "
              f"{worst['default_vs_numpy']['default_vs_numpy']:.2f}x ({worst['default_vs_numpy']['shape']})",
              f"- tuned / torch CPU eager: geomean {g['tuned_vs_torch']:.2f}x, worst "
              f"{worst['tuned_vs_torch']['tuned_vs_torch']:.2f}x ({worst['tuned_vs_torch']['shape']})",
              f"- regret of the tuned pick (its solution / the fastest gated, same loop): geomean {g['regret']:.2f}, "
              f"max {max(r['regret'] for r in rows):.2f}"]
    if agreement:
        lines += ["", "Repeated tunes (fresh registries; agree: one winner among the tunes that measured a margin "
                  ">= 20%):", "", *agreement]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--tunes", type=int, default=0)
    ap.add_argument("--busy", action="store_true", help="run with one other CPU-bound process on the box")
    args = ap.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        print("skipped: torch is not installed (pip install 'kernel-arbiter[torch]')")
        return 0
    with busy_box(args.busy):
        rows, load, agreement = run(args.quick, args.tunes)
    text = report(rows, load, agreement, args.busy)
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "cpu_peers.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
