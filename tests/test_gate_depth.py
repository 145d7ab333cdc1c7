"""Gate depth (issue 15): wrong kernels written the way real kernels go wrong are rejected, each with its
reason; correct alternatives (other algorithms, other summation orders, split-precision products) pass.

Every wrong candidate here was served by the gate before this change (one benign probe per shape, the
two all-low/all-high corners, scalars fixed, the oracle computed after the run, verdicts keyed on the
candidate's own source); ``benchmarks/gate_classes.py`` replays them against the old gate.
"""
import importlib
import math
import sys
import textwrap

import numpy as np
import pytest

import arbiter
from arbiter import Tier, dispatch
from arbiter.candidates import REGISTRY
from arbiter.ops import op_kind
from arbiter.regions import Attention, LayerNorm, Matmul, Pointwise, RMSNorm, Softmax
from arbiter.verify import CHEAP_CHECK_WORK, check_output, probe_plan, verify
from gpu_support import requires_gpu
from wrong_candidates import (
    AssumesDenseRows,
    AttentionFixedScale,
    AttentionNoMax,
    Bf16Matmul,
    Bf16x3,
    BottomRightCausal,
    LayerNormApproxMean,
    LayerNormNoEps,
    LayerNormOnePass,
    Memoized,
    PointwiseFixedScalar,
    ReluInPlace,
    ReversedSoftmax,
    RMSNormFixedEps,
    RMSNormNoEps,
    SameLengths,
    SoftmaxNoMax,
    SquareOnly,
    StrassenOnce,
    Wrong,
    _softmax_rows,
)


def _mm(dims, dtype="float32", **attrs):
    return Matmul.random("cpu", dtype, dims, attrs)


@pytest.mark.parametrize("cls, region, expected", [
    (Memoized, lambda: Softmax.random("cpu", "float32", {"rows": 20, "cols": 40}), "relative error"),
    (SoftmaxNoMax, lambda: Softmax.random("cpu", "float32", {"rows": 20, "cols": 40}), "large_logits"),
    (AttentionNoMax, lambda: Attention.random("cpu", "float32", {"batch": 1, "heads": 2, "q": 16, "k": 16, "d": 16}),
     "large_logits"),
    (RMSNormNoEps, lambda: RMSNorm.random("cpu", "float32", {"rows": 16, "cols": 64}), "eps_dominated"),
    (LayerNormNoEps, lambda: LayerNorm.random("cpu", "float32", {"rows": 16, "cols": 64}), "eps_dominated"),
    # constant rows at large offsets (issue 38) cancel it before the +-300 rows do (tests/test_gate_constant_rows.py)
    (LayerNormOnePass, lambda: LayerNorm.random("cpu", "float32", {"rows": 16, "cols": 256}), "eps_dominated"),
    (LayerNormApproxMean, lambda: LayerNorm.random("cpu", "float32", {"rows": 16, "cols": 100}, {"bias": "0"}),
     "eps_dominated"),
    (RMSNormFixedEps, lambda: RMSNorm.random("cpu", "float32", {"rows": 16, "cols": 64}, eps=1e-6), "eps="),
    (AttentionFixedScale, lambda: Attention.random("cpu", "float32", {"batch": 1, "heads": 2, "q": 16, "k": 16,
                                                                      "d": 16}), "scale="),
    (PointwiseFixedScalar, lambda: Pointwise.random("cpu", "float32", {"size": 500}, {"chain": "add[s]"},
                                                    scalars=[1.5]), "scalars="),
    (SquareOnly, lambda: _mm({"m": 64, "n": 64, "k": 64}), "NaN"),
    (SameLengths, lambda: Attention.random("cpu", "float32", {"batch": 1, "heads": 2, "q": 32, "k": 32, "d": 16}),
     "at "),
    (BottomRightCausal, lambda: Attention.random("cpu", "float32", {"batch": 1, "heads": 2, "q": 32, "k": 32, "d": 16},
                                                 {"causal": "1"}), "at "),
    (AssumesDenseRows, lambda: Softmax.random("cpu", "float32", {"rows": 20, "cols": 40}, layout="P"), "at 20x40"),
    (ReluInPlace, lambda: Pointwise.random("cpu", "float32", {"size": 500}, {"chain": "relu"}),
     "wrote to its input 'x'"),
    (Bf16Matmul, lambda: _mm({"m": 32, "n": 32, "k": 32}), "has not opted in"),
])
def test_each_wrong_class_is_rejected_with_its_reason(cls, region, expected):
    verdict = verify(cls(), {}, region())
    assert not verdict.passed, verdict
    assert expected in verdict.reason, verdict.reason


def test_memoized_output_fails_at_the_second_real_shape_probe():
    region = Softmax.random("cpu", "float32", {"rows": 20, "cols": 40})
    verdict = verify(Memoized(), {}, region)
    assert verdict.reason.startswith("at 20x40 ")  # the real shape, probed again with new data


def test_shape_bugs_fail_where_dimensions_differ():
    v = verify(SquareOnly(), {}, _mm({"m": 64, "n": 64, "k": 64}))
    assert "NaN" in v.reason and v.reason.split(":")[0] != "at 64x64x64"
    attn = {"batch": 1, "heads": 2, "q": 32, "k": 32, "d": 16}
    for cls, attrs in ((SameLengths, {}), (BottomRightCausal, {"causal": "1"})):
        v = verify(cls(), {}, Attention.random("cpu", "float32", attn, attrs))
        dims = v.reason.split(":")[0].split()[1].split("x")
        assert dims[2] != dims[3], v.reason  # failed at a probe with seq_q != seq_k


def test_a_square_first_call_above_the_cost_floor_still_probes_unequal_dimensions():
    region = _mm({"m": 600, "n": 600, "k": 600})  # bucket 1024: every other shape of it costs about as much
    assert any(len(set(p.dims.values())) == 3 for p in probe_plan(region))
    v = verify(SquareOnly(), {}, region)
    assert not v.passed and "NaN" in v.reason


def test_plan_has_repeats_families_mixed_corners_and_tails():
    region = _mm({"m": 64, "n": 64, "k": 64})
    plan = probe_plan(region)
    labels = [p.label for p in plan]
    assert labels[0] == "64x64x64" and labels[1].startswith("64x64x64 ")  # the real shape twice
    shapes = {tuple(p.dims.values()) for p in plan}
    assert {(33, 64, 64), (64, 33, 64), (64, 64, 33), (33, 33, 64)} <= shapes  # each dim low/high independently
    assert (33, 35, 37) in shapes  # m != n != k, odd tails
    assert {"mixed_rows", "tiny"} <= {p.family.name for p in plan}
    assert all(v % 8 for v in (33, 35, 37))


def test_budget_per_family_for_layernorm_offsets_is_published():
    from arbiter import probes
    from arbiter.oracles.budgets import budget_for

    def offset(op):  # each norm's large_offset family (layernorm's carries its own budget; rmsnorm's the op's)
        return next(f for f in probes.families(op) if f.name == "large_offset")

    assert offset("layernorm").budget_for("layernorm", "float32").rel_fro > \
        offset("rmsnorm").budget_for("rmsnorm", "float32").rel_fro
    assert offset("rmsnorm").budget_for("rmsnorm", "float32") == budget_for("rmsnorm", "float32")


# --- 5: inputs intact -----------------------------------------------------------------
def test_oracle_reads_a_pristine_copy_and_every_input_is_checked():
    class ClobbersB(Wrong):
        name, op = "clobbers_b", "matmul"

        def run(self, region, params):
            np.matmul(region.a, region.b, out=region.out)
            region.b[0, 0] += 0.0 if region.b[0, 0] == 0 else 1e-3 * region.b[0, 0]  # a tiny write after use
            return region.out

    v = verify(ClobbersB(), {}, _mm({"m": 16, "n": 16, "k": 16}))
    assert "wrote to its input 'b' (1 element(s) changed)" in v.reason


# --- 6: verdict identity ----------------------------------------------------------------
def _scaled(scale):
    def scaled_matmul(region):
        out = region.alloc_out()
        np.matmul(region.a, region.b, out=out)
        out *= scale
        return out
    return scaled_matmul


def test_a_changed_captured_constant_is_verified_again(only_candidates):
    only_candidates("cpu", "matmul")
    region = _mm({"m": 24, "n": 24, "k": 24})
    arbiter.candidate(op="matmul", name="scaled")(_scaled(1.0))
    first = REGISTRY.get("scaled", "cpu", "matmul").identity()
    assert arbiter.arbitrate("matmul", region).winner.candidate.name == "scaled"
    arbiter.candidate(op="matmul", name="scaled")(_scaled(2.0))  # identical source, 2x scale bug
    assert REGISTRY.get("scaled", "cpu", "matmul").identity() != first
    with pytest.raises(arbiter.NoCandidateError, match="scaled"):
        arbiter.arbitrate("matmul", region)


def test_identity_covers_helpers_defaults_and_globals(tmp_path, monkeypatch):
    from arbiter.candidates import FunctionCandidate

    helper = tmp_path / "gate_helper_mod.py"
    helper.write_text("def post(out):\n    return out\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("gate_helper_mod")
    scope = {"mod": mod, "SCALE": 1.0}
    exec("def fn(region, k=1):\n    return mod.post(region.alloc_out()) * SCALE\n", scope)

    def ident():
        return FunctionCandidate(scope["fn"], "h", "cpu", "matmul", Tier.HAND_TUNED).identity()

    base = ident()
    assert ident() == base
    scope["SCALE"] = 2.0  # a referenced module-level constant
    assert ident() != base
    scope["SCALE"] = 1.0
    scope["fn"].__defaults__ = (2,)  # a default argument
    assert ident() != base
    scope["fn"].__defaults__ = (1,)
    assert ident() == base
    helper.write_text("def post(out):\n    out *= 2\n    return out\n")
    importlib.reload(mod)  # the code of a project helper module it calls
    assert ident() != base
    sys.modules.pop("gate_helper_mod", None)


def test_a_memo_is_state_and_a_table_is_behaviour():
    """A kernel cache filled on first call must not move the identity (the next process would verify again);
    a constant table the kernel reads must (an edited tile table is new behaviour)."""
    from arbiter.candidates import FunctionCandidate
    from arbiter.memo import Memo

    scope = {"CACHE": Memo(), "TABLE": {"tile": 64}}
    exec("def fn(region):\n    CACHE.setdefault(TABLE['tile'], object())\n    return region.alloc_out()\n", scope)

    def ident():
        return FunctionCandidate(scope["fn"], "m", "cpu", "matmul", Tier.HAND_TUNED).identity()

    base = ident()
    scope["CACHE"][("float32", 64)] = object()  # what a first call leaves behind
    assert ident() == base
    scope["TABLE"]["tile"] = 128
    assert ident() != base


def test_gate_version_is_part_of_the_identity(monkeypatch):
    from arbiter import gate

    cand = REGISTRY.get("numpy_matmul", "cpu", "matmul")
    before = cand.identity()
    monkeypatch.setattr(gate, "gate_version", lambda op=None: "changed-budgets")
    assert cand.identity() != before


@pytest.mark.parametrize("target", ["cpu", pytest.param("nvidia", marks=[pytest.mark.gpu, requires_gpu])])
def test_running_every_builtin_leaves_its_identity_unchanged(target):
    """A verdict taken in one process is found by the next only if the identity does not drift with use:
    compile timings kept on the instance, or a module global filled on first call, once made a second
    `arbiter run` verify again. Identities before and after gating every built-in on the quick suite agree."""
    from arbiter.suite import suite

    cands = [c for c in REGISTRY.all() if c.target == target]
    before = {(c.op, c.name): c.identity() for c in cands}
    for i, problem in enumerate(suite("quick")):
        region = problem.region(target, seed=i)
        for cand in REGISTRY.candidates(target=target, op=region.op):
            if cand.available() is True and cand.applies_to(region) is True:
                for params in cand.param_space():
                    verify(cand, params, region)
    assert {(c.op, c.name): c.identity() for c in cands} == before


def test_one_gate_per_builtin_leaves_its_identity_unchanged():
    """The short version of the test above (that one is ``heavy``: every parameter set on the whole quick suite,
    about a minute): each CPU built-in's default gated on the quick suite's first problem of its op."""
    from arbiter.suite import suite

    cands = [c for c in REGISTRY.all() if c.target == "cpu"]
    before = {(c.op, c.name): c.identity() for c in cands}
    first: dict = {}
    for i, problem in enumerate(suite("quick")):
        first.setdefault(problem.op, (i, problem))
    for i, problem in first.values():
        region = problem.region("cpu", seed=i)
        for cand in REGISTRY.candidates(target="cpu", op=region.op):
            if cand.available() is True and cand.applies_to(region) is True:
                verify(cand, cand.param_space()[0], region)
    assert {(c.op, c.name): c.identity() for c in cands} == before


def test_project_version_comes_from_package_metadata():
    from importlib import metadata

    from arbiter.env import environment, project_version, reset

    reset()
    assert project_version() == metadata.version("kernel-arbiter") == arbiter.__version__
    assert environment("cpu").as_dict()["project"] == project_version()


# --- 7: looser accuracy needs consent ---------------------------------------------------
def test_looser_contract_needs_consent_and_the_consent_is_keyed(only_candidates):
    only_candidates("cpu", "matmul", Bf16Matmul(), REGISTRY.get("numpy_matmul", "cpu", "matmul"))
    region = _mm({"m": 32, "n": 32, "k": 32})
    decision = arbiter.arbitrate("matmul", region)
    assert decision.winner.candidate.name == "numpy_matmul"
    row = next(r for r in decision.rows if r.candidate.name == "bf16_matmul")
    assert row.status == "excluded" and "has not opted in" in row.reason
    consenting = region.allow_looser()
    assert consenting.key != region.key and "accuracy=looser" in consenting.key.id
    assert arbiter.arbitrate("matmul", consenting).winner.candidate.name == "bf16_matmul"
    try:
        arbiter.configure(looser_accuracy=True)
        built = _mm({"m": 32, "n": 32, "k": 32})
        assert built.key == consenting.key
    finally:
        arbiter.configure(looser_accuracy=False)
    assert _mm({"m": 32, "n": 32, "k": 32}).key == region.key
    with pytest.raises(ValueError, match="looser_accuracy"):
        arbiter.configure(looser_accuracy="yes")


# --- correct alternatives -----------------------------------------------------------------
@pytest.mark.parametrize("cls, region", [
    (Bf16x3, lambda: _mm({"m": 48, "n": 40, "k": 300})),
    (StrassenOnce, lambda: _mm({"m": 48, "n": 40, "k": 70})),
    (ReversedSoftmax, lambda: Softmax.random("cpu", "float32", {"rows": 20, "cols": 300})),
])
def test_correct_alternatives_pass(cls, region):
    verdict = verify(cls(), {}, region())
    assert verdict.passed, verdict.reason


def test_builtin_cpu_candidates_pass_every_family():
    cases = [(RMSNorm, {"rows": 16, "cols": 300}, {}), (LayerNorm, {"rows": 16, "cols": 300}, {}),
             (Softmax, {"rows": 16, "cols": 300}, {}),
             (Attention, {"batch": 1, "heads": 2, "q": 20, "k": 40, "d": 16}, {"causal": "1"})]
    for cls, dims, attrs in cases:
        for dtype in ("float32", "float64"):
            region = cls.random("cpu", dtype, dims, attrs)
            for cand in REGISTRY.candidates("cpu", region.op):
                if cand.applies_to(region) is True:
                    v = verify(cand, cand.param_space()[0], region)
                    assert v.passed, (cand.name, dtype, v.reason)


# --- 8: cheap checks at large shapes -----------------------------------------------------
def _large_matmul(rng):
    m, n, k = 700, 530, 520  # over CHEAP_CHECK_WORK: checked by Freivalds and sampled rows/columns
    assert m * n * k > CHEAP_CHECK_WORK
    return Matmul.random("cpu", "float32", {"m": m, "n": n, "k": k}, rng=rng)


@pytest.mark.parametrize("where", ["random", "last_row", "last_col", "middle_small"])
def test_a_single_wrong_element_anywhere_fails_the_cheap_check(where):
    rng = np.random.default_rng(7)
    region = _large_matmul(rng)
    y = region.a @ region.b
    m, n = y.shape
    i, j = {"random": (int(rng.integers(1, m - 1)), int(rng.integers(1, n - 1))), "last_row": (m - 1, 123),
            "last_col": (311, n - 1), "middle_small": (m // 2 + 3, n // 2 + 5)}[where]
    rms = float(np.sqrt(np.mean(y.astype(np.float64) ** 2)))
    # "middle_small": just over the Frobenius budget's worth for one element (1e-5 * ||ref||)
    y[i, j] += 1.0 if where != "middle_small" else 1.5e-5 * rms * math.sqrt(m * n)
    reason, rel, _ = check_output(region, y, arbiter.oracles.budgets.budget_for("matmul", "float32"), rng)
    assert reason, (where, rel)
    if where != "middle_small":  # a large error names its row; a just-over-budget one fails on the Frobenius norm
        assert (f"row {i}" in reason) or (f"({i}, {j})" in reason), reason
    good = region.a @ region.b
    assert check_output(region, good, arbiter.oracles.budgets.budget_for("matmul", "float32"), rng)[0] == ""


def test_cheap_check_of_a_large_row_op_is_chunked_and_exact():
    from arbiter import verify as verify_mod

    rng = np.random.default_rng(3)
    region = Softmax.random("cpu", "float32", {"rows": 1500, "cols": 1000}, rng=rng)
    assert verify_mod.CHUNK_ELEMENTS < 1500 * 1000
    y = _softmax_rows(region.x.astype(np.float64)).astype(np.float32)
    budget = arbiter.oracles.budgets.budget_for("softmax", "float32")
    assert check_output(region, y, budget, rng)[0] == ""
    y[1499, 999] *= 1.01
    assert "(1499, 999)" in check_output(region, y, budget, rng)[0]


def test_oracle_is_unchanged_by_the_gate_on_the_cpu():
    region = _mm({"m": 8, "n": 8, "k": 8})
    ref = op_kind("matmul").oracle(region)
    assert isinstance(ref, np.ndarray) and ref.dtype == np.float64


def test_a_huge_zero_stride_view_is_a_region_error():
    x = np.broadcast_to(np.ones(1, np.float32), (1 << 22, 1 << 20))  # 16 TiB logical
    with pytest.raises(arbiter.RegionError) as err:
        Softmax(x)
    assert err.value.argument == "x" and "zero-stride" in str(err.value)
    small = np.broadcast_to(np.ones(4, np.float32), (3, 4))
    assert Softmax(small).key is not None  # a small broadcast view is fine


def test_gate_memory_on_first_call_is_bounded(tmp_path):
    """Gating a 64 MiB softmax on its first dispatch: peak RSS growth within 3x the operand+output plus 64 MiB
    (``benchmarks/tune_cost.py --gate-memory`` measures the 256 MiB case of issue 20)."""
    import subprocess

    script = textwrap.dedent("""
        import resource, numpy as np, arbiter
        from arbiter.regions import Softmax
        x = np.random.default_rng(0).standard_normal((4096, 4096), dtype=np.float32)  # 64 MiB
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        arbiter.run_arbitrated("softmax", Softmax(x))
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print((after - before) * 1024)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                         env={**__import__("os").environ, "ARBITER_DB": str(tmp_path / "r.db")})
    assert out.returncode == 0, out.stderr
    grew = int(out.stdout.split()[-1])
    operand_and_output = 2 * 64 * 2**20
    assert grew <= 3 * operand_and_output + 64 * 2**20, grew / 2**20
    dispatch.reset()


def test_problem_keys_need_no_operands():
    """``tune --dry-run`` (and the skip check) take keys from Problem.key: equal to the region's, no arrays."""
    from arbiter.suite import Problem, suite

    for problem in suite("quick"):
        assert problem.key("cpu") == problem.region("cpu").key, problem.label
    huge = Problem("matmul", {"m": 1 << 17, "n": 1 << 17, "k": 1 << 17})  # 64 GiB per operand
    assert huge.key("cpu").shape_text == "131072x131072x131072"
    looser = Problem("softmax", {"rows": 8, "cols": 8}, attrs={"accuracy": "looser"})
    assert looser.key("cpu") == looser.region("cpu").key and "accuracy=looser" in looser.key("cpu").id


def test_tune_dry_run_retune_stale_allocates_no_operands(tmp_path):
    import subprocess

    from arbiter.store import SolutionRecord
    from arbiter.store.sql import SqlStore

    db = tmp_path / "r.db"
    st = SqlStore(str(db))
    key = "cpu:matmul:float32:RR:activation=none,bias=0,residual=0:m131072,n131072,k131072"
    from arbiter.env import EnvironmentKey

    old_env = EnvironmentKey.from_fields("cpu", {"device": "an older machine"})
    st.save_solution(SolutionRecord(key, "numpy_matmul", "numpy_matmul@x", {}, "tier", old_env.fingerprint), old_env)
    st.close()
    out = subprocess.run([sys.executable, "-m", "arbiter", "--db", str(db), "tune", "--retune-stale", "--dry-run"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "would tune matmul 131072x131072x131072" in out.stdout


@pytest.mark.parametrize("op", ["matmul_gelu", "gated"])
def test_nonlinear_products_at_large_shapes_check_every_tail_row_and_column(op):
    """No Freivalds identity through an activation: the sampled check covers every row and column of the
    partial last tile of 128, plus random ones."""
    from arbiter.regions import Gated

    rng = np.random.default_rng(11)
    dims = {"m": 700, "n": 530, "k": 520}
    region = (Matmul.random("cpu", "float32", dims, {"activation": "gelu", "bias": "1"}, rng=rng) if op != "gated"
              else Gated.random("cpu", "float32", dims, rng=rng))
    ref = op_kind(region.op).oracle(region).astype(np.float32)
    budget = arbiter.oracles.budgets.budget_for(region.op, "float32")
    assert check_output(region, ref.copy(), budget, rng)[0] == ""
    for i, j in ((650, 17), (3, 520)):  # a tail row (700 % 128 = 60), a tail column (530 % 128 = 18)
        y = ref.copy()
        y[i, j] += 1.0
        assert f"({i}, {j})" in check_output(region, y, budget, rng)[0]


def test_cli_tune_allow_looser_tunes_the_consenting_key(tmp_path):
    """``arbiter tune --allow-looser``: the key carries accuracy=looser (a plug-in's bf16 GEMM may serve it)."""
    import subprocess

    plugin = tmp_path / "looser_plugin.py"
    plugin.write_text(textwrap.dedent('''
        import sys
        sys.path.insert(0, %r)
        import arbiter
        from wrong_candidates import Bf16Matmul
        arbiter.register(Bf16Matmul())
    ''' % str(__import__("pathlib").Path(__file__).parent)))  # noqa: UP031 (the template is Python code)
    env = {**__import__("os").environ, "ARBITER_PLUGINS": "looser_plugin",
           "PYTHONPATH": f"{tmp_path}:{__import__('os').environ.get('PYTHONPATH', '')}"}
    db = ["--db", str(tmp_path / "r.db")]
    what = ["--op", "matmul", "--shape", "32x32x32"]
    tuned = subprocess.run([sys.executable, "-m", "arbiter", *db, "tune", *what, "--allow-looser"],
                           capture_output=True, text=True, timeout=300, env=env)
    assert tuned.returncode == 0, tuned.stdout + tuned.stderr

    def explain(*extra):
        out = subprocess.run([sys.executable, "-m", "arbiter", *db, "explain", *what, "--json", *extra],
                             capture_output=True, text=True, timeout=300, env=env)
        assert out.returncode == 0, out.stdout + out.stderr
        found = __import__("json").loads(out.stdout)
        return found["key"], {r["solution"]: r for r in found["rows"]}

    key, rows = explain()
    assert "accuracy=looser" not in key
    assert rows["bf16_matmul"]["status"] == "excluded" and "opted in" in rows["bf16_matmul"]["reason"]
    key, rows = explain("--allow-looser")
    assert "accuracy=looser" in key and rows["bf16_matmul"]["status"] == "passed"
    assert rows["bf16_matmul"]["looser_budget"]


def test_smaller_probes_of_sampled_products_get_the_full_reference():
    """Gated at 1024^3 is checked by samples at its real shape; the bucket's 513x515x517 probe is compared in
    full, so one interior element wrong only there (no sampled or tail row) still fails."""
    from arbiter.regions import Gated

    class WrongInsideOtherShapes(Wrong):
        name, op = "wrong_inside_other_shapes", "gated"

        def run(self, region, params):
            out = REGISTRY.get("numpy_gated", "cpu", "gated").run(region, params)
            if out.shape[0] != 1024:
                out[out.shape[0] // 2, out.shape[1] // 2] += 1.0
            return out

    region = Gated.random("cpu", "float32", {"m": 1024, "n": 1024, "k": 1024})
    v = verify(WrongInsideOtherShapes(), {}, region)
    assert not v.passed and v.reason.startswith("at 513x515x517") and "(256, 257)" in v.reason, v.reason


def test_an_output_that_overflows_its_dtype_is_compared_as_inf():
    """exp(12) is 162755: past float16's 65504, so every correct float16 kernel stores inf there."""
    from arbiter.oracles.budgets import budget_for
    from arbiter.verify import compare

    ref = np.array([1.0, 162754.79, -1e6])
    y = np.array([1.0, np.inf, -np.inf], dtype=np.float16)
    assert compare(y, ref, budget_for("pointwise", "float16"))[0] == ""
    assert "Inf" in compare(np.array([1.0, np.inf, 0.0], np.float32), np.array([1.0, 162754.79, 0.0]),
                            budget_for("pointwise", "float32"))[0]


def test_rounding_into_half_precision_subnormals_is_not_an_error_but_one_step_more_is():
    """Seen on the H200: a correct fp16 GEMM stores 5.008e-7 as 4.768e-7 (the nearest fp16 subnormal); the
    gate must not charge the format's rounding to the kernel, and must still fail an error of one spacing."""
    from arbiter.oracles.budgets import budget_for
    from arbiter.verify import Tally

    budget = budget_for("matmul", "float16")
    ref = np.array([[5.00795e-07]])
    stored = ref.astype(np.float16)
    tally = Tally()
    assert tally.add(stored, ref, budget) == ""
    assert tally.finish(budget)[0] == ""
    off = (stored.astype(np.float64) + 2.0 ** -24).astype(np.float16)  # one subnormal spacing further
    tally = Tally()
    tally.add(off, ref, budget)
    assert tally.finish(budget)[0] != ""


@requires_gpu
@pytest.mark.gpu
def test_a_torch_callers_large_matmul_is_gated_on_device_probes():
    """A key first seen through torch tensors is gated on CuPy probes with CuPy pristine copies: the sampled
    check of a large product (above CHEAP_CHECK_WORK) compares device arrays with device arrays."""
    torch = pytest.importorskip("torch")
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(1024, 768, device="cuda", generator=g).half()
    b = (torch.randn(768, 640, device="cuda", generator=g) / 28).half()
    res = torch.randn(1024, 640, device="cuda", generator=g).half()
    region = Matmul(a, b, residual=res)
    assert CHEAP_CHECK_WORK < 1024 * 768 * 640
    cand = REGISTRY.get("torch_matmul", "nvidia", "matmul")
    verdict = verify(cand, cand.param_space()[0], region)
    assert verdict.passed, verdict.reason
