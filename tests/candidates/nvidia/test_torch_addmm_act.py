"""torch_addmm_act: the epilogue inside torch's GEMM (``_addmm_activation``, ``addmm`` with the residual as C).

CPU tests check which epilogues it takes and the torch ops one call makes (CPU torch tensors: the op sequence
does not depend on the device; the values of ``use_gelu`` do, so they are checked on the GPU only). GPU tests
gate every epilogue it serves in fp32/fp16/bf16 at awkward shapes, and serve a torch caller without ``out=``.
"""
from __future__ import annotations

import numpy as np
import pytest

from arbiter.candidates import REGISTRY
from arbiter.regions import Matmul
from gpu_support import check_builtin_solution, gpu_available, requires_gpu

torch = pytest.importorskip("torch")

SERVED = [{"bias": "1", "activation": "gelu_tanh"}, {"bias": "1", "activation": "gelu_tanh", "residual": "1"},
          {"residual": "1"}]
DECLINED = [{}, {"bias": "1"}, {"bias": "1", "activation": "gelu"}, {"activation": "relu"},
            {"bias": "1", "activation": "silu"}, {"bias": "1", "residual": "1"},
            {"activation": "gelu_tanh", "residual": "1"}]


def _ids(attrs):
    return "+".join(k if v == "1" else v for k, v in attrs.items()) or "plain"


def _cand():
    REGISTRY.load_builtin("nvidia")
    return REGISTRY.get("torch_addmm_act", "nvidia", "matmul")


@pytest.mark.parametrize("attrs, dtype", [(SERVED[0], "float16"), (SERVED[2], "float32"),
                                          (SERVED[2], "float16")], ids=lambda v: _ids(v) if isinstance(v, dict) else v)
def test_it_applies_where_torch_fuses_the_epilogue(attrs, dtype):
    region = Matmul.random("cpu", dtype, {"m": 5, "n": 7, "k": 3}, attrs)
    assert _cand().applies_to(region) is True


@pytest.mark.parametrize("attrs", SERVED[:2], ids=_ids)
def test_gelu_tanh_in_float32_is_declined(attrs):
    """cuBLASLt's GELU epilogue missed float32's budget on an H200 (3.8e-05 relative at 1x1x1 with a bias)."""
    region = Matmul.random("cpu", "float32", {"m": 5, "n": 7, "k": 3}, attrs)
    why = _cand().applies_to(region)
    assert isinstance(why, str) and why.startswith("gelu_tanh in float32")


@pytest.mark.parametrize("attrs", DECLINED, ids=_ids)
def test_it_declines_exact_gelu_and_what_torch_matmul_serves(attrs):
    region = Matmul.random("cpu", "float32", {"m": 5, "n": 7, "k": 3}, attrs)
    why = _cand().applies_to(region)
    assert isinstance(why, str) and why.startswith("epilogue") and "torch_matmul" in why


@pytest.mark.parametrize("attrs", [{"bias": "1", "activation": "relu"}, {"bias": "1", "activation": "relu",
                                                                        "residual": "1"}], ids=_ids)
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_relu_is_declined(attrs, dtype):
    """cuBLASLt's RELU_BIAS epilogue turned NaN into 0 on an H200 (the gate's nonfinite probe): float16 and
    bfloat16, and float32 with a column-major A."""
    region = Matmul.random("cpu", dtype, {"m": 5, "n": 7, "k": 3}, attrs)
    why = _cand().applies_to(region)
    assert isinstance(why, str) and why.startswith("relu:") and "NaN" in why


@pytest.mark.parametrize("dtype", ["float16"])  # bfloat16 takes the same branch (any dtype but float32)
def test_gelu_tanh_with_a_residual_in_half_precision_is_declined(dtype):
    """Two roundings (the fused GELU's output, then the residual add) missed the half-precision budget."""
    region = Matmul.random("cpu", dtype, {"m": 5, "n": 7, "k": 3}, {"bias": "1", "activation": "gelu_tanh",
                                                                    "residual": "1"})
    why = _cand().applies_to(region)
    assert isinstance(why, str) and why.startswith(f"gelu_tanh + residual in {dtype}")


class _Ops(torch.overrides.TorchFunctionMode):
    """Records the torch functions and methods a call makes."""

    def __init__(self):
        super().__init__()
        self.names: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("attrs,ops", [
    ({"bias": "1", "activation": "relu"}, ["_addmm_activation"]),
    ({"bias": "1", "activation": "gelu_tanh"}, ["_addmm_activation"]),
    ({"bias": "1", "activation": "relu", "residual": "1"}, ["_addmm_activation", "add_"]),
    ({"residual": "1"}, ["addmm"]),
], ids=lambda v: _ids(v) if isinstance(v, dict) else "")
def test_one_call_is_one_torch_op_plus_the_residual_add(attrs, ops):
    """The out= path (the gate's) makes exactly these ops; the one without out= makes the same ones, so the
    gate judges the code a caller runs (checked on the GPU, where a result can come back without out=)."""
    region = Matmul.random("cpu", "float32", {"m": 6, "n": 5, "k": 4}, attrs)
    out = np.full((6, 5), np.nan, dtype=np.float32)
    with _Ops() as seen:
        got = _cand().run(region.with_out(out), {})
    assert got is out
    assert [n for n in seen.names if not n.startswith("__")] == ops
    if attrs.get("activation") != "gelu_tanh":  # torch's CPU _addmm_activation computes erf GELU: values on GPU
        want = region.a.astype(np.float64) @ region.b
        if region.bias is not None:
            want = np.maximum(want + region.bias, 0)
        if region.residual is not None:
            want = want + region.residual
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


# --- on the GPU --------------------------------------------------------------------
SHAPES = [(1, 1, 1), (37, 29, 53), (65, 1, 300), (3, 40, 1100), (129, 70, 257), (2, 513, 7)]


def _dtypes():
    from arbiter import targets

    if not gpu_available():
        return ["float32"]
    return ["float32", "float16"] + (["bfloat16"] if targets.get("nvidia").bfloat16() is not None else [])


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("dtype", _dtypes())
@pytest.mark.parametrize("attrs", SERVED, ids=_ids)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_every_fused_epilogue_passes_the_gate(shape, attrs, dtype):
    m, n, k = shape
    check_builtin_solution(_cand(), {}, Matmul.random("nvidia", dtype, {"m": m, "n": n, "k": k}, attrs,
                                                      rng=np.random.default_rng(21)))


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("layout", ["RRS", "CR"])
def test_other_layouts_pass_the_gate(layout):
    # The lone residual (addmm's C): relu is declined (it drops NaN), and float32 tanh-GELU through cuBLASLt's
    # epilogue was not run in these layouts on the H200 (cublaslt_matmul's own missed the float32 budget).
    attrs = {"residual": "1"}
    check_builtin_solution(_cand(), {}, Matmul.random("nvidia", "float32", {"m": 45, "n": 23, "k": 31}, attrs,
                                                      layout, rng=np.random.default_rng(22)))


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("attrs", [a for a in SERVED if not (a.get("activation") == "gelu_tanh" and "residual" in a)
                                    ],
                         ids=_ids)
def test_a_torch_caller_without_out_gets_torch_s_fused_result(attrs):
    """No out=: the result is the tensor torch returned (its caching allocator), equal to the eager form
    F.gelu(addmm(bias, a, w), approximate='tanh') [+ residual] within fp16 rounding."""
    import arbiter

    g = torch.Generator(device="cuda").manual_seed(3)
    a = torch.randn(300, 200, device="cuda", dtype=torch.float16, generator=g)
    w = torch.randn(200, 129, device="cuda", dtype=torch.float16, generator=g) / 15
    bias = torch.randn(129, device="cuda", dtype=torch.float16, generator=g) if "bias" in attrs else None
    res = torch.randn(300, 129, device="cuda", dtype=torch.float16, generator=g) if "residual" in attrs else None
    act = attrs.get("activation", "none")
    region = Matmul(a, w, bias=bias, activation=act, residual=res)
    arbiter.arbitrate("matmul", region, force="torch_addmm_act")
    y = arbiter.run_arbitrated("matmul", Matmul(a, w, bias=bias, activation=act, residual=res))
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float16 and y.shape == (300, 129)
    z = a.float() @ w.float() + (bias.float() if bias is not None else 0)
    if act == "relu":
        z = torch.relu(z)
    elif act == "gelu_tanh":
        z = torch.nn.functional.gelu(z, approximate="tanh")
    if res is not None:
        z = z + res.float()
    torch.testing.assert_close(y.float(), z, rtol=2e-2, atol=2e-2)
