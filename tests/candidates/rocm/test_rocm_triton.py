"""The Triton candidates on the rocm target against the fake hip-python boundary (tests/rocm_fake.py): they
register, say why they cannot run (the target's reason first, then Triton's with the install hint), take fused
epilogues and half precision (the kernel is Triton's, not hiprtc's float32 templates), and launch through the
compiled kernel on the null stream with the RocmArrays' device pointers. Nothing here ran on an AMD GPU."""
from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pytest

import rocm_fake
from arbiter.candidates import REGISTRY, gpu_triton
from arbiter.candidates.gpu_templates import triton_gated, triton_matmul
from arbiter.regions import Gated, Matmul
from arbiter.targets import rocm


@pytest.fixture
def fake(monkeypatch):
    hip, _, _ = rocm_fake.install(monkeypatch, rocm)
    monkeypatch.setattr(rocm, "_handles", {})
    assert rocm.TARGET.available() is True
    yield hip
    rocm.TARGET.reset()


def _cand(name, op):
    REGISTRY.load_builtin("rocm")
    return REGISTRY.get(name, "rocm", op)


def test_without_triton_they_name_the_extra(fake, monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)
    gpu_triton._triton_reason.cache_clear()
    try:
        for name, op in (("rocm_triton_matmul", "matmul"), ("rocm_triton_gated", "gated")):
            reason = _cand(name, op).available()
            assert isinstance(reason, str) and "kernel-arbiter[triton]" in reason
    finally:
        gpu_triton._triton_reason.cache_clear()


def test_they_serve_fused_epilogues_in_half_precision(fake):
    cand = _cand("rocm_triton_matmul", "matmul")
    fused = Matmul.random("rocm", "float16", {"m": 8, "n": 8, "k": 8}, {"activation": "gelu", "residual": "1"})
    assert cand.applies_to(fused) is True
    assert "TF32" in cand.applies_to(Matmul.random("rocm", "float32", {"m": 8, "n": 8, "k": 8}))
    assert cand.tier == _cand("rocm_triton_gated", "gated").tier


class _Compiled:
    def __init__(self):
        self.run, self.function, self.packed_metadata, self.calls = types.SimpleNamespace(), 1, (4, 1, 0), []

    def __getitem__(self, grid):
        return lambda *args, stream: self.calls.append((grid, args, stream))


@pytest.mark.parametrize("name,op", [("rocm_triton_matmul", "matmul"), ("rocm_triton_gated", "gated")])
def test_a_call_launches_the_compiled_kernel_with_device_pointers_on_the_null_stream(fake, monkeypatch, name, op):
    compiled, asked = _Compiled(), types.SimpleNamespace(calls=[])  # (a namespace: digested by its type alone)

    def fake_compile(kernel, backend, device, spec, warps, stages):
        asked.calls.append((kernel, backend, device, warps, stages))
        return compiled

    module = triton_matmul if op == "matmul" else triton_gated
    monkeypatch.setattr(module, "compile_spec", fake_compile)
    monkeypatch.setattr(gpu_triton, "kernels", lambda: types.SimpleNamespace(gemm=_signature("gemm"),
                                                                              gated=_signature("gated")))
    cand = _cand(name, op)
    monkeypatch.setattr(type(cand), "plans", type(cand).plans.__class__())
    dims = {"m": 70, "n": 33, "k": 19}
    region = (Matmul.random("rocm", "float16", dims, {"bias": "1", "activation": "relu"}) if op == "matmul"
              else Gated.random("rocm", "float16", dims, rng=np.random.default_rng(3)))
    last = [p for p in cand.param_space() if "split_k" not in p][-1]  # a plain tile (70x33 never splits K)
    tile = list(last["tile"])
    before = cand.identity()
    cand.run(region, last)
    out = cand.run(region, last)  # warm: the same plan, no second compile
    assert asked.calls == [("gemm" if op == "matmul" else "gated", "hip", 0, tile[4], tile[5])]
    assert len(compiled.calls) == 2
    grid, args, stream = compiled.calls[-1]
    assert stream == 0 and grid == (-(-70 // tile[0]) * -(-33 // tile[1]), 1, 1)  # one program a tile
    pointers = ([region.a.ptr, region.b.ptr, out.ptr, region.bias.ptr, 0] if op == "matmul"
                else [region.x.ptr, region.w_gate.ptr, region.w_up.ptr, out.ptr])
    assert list(args[:len(pointers)]) == pointers
    assert args[len(pointers):len(pointers) + 3] == (70, 33, 19)
    assert cand.identity() == before  # plans and compiled kernels are state (Memo), not behaviour


def _signature(kernel):
    """The kernel's argument names, read from its source (no Triton here): a stand-in with that signature."""
    text = Path(gpu_triton.__file__).with_name("_triton_kernels.py").read_text()
    head = text.split(f"def {kernel}(", 1)[1].split("):", 1)[0]
    names = [p.split(":")[0].strip() for p in head.replace("\n", " ").split(",") if p.strip()]
    return types.SimpleNamespace(fn=eval(f"lambda {', '.join(names)}: None"))  # a signature only


@pytest.mark.parametrize("op", ["softmax", "rmsnorm", "layernorm"])
def test_the_row_ops_register_name_the_extra_and_take_half_precision(fake, monkeypatch, op):
    from arbiter.regions import LayerNorm, RMSNorm, Softmax

    cand = _cand(f"rocm_triton_{op}", op)
    region = {"softmax": Softmax, "rmsnorm": RMSNorm, "layernorm": LayerNorm}[op].random(
        "cpu", "float16", {"rows": 5, "cols": 70}, rng=np.random.default_rng(6))  # applies_to reads the key only
    assert cand.applies_to(region) is True and cand.tier == _cand("rocm_triton_matmul", "matmul").tier
    hiprtc = [c for c in REGISTRY.candidates("rocm", op) if "triton" not in c.name]
    assert all(c.priority > cand.priority for c in hiprtc)  # the hiprtc row kernels stay the default
    monkeypatch.setitem(sys.modules, "triton", None)
    gpu_triton._triton_reason.cache_clear()
    try:
        assert "kernel-arbiter[triton]" in cand.available()
    finally:
        gpu_triton._triton_reason.cache_clear()


def test_a_row_op_launches_with_device_pointers_then_eps_on_the_null_stream(fake, monkeypatch):
    from arbiter.candidates.gpu_templates import triton_rows
    from arbiter.regions import RMSNorm

    compiled, asked = _Compiled(), types.SimpleNamespace(calls=[])

    def fake_compile(kernel, backend, device, spec, warps, stages):
        asked.calls.append((kernel, backend, device, warps, stages))
        return compiled

    monkeypatch.setattr(triton_rows, "compile_spec", fake_compile)
    monkeypatch.setattr(gpu_triton, "kernels", lambda: types.SimpleNamespace(rows=_signature("rows")))
    cand = _cand("rocm_triton_rmsnorm", "rmsnorm")
    monkeypatch.setattr(type(cand), "plans", type(cand).plans.__class__())
    region = RMSNorm.random("rocm", "float16", {"rows": 70, "cols": 300}, rng=np.random.default_rng(7), eps=1e-4)
    params = cand.param_space()[2]  # 4 rows a program
    cand.run(region, params)
    out = cand.run(region, params)  # warm: the same plan
    assert asked.calls == [("rows", "hip", 0, params["tile"][2], 1)]
    grid, args, stream = compiled.calls[-1]
    assert stream == 0 and grid == (-(-70 // 4), 1, 1)
    assert list(args[:5]) == [region.x.ptr, region.weight.ptr, 0, out.ptr, 1e-4]
    assert args[5:9] == (70, 300, 300, 300)  # rows, cols, row strides of x and y
