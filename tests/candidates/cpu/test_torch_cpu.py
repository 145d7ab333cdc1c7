"""torch as a CPU vendor (issue 31 item 1): every op kind served by a torch candidate where torch is installed,
gated like the rest, on zero-copy NumPy views; unavailable with the install hint where torch is missing."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import arbiter
from arbiter.candidates import REGISTRY, Tier
from arbiter.regions import FFT, Attention, Gated, LayerNorm, Matmul, Pointwise, RMSNorm, Softmax
from arbiter.verify import verify

torch = pytest.importorskip("torch")

# (candidate, op, region type, dims, attrs): odd sizes, every epilogue torch serves, every FFT kind.
CASES = [
    ("torch_matmul", "matmul", Matmul, {"m": 37, "n": 45, "k": 33}, {}),
    ("torch_matmul", "matmul", Matmul, {"m": 7, "n": 20, "k": 9}, {"bias": "1", "activation": "gelu", "residual": "1"}),
    ("torch_addmm_act", "matmul", Matmul, {"m": 7, "n": 20, "k": 9}, {"bias": "1", "activation": "relu"}),
    ("torch_addmm_act", "matmul", Matmul, {"m": 7, "n": 20, "k": 9}, {"residual": "1"}),
    ("torch_softmax", "softmax", Softmax, {"rows": 5, "cols": 333}, {}),
    ("torch_rmsnorm", "rmsnorm", RMSNorm, {"rows": 7, "cols": 300}, {}),
    ("torch_layernorm", "layernorm", LayerNorm, {"rows": 4, "cols": 77}, {}),
    ("torch_attention", "attention", Attention, {"batch": 1, "heads": 2, "q": 9, "k": 13, "d": 16}, {"causal": "1"}),
    ("torch_attention", "attention", Attention, {"batch": 2, "heads": 1, "q": 5, "k": 5, "d": 8}, {}),
    ("torch_gated", "gated", Gated, {"m": 5, "n": 24, "k": 16}, {}),
    ("torch_pointwise", "pointwise", Pointwise, {"size": 1001}, {"chain": "mul[t]>add[s]>silu>max[s]"}),
    ("torch_fft", "fft", FFT, {"batch": 3, "n": 60}, {"kind": "c2c"}),
    ("torch_fft", "fft", FFT, {"batch": 3, "n": 61}, {"kind": "r2c"}),
    ("torch_fft", "fft", FFT, {"batch": 3, "n": 61}, {"kind": "r2c", "inverse": "1"}),
]
IDS = [f"{name}-{'x'.join(map(str, dims.values()))}-{'-'.join(attrs.values()) or 'plain'}"
       for name, _, _, dims, attrs in CASES]


def test_every_op_kind_has_a_torch_candidate_on_the_cpu():
    ops = {"matmul", "softmax", "rmsnorm", "layernorm", "attention", "gated", "pointwise", "fft"}
    for op in ops:
        names = [c.name for c in REGISTRY.candidates("cpu", op) if c.name.startswith("torch_")]
        assert names, op
        for name in names:
            cand = REGISTRY.get(name, "cpu", op)
            assert cand.available() is True and cand.tier is Tier.HAND_TUNED and cand.target == "cpu"
            # after NumPy's vendor calls in the tier: a fresh key's default does not change with torch installed
            assert cand.priority < 0


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,op,kind,dims,attrs", CASES, ids=IDS)
def test_it_passes_the_gate(name, op, kind, dims, attrs, dtype, rng):
    cand = REGISTRY.get(name, "cpu", op)
    region = kind.random("cpu", dtype, dims, attrs, rng=rng)
    assert cand.applies_to(region) is True
    verdict = verify(cand, {}, region)
    assert verdict.passed, f"{name}: {verdict.reason}"


def test_it_serves_numpy_and_torch_callers_without_copying_the_operands(rng):
    region = Softmax.random("cpu", "float32", {"rows": 4, "cols": 50}, rng=rng)
    cand = REGISTRY.get("torch_softmax", "cpu", "softmax")
    seen = []
    real = torch.from_numpy

    def spy(array):
        seen.append(array)
        return real(array)

    torch.from_numpy = spy
    try:
        y = cand.run(region.with_out(None), {})
    finally:
        torch.from_numpy = real
    assert any(a is region.x for a in seen)  # the operand itself, viewed
    assert isinstance(y, np.ndarray)
    np.testing.assert_allclose(y.sum(axis=-1), 1, rtol=1e-5)
    decision = arbiter.arbitrate("softmax", region, force="torch_softmax")
    assert decision.winner.candidate.name == "torch_softmax"
    t = torch.from_numpy(region.x.copy())
    served = arbiter.run_arbitrated("softmax", Softmax(t))
    assert isinstance(served, torch.Tensor)
    torch.testing.assert_close(served, torch.softmax(t, -1))


def test_bfloat16_and_negative_strides_are_declined_with_reasons(rng):
    cand = REGISTRY.get("torch_softmax", "cpu", "softmax")
    x = rng.standard_normal((4, 8)).astype(np.float32)
    assert "negative strides" in cand.applies_to(Softmax(x[:, ::-1]))


def test_without_torch_every_torch_candidate_is_unavailable_with_the_install_hint():
    code = ("import sys; sys.modules['torch'] = None\n"
            "from arbiter.candidates import REGISTRY\n"
            "for op in ('matmul', 'softmax', 'fft'):\n"
            "    for c in REGISTRY.candidates('cpu', op):\n"
            "        if c.name.startswith('torch_'): print(c.name, c.available())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    lines = out.strip().splitlines()
    assert len(lines) >= 4, out
    assert all("pip install 'kernel-arbiter[torch]'" in line for line in lines), out


def test_torch_threads_is_a_parameter_set_for_the_call_and_put_back(rng, monkeypatch):
    cand = REGISTRY.get("torch_layernorm", "cpu", "layernorm")
    assert cand.param_space() == [{}, {"torch_threads": 1}]
    region = LayerNorm.random("cpu", "float32", {"rows": 4, "cols": 77}, rng=rng)
    assert verify(cand, {"torch_threads": 1}, region).passed
    before = torch.get_num_threads()
    seen = []
    real = torch.layer_norm
    monkeypatch.setattr(torch, "layer_norm", lambda *a: seen.append(torch.get_num_threads()) or real(*a))
    cand.run(region.with_out(None), {"torch_threads": 1})
    assert seen == [1] and torch.get_num_threads() == before
