"""The Triton-emitted candidates (``triton_matmul``, ``triton_gated``; ``candidates/gpu_triton.py``).

CPU, no Triton needed (the GPU tests are ``test_triton_gpu.py``): what they take and why not, the install hint
without Triton, each specialization's signature (pointer types, unit strides as constexprs, 16-divisibility, 32-
or 64-bit integers, the epilogue flags), the launch plan's one call of the C launcher (and the generic path where
it does not fit), and Triton's cache pointed at the private folder.
"""
from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from arbiter.candidates import REGISTRY, Tier, gpu_triton
from arbiter.candidates.gpu_templates import triton_gated, triton_matmul
from arbiter.memo import Memo
from arbiter.regions import Gated, Matmul


def _cand(name="triton_matmul", op="matmul", target="nvidia"):
    REGISTRY.load_builtin(target)
    return REGISTRY.get(name, target, op)


def test_they_register_as_emitted_with_their_tiles_as_solution_indices():
    mm, gated = _cand(), _cand("triton_gated", "gated")
    assert mm.tier == gated.tier == Tier.EMITTED
    assert [tuple(p["tile"]) for p in mm.param_space()] == triton_matmul.TILES
    assert [tuple(p["tile"]) for p in gated.param_space()] == triton_gated.TILES
    for bm, bn, bk, group, warps, stages in triton_matmul.TILES + triton_gated.TILES:
        assert all(v & (v - 1) == 0 for v in (bm, bn, bk, warps)) and group >= 1 and stages >= 2
        ring = stages * (bm * bk + bk * bn * (2 if (bm, bn, bk, group, warps, stages) in triton_gated.TILES else 1))
        assert ring * 2 <= 227 * 1024  # the fp16 ring fits H100/H200's opt-in shared memory


def test_float32_is_refused_naming_tf32_and_half_types_taken_in_any_layout():
    mm, gated = _cand(), _cand("triton_gated", "gated")
    assert "TF32" in mm.applies_to(Matmul.random("cpu", "float32", {"m": 4, "n": 4, "k": 4}))
    assert "TF32" in gated.applies_to(Gated.random("cpu", "float32", {"m": 4, "n": 4, "k": 4}))
    for layout in ("RR", "CR", "SS", "RRS"):
        region = Matmul.random("cpu", "float16", {"m": 6, "n": 5, "k": 4}, {"residual": "1", "activation": "gelu"},
                               layout)
        assert mm.applies_to(region) is True
    assert gated.applies_to(Gated.random("cpu", "bfloat16" if _bf16() else "float16", {"m": 4, "n": 4, "k": 4},
                                         layout="SCR")) is True


def _bf16() -> bool:
    return importlib.util.find_spec("ml_dtypes") is not None


def test_without_triton_the_reason_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # import triton raises ImportError
    gpu_triton._triton_reason.cache_clear()
    try:
        reason = gpu_triton.triton_reason("cuda")
        assert isinstance(reason, str) and "kernel-arbiter[triton]" in reason
        # with its arrays here, the candidate says so; without them, the target's reason comes first
        monkeypatch.setattr(gpu_triton.TritonCandidate, "target_reason", lambda self: True)
        assert "kernel-arbiter[triton]" in _cand().available()
        monkeypatch.setattr(gpu_triton.TritonCandidate, "target_reason", lambda self: "needs CuPy")
        assert _cand().available() == "needs CuPy"
    finally:
        gpu_triton._triton_reason.cache_clear()


def _kernel_args(names):
    return types.SimpleNamespace(fn=eval(f"lambda {', '.join(names)}: None"))  # a signature only


GEMM_ARGS = ["a_ptr", "b_ptr", "c_ptr", "bias_ptr", "res_ptr", "M", "N", "K", "stride_am", "stride_ak", "stride_bk",
             "stride_bn", "stride_cm", "stride_rm", "stride_rn", "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M",
             "ACTIVATION", "HAS_BIAS", "HAS_RESIDUAL", "EVEN_K"]


@pytest.fixture
def gemm_kernel(monkeypatch):
    monkeypatch.setattr(gpu_triton, "kernels", lambda: types.SimpleNamespace(gemm=_kernel_args(GEMM_ARGS),
                                                                              gated=_kernel_args(GATED_ARGS)))


def test_the_argument_lists_here_are_the_kernels():
    text = (Path(gpu_triton.__file__).parent / "_triton_kernels.py").read_text()
    for kernel, names in (("gemm", GEMM_ARGS), ("gated", GATED_ARGS)):
        head = text.split(f"def {kernel}(", 1)[1].split("):", 1)[0]
        assert [p.split(":")[0].strip() for p in head.replace("\n", " ").split(",") if p.strip()] == names


def test_a_gemm_specialization_states_types_unit_strides_divisibility_and_flags(gemm_kernel):
    region = Matmul.random("cpu", "float16", {"m": 100, "n": 64, "k": 96}, {"bias": "1", "activation": "gelu"})
    out = np.empty((100, 64), np.float16)
    spec, grid = triton_matmul.gemm_spec(region, (64, 32, 32, 8, 4, 3), True, out)
    sig = spec.signature
    assert [sig[n] for n in GEMM_ARGS[:5]] == ["*fp16"] * 5
    assert sig["M"] == sig["N"] == sig["K"] == "i32"
    assert sig["stride_ak"] == sig["stride_bn"] == "constexpr"  # unit strides: contiguous loads
    assert sig["stride_am"] == "i32" and sig["stride_rm"] == "constexpr"  # no residual: its strides are unused
    assert spec.constexprs["ACTIVATION"] == gpu_triton.ACTIVATION_CODES["gelu"] == 2
    assert spec.constexprs["HAS_BIAS"] is True and spec.constexprs["HAS_RESIDUAL"] is False
    assert spec.constexprs["EVEN_K"] is True  # 96 = 3 x 32
    divisible = {GEMM_ARGS[i] for i in spec.divisible}
    assert divisible == {"a_ptr", "b_ptr", "c_ptr", "bias_ptr", "res_ptr", "N", "K", "stride_am", "stride_bk",
                         "stride_cm"}  # M = 100 is not a multiple of 16
    assert grid == (2 * 2, 1, 1)
    # what the launcher takes after the pointers: every argument in order, constexprs by value
    assert spec.values[:3] == [100, 64, 96] and len(spec.values) == len(GEMM_ARGS) - 5

    misaligned, _ = triton_matmul.gemm_spec(region, (64, 32, 32, 8, 4, 3), False, out)
    assert not {"a_ptr", "b_ptr", "c_ptr"} & {GEMM_ARGS[i] for i in misaligned.divisible}


def test_column_major_and_strided_operands_keep_their_strides(gemm_kernel):
    region = Matmul.random("cpu", "float16", {"m": 33, "n": 17, "k": 65}, {"residual": "1"}, "CSS")
    spec, _ = triton_matmul.gemm_spec(region, (64, 32, 32, 8, 4, 3), True, np.empty((33, 17), np.float16))
    values = dict(zip(GEMM_ARGS[5:], spec.values))
    a, b, res = region.a, region.b, region.residual
    assert spec.signature["stride_am"] == "constexpr" and values["stride_ak"] == 33  # column-major a
    assert values["stride_bk"] == b.strides[0] // 2 and values["stride_bn"] == b.strides[1] // 2
    assert values["stride_rm"] == res.strides[0] // 2 and values["stride_rn"] == res.strides[1] // 2
    assert spec.constexprs["EVEN_K"] is False and spec.constexprs["HAS_RESIDUAL"] is True
    assert a.strides[0] == 2  # the layout really is column-major


def test_operands_past_32_bit_offsets_take_64_bit_integers(gemm_kernel):
    big = types.SimpleNamespace(shape=(70000, 40000), strides=(80000, 2), itemsize=2)
    region = types.SimpleNamespace(a=big, b=big, bias=None, residual=None, dims={"m": 70000, "n": 40000, "k": 40000},
                                   dtype="bfloat16", activation="none")
    out = types.SimpleNamespace(shape=(70000, 40000), strides=(80000, 2), itemsize=2)
    spec, _ = triton_matmul.gemm_spec(region, triton_matmul.TILES[0], True, out)
    assert spec.signature["a_ptr"] == "*bf16" and spec.signature["M"] == spec.signature["stride_am"] == "i64"


GATED_ARGS = ["x_ptr", "wg_ptr", "wu_ptr", "out_ptr", "M", "N", "K", "stride_xm", "stride_xk", "stride_gk",
              "stride_gn", "stride_uk", "stride_un", "stride_om", "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "EVEN_K"]


def test_a_gated_specialization_reads_every_operands_strides(gemm_kernel):
    region = Gated.random("cpu", "float16", {"m": 20, "n": 48, "k": 40}, layout="RCR")
    spec, grid = triton_gated.gated_spec(region, (64, 64, 64, 8, 4, 3), False, np.empty((20, 48), np.float16))
    values = dict(zip(GATED_ARGS[4:], spec.values))
    assert values["stride_gn"] == 40 and spec.signature["stride_gk"] == "constexpr"  # column-major w_gate
    assert values["stride_un"] == 1 and values["stride_uk"] == 48
    assert spec.divisible == [GATED_ARGS.index(n) for n in ("N", "stride_uk", "stride_om")]  # not 40 or 20
    assert spec.constexprs["EVEN_K"] is False and grid == (1, 1, 1)


class CudaLauncher:  # the name LaunchPlan looks for: Triton's CUDA launcher class
    def __init__(self, scratch=0):
        self.calls, self.global_scratch_size, self.profile_scratch_size = [], scratch, 0
        self.launch_cooperative_grid, self.launch_pdl = False, False

    def launch(self, *args):
        self.calls.append(args)


class FakeCompiled:
    def __init__(self, launcher):
        self.run, self.function, self.packed_metadata, self.generic = launcher, 0xF00, (8, 1, 147456), []

    def __getitem__(self, grid):
        return lambda *args, stream: self.generic.append((grid, args, stream))


def test_a_warm_call_is_one_call_of_the_c_launcher_with_the_plans_arguments():
    launcher = CudaLauncher()
    plan = gpu_triton.LaunchPlan(FakeCompiled(launcher), (12, 1, 1), [100, 64, 1, 128])
    plan(0xABC, 1, 2, 3)
    (args,), = [launcher.calls]
    assert args == (12, 1, 1, 0xABC, 0xF00, 0, 0, None, None, (8, 1, 147456), None, None, None, 1, 2, 3, 100, 64, 1,
                    128)


@pytest.mark.parametrize("launcher", [CudaLauncher(scratch=64), types.SimpleNamespace()], ids=["scratch", "other"])
def test_a_kernel_needing_scratch_or_another_launcher_goes_through_compiled_kernel(launcher):
    compiled = FakeCompiled(launcher)
    plan = gpu_triton.LaunchPlan(compiled, (3, 2, 1), [7, 8])
    plan(5, 0x10, 0x20)
    assert compiled.generic == [((3, 2, 1), (0x10, 0x20, 7, 8), 5)]


def test_use_private_cache_points_triton_at_the_private_folder(monkeypatch, tmp_path):
    fake = types.SimpleNamespace(knobs=types.SimpleNamespace(cache=types.SimpleNamespace(dir="~/.triton/cache")))
    monkeypatch.setitem(sys.modules, "triton", fake)
    monkeypatch.setenv("ARBITER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(gpu_triton, "_cache_set", Memo())
    path = gpu_triton.use_private_cache("cuda")
    assert path == fake.knobs.cache.dir == str(tmp_path / "cache" / "triton" / "cuda")
    assert (tmp_path / "cache" / "triton" / "cuda").stat().st_mode & 0o077 == 0


def test_the_identity_digests_the_kernels_and_tritons_version():
    text = _cand().source()
    assert "def gemm(" in text and "def gated(" in text and "triton==" in text
