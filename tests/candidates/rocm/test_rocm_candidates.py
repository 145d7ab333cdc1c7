"""ROCm candidates: the shared templates preprocessed for HIP and CUDA, and the candidates' code paths
(source assembly, hiprtc options, launch arguments, hipBLAS marshalling through the F4 gate) against the
fake hip-python boundary of tests/rocm_fake.py. Nothing here ran on an AMD GPU."""
from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

import rocm_fake
from arbiter.candidates import REGISTRY
from arbiter.regions import Matmul, Softmax
from arbiter.targets import rocm
from arbiter.targets.hiprtc import BACKEND as HIP
from arbiter.targets.nvrtc import BACKEND as CUDA
from arbiter.verify import verify

KERNELS = [  # (files, defines) as the rocm candidates build them
    (("gemm_tiled.cu",), (("BM", 64), ("BN", 64), ("BK", 16), ("TM", 4), ("TN", 4))),
    (("gemv.cu",), (("ROWS", 8), ("VEC", 4))),
    (("rows_common.cuh", "softmax.cu"), (("ROW_THREADS", 256), ("ROWS_PER_BLOCK", 1), ("VEC", 4), ("ITERS", 2))),
    (("rows_common.cuh", "rmsnorm.cu"), (("ROW_THREADS", 32), ("ROWS_PER_BLOCK", 4), ("VEC", 1), ("ITERS", 4))),
]
CUDA_ONLY = [r"__shfl_\w+_sync\s*\(", r"\basm\b", r"__ldg\s*\(", r"\bcvt\.", r"mma\.sync"]


def preprocess(source: str, *defines: str) -> str:
    cpp = shutil.which("cpp") or pytest.skip("no C preprocessor (cpp) here")
    done = subprocess.run([cpp, "-P", "-x", "c++", *defines, "-"], input=source, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("files, defines", KERNELS)
def test_hip_expansion_has_no_cuda_only_constructs(files, defines):
    from arbiter.candidates.gpu_templates.gemm import IDENTITY_EPILOGUE

    prelude = IDENTITY_EPILOGUE if files[0].startswith(("gemm", "gemv")) else ""
    text = preprocess(HIP.source("float32", dict(defines), files, prelude),
                      "-D__HIPCC_RTC__", "-D__HIP_PLATFORM_AMD__")
    for pattern in CUDA_ONLY:
        assert not re.search(pattern, text), f"{files}: HIP expansion still has {pattern}"
    if "warp_sum" in text:  # every reduction is a width-32 shuffle: the templates' warp on wave64 too
        shuffles = re.findall(r"__shfl_xor\((\(\w+\)), (\(\w+\)), (\w+)\)", text)
        assert len(shuffles) == 2 and all(width == "32" for *_, width in shuffles)


@pytest.mark.parametrize("files, defines", KERNELS)
def test_cuda_expansion_is_the_nvidia_source(files, defines):
    """Under CUDA, portable.cuh adds nothing: the text NVRTC sees equals the nvidia target's own."""
    ours = preprocess(HIP.source("float32", dict(defines), files), "-D__CUDACC__")
    theirs = preprocess(CUDA.source("float32", dict(defines), files), "-D__CUDACC__")
    assert ours == theirs


def test_half_types_keep_ptx_so_rocm_kernels_serve_float32_only():
    text = preprocess(HIP.source("float16", {}, ()), "-D__HIPCC_RTC__")
    assert "cvt.f32.f16" in text  # the reason the backend's dtypes are float32 (common.cuh's conversions)
    assert HIP.dtypes == ("float32",)
    assert all(c.dtypes == ("float32",) for op in ("softmax", "rmsnorm") for c in REGISTRY.candidates("rocm", op)
               if "triton" not in c.name)  # the Triton row ops are Triton's kernels, not these templates


def test_every_rocm_candidate_is_unavailable_with_the_target_reason(monkeypatch):
    for name in ("hip", "hiprtc", "hipblas", "hipblaslt"):
        monkeypatch.setattr(rocm, name, None)
    rocm.TARGET.reset()
    reason = rocm.TARGET.available()
    found = [c for op in ("matmul", "softmax", "rmsnorm") for c in REGISTRY.candidates("rocm", op)]
    assert {c.name for c in found} >= {"hipblas_matmul", "rocm_gemm_tiled", "rocm_gemv", "rocm_softmax_warp",
                                       "rocm_softmax_block", "rocm_rmsnorm_rows"}
    assert all(c.available() == reason for c in found)
    rocm.TARGET.reset()


@pytest.fixture
def fake(monkeypatch):
    hip, hiprtc, blas = rocm_fake.install(monkeypatch, rocm)
    monkeypatch.setattr(rocm, "_handles", {})
    HIP.clear()  # kernels of an earlier fake device
    assert rocm.TARGET.available() is True
    return hip, hiprtc, blas


def test_gemm_tiled_compiles_shared_template_and_marshals_arguments(fake):
    hip, hiprtc, _ = fake
    cand = REGISTRY.get("rocm_gemm_tiled", "rocm", "matmul")
    region = Matmul.random("rocm", "float32", {"m": 70, "n": 33, "k": 19}, rng=np.random.default_rng(0))
    out = cand.run(region, {"tile": [64, 64, 16, 4, 4]})
    prog = hiprtc.programs[-1]
    assert prog["source"].index("ARB_HIP") < prog["source"].index("typedef float T")  # portable.cuh first
    assert "--offload-arch=gfx90a:sramecc+:xnack-" in prog["options"]
    name, grid, block, _, _, _, extra = hip.launches[-1]
    assert (name, grid, block) == ("gemm_tiled", (1, 2, 1), (256, 1, 1))
    values = [v.value for v in extra]
    assert values[:3] == [region.a.ptr, region.b.ptr, out.ptr]
    assert values[3:9] == [70, 33, 19, 19, 33, 33] and values[12] == 19
    cand.run(region, {"tile": [64, 64, 16, 4, 4]})
    assert len(hiprtc.programs) == 2  # probe + one compile: the second run hit the kernel cache


def test_emitted_candidates_decline_epilogues_and_other_dtypes(fake):
    rng = np.random.default_rng(1)
    cand = REGISTRY.get("rocm_gemm_tiled", "rocm", "matmul")
    fused = Matmul.random("rocm", "float32", {"m": 8, "n": 8, "k": 8}, {"activation": "relu"}, rng=rng)
    assert "epilogue" in cand.applies_to(fused)
    half = Softmax.random("rocm", "float16", {"rows": 4, "cols": 64}, rng=rng)
    assert "float16" in REGISTRY.get("rocm_softmax_block", "rocm", "softmax").applies_to(half)


@pytest.mark.parametrize("layout", ["RR", "CR", "RC", "CC"])
def test_hipblas_matmul_passes_the_f4_gate_against_a_column_major_blas(fake, layout):
    """The row-major-as-transposed-column-major mapping, checked by the real gate against the oracle
    with the fake computing hipblasGemmEx as BLAS defines it."""
    _, _, blas = fake
    cand = REGISTRY.get("hipblas_matmul", "rocm", "matmul")
    region = Matmul.random("rocm", "float32", {"m": 37, "n": 21, "k": 13}, layout=layout,
                           rng=np.random.default_rng(2))
    verdict = verify(cand, {}, region)
    assert verdict.passed, verdict
    real = [c for c in blas.calls if c[2:5] == (21, 37, 13)]
    assert real, blas.calls
    op_a, op_b, *_ = real[0]  # C^T = B^T A^T: hipBLAS's m is N, its n is M
    assert (op_a == 112) == (layout[1] == "C") and (op_b == 112) == (layout[0] == "C")


def test_hipblas_failure_names_the_call(fake, monkeypatch):
    _, _, blas = fake
    monkeypatch.setattr(blas, "hipblasGemmEx", lambda *a: (7,))
    cand = REGISTRY.get("hipblas_matmul", "rocm", "matmul")
    region = Matmul.random("rocm", "float32", {"m": 4, "n": 4, "k": 4}, rng=np.random.default_rng(3))
    with pytest.raises(rocm.HipError, match="hipblasGemmEx failed: 7"):
        cand.run(region, {})


def test_hiprtc_log_reaches_the_error(fake):
    _, hiprtc, _ = fake
    hiprtc.log = "softmax.cu:12: error: use of undeclared identifier '__shfl_xor_sync'"
    cand = REGISTRY.get("rocm_softmax_block", "rocm", "softmax")
    region = Softmax.random("rocm", "float32", {"rows": 4, "cols": 64}, rng=np.random.default_rng(4))
    with pytest.raises(rocm.CompileError, match="undeclared identifier"):
        cand.run(region, {"threads": 256, "vec": True})


@pytest.mark.rocm
@pytest.mark.parametrize("op, dims", [("matmul", {"m": 70, "n": 33, "k": 19}), ("matmul", {"m": 64, "n": 1, "k": 96}),
                                      ("softmax", {"rows": 33, "cols": 1000}), ("rmsnorm", {"rows": 9, "cols": 4096})])
def test_every_rocm_solution_passes_the_gate_on_an_amd_gpu(op, dims):
    rocm.TARGET.reset()
    ok = rocm.TARGET.available()
    if ok is not True:
        pytest.skip(f"rocm target unavailable: {ok}")
    from arbiter.ops import op_kind

    region = op_kind(op).region_type.random("rocm", "float32", dims, rng=np.random.default_rng(5))
    for cand in REGISTRY.candidates("rocm", op):
        if cand.applies_to(region) is True:
            for params in cand.param_space():
                assert verify(cand, params, region).passed, (cand.name, params)
