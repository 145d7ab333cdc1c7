"""The Triton row ops (``triton_softmax``, ``triton_rmsnorm``, ``triton_layernorm``; ``gpu_templates/triton_rows.py``).

CPU. Without Triton: registration below the CUDA row kernels, the tiles, the plan of a row (registers or looped),
what they take and decline, and each specialization's signature. With Triton (its interpreter,
``TRITON_INTERPRET=1``, runs the ``@triton.jit`` kernel on CPU tensors): the kernel as the candidate specializes
and launches it, through the real F4 gate (adversarial families, bucket edges, shifted pointers, in place) at odd
widths, tails of every tile, long rows in the looped path and strided rows; bfloat16 against float64 directly. The
GPU gate tests are in ``test_triton_gpu.py``.
"""
from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pytest

from arbiter.candidates import REGISTRY, Tier, gpu_triton
from arbiter.candidates.gpu_templates import triton_rows
from arbiter.regions import LayerNorm, RMSNorm, Softmax
from arbiter.verify import verify
from triton_interpret import INTERPRETING, interpreted_kernels, pointer, run_interpreted, torch_view

NAMES = {"softmax": "triton_softmax", "rmsnorm": "triton_rmsnorm", "layernorm": "triton_layernorm"}
CUDA_ROWS = {"softmax": ("softmax_warp", "softmax_block"), "rmsnorm": ("rmsnorm_rows",),
             "layernorm": ("layernorm_rows",)}
REGION = {"softmax": Softmax, "rmsnorm": RMSNorm, "layernorm": LayerNorm}
ROWS_ARGS = ["x_ptr", "w_ptr", "b_ptr", "y_ptr", "eps", "R", "C", "stride_xm", "stride_ym", "OP", "BLOCK", "ROWS",
             "LOOPED", "HAS_BIAS"]


def _cand(op, target="nvidia"):
    REGISTRY.load_builtin(target)
    return REGISTRY.get(("rocm_" if target == "rocm" else "") + NAMES[op], target, op)


@pytest.mark.parametrize("op", NAMES)
def test_they_register_as_emitted_below_the_cuda_row_kernels(op):
    cand = _cand(op)
    assert cand.tier == Tier.EMITTED and cand.dtypes == ("float16", "bfloat16", "float32")
    for name in CUDA_ROWS[op]:
        cuda = REGISTRY.get(name, "nvidia", op)
        assert cuda.tier == Tier.EMITTED and cuda.priority > cand.priority  # the CUDA kernels stay the default
    assert [tuple(p["tile"]) for p in cand.param_space()] == triton_rows.TILES
    assert _cand(op, "rocm").param_space() == cand.param_space()


def test_the_tiles_are_a_few_powers_of_two_within_the_register_budget():
    assert 1 <= len(triton_rows.TILES) <= 6
    for cap, rows, warps in triton_rows.TILES:
        assert all(v & (v - 1) == 0 for v in (cap, rows, warps)) and warps <= 16
        assert cap // (warps * 32) <= 64  # float32 values a thread holds at the cap (the CUDA kernels' 64)


def test_a_row_plan_holds_a_row_in_registers_to_the_cap_and_loops_past_it():
    assert triton_rows.row_plan(768, (4096, 4, 4)) == (1024, 4, False)
    assert triton_rows.row_plan(2048, (4096, 4, 4)) == (2048, 2, False)  # ROWS halved to fit the cap
    assert triton_rows.row_plan(4096, (4096, 4, 4)) == (4096, 1, False)
    assert triton_rows.row_plan(4097, (4096, 4, 4)) == (4096, 1, True)  # cap-wide chunks, one row a program
    assert triton_rows.row_plan(1, (8192, 16, 8)) == (1, 16, False)
    cand = _cand("softmax")
    region = Softmax.random("cpu", "float16", {"rows": 8, "cols": 3000})
    # equal launches are one signature: (2048, 1, 4) and (4096, 1, 8) differ here, the first two tiles do not
    signatures = [cand.launch_signature(region, p) for p in cand.param_space()]
    assert signatures[0] != signatures[1] and signatures[4] == (2048, 1, True, 4)


@pytest.mark.parametrize("op", NAMES)
def test_they_take_any_rank_strided_rows_and_half_or_single_precision(op):
    cand = _cand(op)
    for dtype in ("float16", "float32"):
        assert cand.applies_to(REGION[op].random("cpu", dtype, {"rows": 5, "cols": 33})) is True
        padded = REGION[op].random("cpu", dtype, {"rows": 5, "cols": 33}, layout="P")
        assert padded.x.strides[0] != 33 * padded.x.itemsize and cand.applies_to(padded) is True
    x3 = np.random.default_rng(0).standard_normal((2, 3, 40)).astype(np.float32)
    w = np.ones(40, np.float32)
    region = {"softmax": lambda: Softmax(x3), "rmsnorm": lambda: RMSNorm(x3, w), "layernorm": lambda: LayerNorm(x3, w)}
    assert cand.applies_to(region[op]()) is True


@pytest.mark.parametrize("op", NAMES)
def test_they_decline_what_they_do_not_serve(op):
    cand = _cand(op)
    every_other = REGION[op].random("cpu", "float32", {"rows": 5, "cols": 33}, layout="S")  # no unit stride
    assert "unit column stride" in cand.applies_to(every_other)
    assert "float64" in cand.applies_to(REGION[op].random("cpu", "float64", {"rows": 5, "cols": 33}))
    x = np.random.default_rng(1).standard_normal((6, 40)).astype(np.float32)
    assert "unit column stride" in cand.applies_to(_region(op, np.asfortranarray(x)))
    if op == "softmax":
        assert "last axis" in cand.applies_to(Softmax(x, axis=0))
    else:
        wide = np.ones(80, np.float32)[::2]  # a strided weight
        strided = RMSNorm(x, wide) if op == "rmsnorm" else LayerNorm(x, wide)
        assert "weight" in cand.applies_to(strided)


def _region(op, x):
    w = np.ones(x.shape[-1], x.dtype)
    return {"softmax": lambda: Softmax(x), "rmsnorm": lambda: RMSNorm(x, w), "layernorm": lambda: LayerNorm(x, w)}[op]()


def _kernel_args(names):
    return types.SimpleNamespace(fn=eval(f"lambda {', '.join(names)}: None"))  # a signature only


@pytest.fixture
def rows_signature(monkeypatch):
    monkeypatch.setattr(gpu_triton, "kernels", lambda: types.SimpleNamespace(rows=_kernel_args(ROWS_ARGS)))


def test_the_argument_list_here_is_the_kernels():
    text = (Path(gpu_triton.__file__).parent / "_triton_kernels.py").read_text()
    head = text.split("def rows(", 1)[1].split("):", 1)[0]
    assert [p.split(":")[0].strip() for p in head.replace("\n", " ").split(",") if p.strip()] == ROWS_ARGS


def test_a_rows_specialization_passes_eps_per_call_and_states_the_rest(rows_signature):
    region = LayerNorm.random("cpu", "float16", {"rows": 100, "cols": 768}, {"bias": "0"}, layout="P")
    out = np.empty((100, 768), np.float16)
    spec, grid = triton_rows.rows_spec(region, (4096, 4, 4), True, out)
    assert [spec.signature[n] for n in ROWS_ARGS[:4]] == ["*fp16"] * 4
    assert spec.signature["eps"] == "fp32" and "eps" not in spec.constexprs  # a runtime scalar: never bound
    assert spec.signature["R"] == spec.signature["stride_xm"] == "i32"
    values = dict(zip(ROWS_ARGS[5:], spec.values))
    assert values["stride_xm"] == region.x.strides[0] // 2 == 776 and values["stride_ym"] == 768
    assert spec.constexprs == {"OP": 2, "BLOCK": 1024, "ROWS": 4, "LOOPED": False, "HAS_BIAS": False}
    assert grid == (25, 1, 1)
    # R = 100 and the padded row stride 776 are no multiples of 16
    assert {ROWS_ARGS[i] for i in spec.divisible} == {"x_ptr", "w_ptr", "b_ptr", "y_ptr", "C", "stride_ym"}
    looped, grid = triton_rows.rows_spec(Softmax.random("cpu", "float32", {"rows": 3, "cols": 9000}),
                                         (8192, 16, 8), False, np.empty((3, 9000), np.float32))
    assert looped.constexprs["LOOPED"] is True and looped.constexprs["BLOCK"] == 8192 and grid == (3, 1, 1)
    assert looped.signature["x_ptr"] == "*fp32" and not {0, 1, 2, 3} & set(looped.divisible)


def test_rows_past_32_bit_offsets_take_64_bit_integers(rows_signature):
    big = types.SimpleNamespace(shape=(300000, 8192), strides=(16384, 2), itemsize=2, ndim=2)
    region = types.SimpleNamespace(x=big, dims={"rows": 300000, "cols": 8192}, dtype="bfloat16", op="rmsnorm")
    spec, _ = triton_rows.rows_spec(region, triton_rows.TILES[0], True, big)
    assert spec.signature["x_ptr"] == "*bf16" and spec.signature["R"] == spec.signature["stride_xm"] == "i64"


def test_a_call_passes_the_pointers_then_eps(monkeypatch):
    calls = []
    plan = types.SimpleNamespace(call=lambda stream, *args: calls.append((stream, args)))
    cand = _cand("rmsnorm")
    monkeypatch.setattr(type(cand), "plan", lambda self, region, params, out, aligned: plan)
    monkeypatch.setattr(type(cand), "stream", lambda self: 7)
    arrays = {}

    def fake(name, ptr):
        arrays[name] = types.SimpleNamespace(data=types.SimpleNamespace(ptr=ptr))
        return arrays[name]

    region = types.SimpleNamespace(x=fake("x", 0x100), weight=fake("w", 0x200), eps=1e-3,
                                   alloc_out=lambda: fake("out", 0x300))
    assert cand.run(region, cand.param_space()[0]) is arrays["out"]
    assert calls == [(7, (0x100, 0x200, 0, 0x300, 1e-3))]


# --- the kernel itself, under Triton's interpreter ---------------------------------------------------------------
@pytest.mark.skipif(INTERPRETING, reason="this process is the interpreted run")
def test_the_kernel_under_triton_interpreter():
    run_interpreted(__file__)


@pytest.fixture(scope="module")
def interpreted():
    yield from interpreted_kernels()


class Interpreted:
    """A cpu-target stand-in that runs the candidate's own specialization (``rows_spec``: block, rows a program,
    looped or not, strides, flags) through Triton's interpreter on torch views of NumPy operands."""

    target = "cpu"

    def available(self):
        return True

    def run(self, region, params):
        out = region.alloc_out()
        weight, bias = getattr(region, "weight", None), getattr(region, "bias", None)
        aligned = not any(pointer(a) % 16 for a in (region.x, weight, bias, out) if a is not None)
        spec, grid = triton_rows.rows_spec(region, tuple(params["tile"]), aligned, out)
        x = torch_view(region.x).reshape(-1, region.dims["cols"]) if region.x.ndim != 2 else torch_view(region.x)
        y = torch_view(out)
        w = torch_view(weight) if weight is not None else x
        b = torch_view(bias) if bias is not None else x
        names = list(spec.signature)[5:]
        gpu_triton.kernels().rows[grid](x, w, b, y, getattr(region, "eps", 0.0), **dict(zip(names, spec.values)))
        return out


def _interpreted(op):
    base = type(_cand(op))
    return type(f"Interpreted{base.__name__}", (Interpreted, base), {})()


SMALL_TILES = [[64, 4, 4], [32, 1, 4], [256, 16, 8]]  # caps small enough that the gate's widths loop past them


@pytest.mark.parametrize("op", NAMES)
@pytest.mark.parametrize("dims,layout,tile", [
    ({"rows": 7, "cols": 37}, "R", triton_rows.TILES[0]),     # one row a program, tail columns
    ({"rows": 9, "cols": 100}, "R", triton_rows.TILES[3]),    # 16 rows a program, 9 rows: tail rows
    ({"rows": 5, "cols": 200}, "P", SMALL_TILES[0]),          # looped, strided rows
    ({"rows": 6, "cols": 65}, "R", SMALL_TILES[1]),           # looped, a one-column last chunk
    ({"rows": 3, "cols": 129}, "P", SMALL_TILES[2]),          # in registers under a small cap, strided rows
], ids=["registers", "rows-tail", "looped-strided", "looped-tail", "strided"])
def test_interpreted_kernel_passes_the_gate(interpreted, op, dims, layout, tile):
    cand = _interpreted(op)
    for dtype in ("float32", "float16"):
        region = REGION[op].random("cpu", dtype, dims, layout=layout, rng=np.random.default_rng(40))
        assert cand.applies_to(region) is True
        verdict = verify(cand, {"tile": list(tile)}, region)
        assert verdict.passed, (op, dtype, dims, tile, verdict.reason)


@pytest.mark.parametrize("op", NAMES)
def test_interpreted_kernel_passes_the_gate_in_place(interpreted, op):
    region = REGION[op].random("cpu", "float16", {"rows": 5, "cols": 70}, rng=np.random.default_rng(41))
    inplace = type(region)(region.x, *([region.weight] if op != "softmax" else []), out=region.x)
    assert "inplace" in dict(inplace.attrs)
    for tile in (triton_rows.TILES[0], SMALL_TILES[0]):
        verdict = verify(_interpreted(op), {"tile": list(tile)}, inplace)
        assert verdict.passed, (op, tile, verdict.reason)


@pytest.mark.parametrize("op", NAMES)
@pytest.mark.parametrize("tile", [triton_rows.TILES[2], SMALL_TILES[0]], ids=["registers", "looped"])
def test_interpreted_bfloat16_matches_float64(interpreted, op, tile):
    """NumPy has no bfloat16 without ml_dtypes: torch's, checked against float64 of the rounded inputs."""
    import torch

    rng = np.random.default_rng(42)
    rows, cols = 6, 150
    x = torch.from_numpy(rng.standard_normal((rows, cols)) * 2 + 1).to(torch.bfloat16)
    w = torch.from_numpy(rng.standard_normal(cols)).to(torch.bfloat16)
    b = torch.from_numpy(rng.standard_normal(cols)).to(torch.bfloat16)
    y = torch.full((rows, cols), float("nan"), dtype=torch.bfloat16)
    region = types.SimpleNamespace(x=np.empty((rows, cols), np.float16), dims={"rows": rows, "cols": cols},
                                   dtype="bfloat16", op=op, bias=b if op == "layernorm" else None)
    spec, grid = triton_rows.rows_spec(region, tuple(tile), True, np.empty((rows, cols), np.float16))
    interpreted.rows[grid](x, w, b, y, 1e-5, **dict(zip(list(spec.signature)[5:], spec.values)))
    xd, wd, bd = (t.double().numpy() for t in (x, w, b))
    if op == "softmax":
        e = np.exp(xd - xd.max(1, keepdims=True))
        want = e / e.sum(1, keepdims=True)
    elif op == "rmsnorm":
        want = xd / np.sqrt((xd * xd).mean(1, keepdims=True) + 1e-5) * wd
    else:
        d = xd - xd.mean(1, keepdims=True)
        want = d / np.sqrt((d * d).mean(1, keepdims=True) + 1e-5) * wd + bd
    got = y.double().numpy()
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 8e-3  # bfloat16's rounding of the output


def test_the_identity_digests_the_rows_kernel():
    assert "def rows(" in _cand("layernorm").source()

