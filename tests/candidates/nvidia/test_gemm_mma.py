"""The tensor-core GEMM (``gemm_mma``) and the synthesized matmul riding on it.

CPU: the tile table keeps the template's constraints (its static_asserts; the shared-memory ring within
H100's opt-in limit, and within every sm_80+ GPU's once cut to two stages), the ring cut to the device, the
per-call choice of the cp.async path, the launch arithmetic, the
kernel cache raising the shared-memory limit once, and the synthesized tier compiling the very text
``gemm_mma`` compiles. GPU: every tile through the F4 gate at shapes that are no multiple of any tile
(both load paths: the gate's skew probe has odd K and N), epilogues fused (synth_matmul) and composed
(gemm_mma), and misaligned operands, which must take the element path.
"""
from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

from arbiter import targets
from arbiter.candidates import REGISTRY
from arbiter.candidates.nvidia import gemm_mma, synth_matmul
from arbiter.memo import Memo
from arbiter.regions import Matmul
from arbiter.synth import Chain, Operand, Step, cuda
from arbiter.targets import nvrtc
from arbiter.targets.kernels import template
from gpu_support import check_builtin_solution, gpu_available, requires_gpu

H100_OPT_IN = 227 * 1024  # dynamic shared memory a block may opt into on H100/H200
HALF_TILES = gemm_mma.TILES + [half for _, half in synth_matmul.TILES.values()]


@pytest.mark.parametrize("tile", HALF_TILES, ids=lambda t: "x".join(map(str, t)))
def test_every_tile_keeps_the_template_constraints(tile):
    bm, bn, bk, wm, wn, stages = tile
    assert bk % 16 == 0 and stages >= 2
    assert (bm // wm) % 16 == 0 and (bn // wn) % 16 == 0 and bm % wm == 0 and bn % wn == 0
    assert gemm_mma.threads(tile) % 32 == 0 and gemm_mma.threads(tile) <= 1024
    assert gemm_mma.shared_bytes(tile) <= H100_OPT_IN
    # cut to two stages, the ring fits every sm_80+ GPU (fit_ring never goes below two)
    assert gemm_mma.shared_bytes(tile[:5] + (2,)) <= gemm_mma.SMALLEST_OPT_IN
    # the registers of one warp's accumulators (float x 4 per m16n8 tile) leave room for fragments
    assert (bm // wm) * (bn // wn) // 32 <= 128


@pytest.mark.parametrize("limit,stages", [(H100_OPT_IN, [4, 4, 4, 3, 4, 4]), (163 * 1024, [4, 4, 4, 3, 4, 4]),
                                          (99 * 1024, [4, 3, 3, 2, 4, 4]), (48 * 1024, [2, 2, 2, 2, 3, 4])])
def test_a_ring_the_device_cannot_hold_is_cut_to_what_it_can(limit, stages):
    fitted = [gemm_mma.fit_ring(t, limit) for t in gemm_mma.TILES]
    assert [t[:5] for t in fitted] == [t[:5] for t in gemm_mma.TILES]
    assert [t[5] for t in fitted] == stages
    assert all(gemm_mma.shared_bytes(t) <= limit for t in fitted if t[5] > 2)


def test_shared_bytes_counts_the_templates_padded_ring():
    text = template("gemm_mma.cu")
    assert re.search(rf"#define PAD {gemm_mma.PAD}\b", text)
    assert "#define AS_LD (BK + PAD)" in text and "#define BS_LD (BN + PAD)" in text
    # 128x128x32, 4 stages: A 128 x 40 and B 32 x 136 halves per stage
    assert gemm_mma.shared_bytes((128, 128, 32, 2, 4, 4)) == 4 * (128 * 40 + 32 * 136) * 2


def _array(ptr: int, shape, dtype="float16"):
    host = np.empty(shape, dtype=np.float16 if dtype == "float16" else np.float32)
    return SimpleNamespace(data=SimpleNamespace(ptr=ptr), strides=host.strides, itemsize=host.itemsize, shape=shape)


def _region(m, n, k, a_ptr=0x1000, b_ptr=0x2000):
    return SimpleNamespace(dims={"m": m, "n": n, "k": k}, a=_array(a_ptr, (m, k)), b=_array(b_ptr, (k, n)))


@pytest.mark.parametrize("m,n,k,a_ptr,out_ptr,expected", [
    (129, 136, 72, 0x1000, 0x3000, True),  # M is free: its tail is zero-filled by the copies
    (1, 8, 8, 0x1000, 0x3000, True),
    (64, 64, 63, 0x1000, 0x3000, False),  # a row of A would start off a 16-byte boundary
    (64, 60, 64, 0x1000, 0x3000, False),  # B's rows, and paired stores of C
    (64, 64, 64, 0x1002, 0x3000, False),  # a view two bytes into its buffer
    (64, 64, 64, 0x1000, 0x3008, False),  # the output
])
def test_cp_async_path_needs_multiples_of_8_and_aligned_pointers(m, n, k, a_ptr, out_ptr, expected):
    region = _region(m, n, k, a_ptr=a_ptr)
    assert gemm_mma.cp_async_path(region, _array(out_ptr, (m, n))) is expected


def test_launch_covers_the_output_in_one_grid_dimension_with_the_ring_in_shared_memory():
    calls = []
    tile = (128, 256, 32, 2, 4, 3)
    region = SimpleNamespace(dims={"m": 1000, "n": 1000, "k": 24}, a=np.zeros((1000, 24), np.float16),
                             b=np.zeros((24, 1000), np.float16))
    out = np.zeros((1000, 1000), np.float16)
    gemm_mma.launch_mma(lambda grid, block, args, shared_mem: calls.append((grid, block, args, shared_mem)),
                        tile, region, out, out, out, 0)
    (grid, block, args, shared_mem), = calls
    assert grid == (8 * 4,) and block == (256,) and shared_mem == gemm_mma.shared_bytes(tile)
    assert [int(x) for x in args[3:9]] == [1000, 1000, 24, 24, 1000, 1000]


def test_a_kernel_is_compiled_once_and_allowed_its_shared_memory(monkeypatch):
    compiled = []

    class FakeKernel:
        max_dynamic_shared_size_bytes = 0

    def fake_kernel(name, dtype, files, defines, prelude):
        compiled.append(dict(defines))
        return FakeKernel()

    monkeypatch.setattr(gemm_mma, "kernel", fake_kernel)
    monkeypatch.setattr(gemm_mma, "shared_limit", lambda: 99 * 1024)
    monkeypatch.setattr(nvrtc.BACKEND, "launches", Memo())
    tile = gemm_mma.TILES[1]  # 128x256: four stages are 108.5 KiB, three fit 99 KiB
    first, fitted = gemm_mma.mma_kernel("bfloat16", tile, "// epilogue", True)
    assert fitted == tile[:5] + (3,)
    assert gemm_mma.mma_kernel("bfloat16", tile, "// epilogue", True)[0] is first
    assert first.max_dynamic_shared_size_bytes == gemm_mma.shared_bytes(fitted)
    other, _ = gemm_mma.mma_kernel("bfloat16", tile, "// epilogue", False)
    assert other is not first
    assert [(d["CP_ASYNC"], d["STAGES"], d["MMA_TYPE"]) for d in compiled] == [(1, 3, '"bf16"'), (0, 3, '"bf16"')]
    # the candidate's plan picks the load path per call, from the operands' shape and alignment
    cand = REGISTRY.get("gemm_mma", "nvidia", "matmul")
    region = _region(64, 64, 64)
    region.dtype = "bfloat16"
    plans = [cand.launch_plan(region, {"tile": list(tile)}, _array(ptr, (64, 64))) for ptr in (0x3000, 0x3002)]
    assert [p[1] for p in plans] == [fitted, fitted] and plans[0][0] is not plans[1][0]
    assert [d["CP_ASYNC"] for d in compiled[2:]] == [1, 0]


@pytest.mark.parametrize("cp_async", [True, False])
def test_the_synthesized_matmul_compiles_the_text_gemm_mma_compiles(cp_async):
    chain = Chain((Operand("bias", "row"),), (Step("add", "bias"), Step("act", "gelu")))
    tile = synth_matmul.TILES["large"][1]
    epilogue = cuda.epilogue_source(chain)
    synthesized = cuda.gemm_kernel(chain, "float16", tile, cp_async=cp_async)
    emitted = nvrtc.BACKEND.source("float16", dict(gemm_mma.mma_defines("float16", tile, cp_async)), ("gemm_mma.cu",),
                                   epilogue)
    assert synthesized.source == emitted


def test_float32_is_refused_naming_tf32():
    cand = REGISTRY.get("gemm_mma", "nvidia", "matmul")
    reason = cand.applies_to(SimpleNamespace(dtype="float32", layout="RR"))
    assert isinstance(reason, str) and "TF32" in reason and "gemm_tiled" in reason
    assert cand.applies_to(SimpleNamespace(dtype="float16", layout="RR")) is True
    assert "layout RR" in cand.applies_to(SimpleNamespace(dtype="float16", layout="CR"))


def test_the_default_tile_is_the_8_warp_128x128_ring():
    cand = REGISTRY.get("gemm_mma", "nvidia", "matmul")
    assert cand.param_space()[0] == {"tile": [128, 128, 32, 2, 4, 4]}
    assert [tuple(p["tile"]) for p in cand.param_space()] == gemm_mma.TILES


# --- on a GPU ------------------------------------------------------------------------------------------
SMALL = [(1, 8, 8), (129, 136, 72), (1000, 1000, 1000)]
LARGE = (4096, 4096, 4096)
EPILOGUES = {"bias+gelu": {"bias": "1", "activation": "gelu"}, "residual": {"residual": "1"}}


def _half_dtypes():
    if not gpu_available():
        return ["float16"]
    return ["float16"] + (["bfloat16"] if targets.get("nvidia").bfloat16() is not None else [])


def _shape_id(s):
    return "x".join(map(str, s))


def _gate(name, params, dtype, shape, attrs=None):
    m, n, k = shape
    cand = REGISTRY.get(name, "nvidia", "matmul")
    check_builtin_solution(cand, params, Matmul.random("nvidia", dtype, {"m": m, "n": n, "k": k}, attrs,
                                                      rng=np.random.default_rng(19)))


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("dtype", _half_dtypes())
@pytest.mark.parametrize("shape", SMALL, ids=_shape_id)
@pytest.mark.parametrize("tile", gemm_mma.TILES, ids=_shape_id)
def test_every_tile_passes_the_gate_at_awkward_shapes(tile, shape, dtype):
    _gate("gemm_mma", {"tile": list(tile)}, dtype, shape)


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("dtype", _half_dtypes())
@pytest.mark.parametrize("tile", gemm_mma.TILES[:4], ids=_shape_id)
def test_large_tiles_pass_the_gate_at_4096(tile, dtype):
    _gate("gemm_mma", {"tile": list(tile)}, dtype, LARGE)


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("dtype", _half_dtypes())
@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("shape", SMALL + [LARGE], ids=_shape_id)
@pytest.mark.parametrize("name,params", [("gemm_mma", {"tile": list(gemm_mma.TILES[0])}),
                                         ("synth_matmul", {"tile": "large"}), ("synth_matmul", {"tile": "wide"}),
                                         ("synth_matmul", {"tile": "small"})],
                         ids=["gemm_mma", "synth_large", "synth_wide", "synth_small"])
def test_epilogues_pass_the_gate_fused_and_composed(name, params, shape, epilogue, dtype):
    _gate(name, params, dtype, shape, EPILOGUES[epilogue])


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("dtype", _half_dtypes())
@pytest.mark.parametrize("name,params", [("gemm_mma", {"tile": list(gemm_mma.TILES[0])}),
                                         ("synth_matmul", {"tile": "large"})])
def test_misaligned_operands_take_the_element_path(name, params, dtype):
    nv = targets.get("nvidia")
    m, n, k = 300, 264, 200  # K and N multiples of 8: only the pointers keep the cp.async path out
    rng = np.random.default_rng(20)

    def shifted(shape, scale):  # a C-contiguous view 2 bytes into its buffer
        host = (rng.standard_normal(shape[0] * shape[1] + 1) * scale).astype(np.float32)
        view = nv.from_host(host, dtype)[1:].reshape(shape)
        assert view.flags.c_contiguous and view.data.ptr % 16
        return view

    a, b, res = shifted((m, k), 1.0), shifted((k, n), k ** -0.5), shifted((m, n), 1.0)
    region = Matmul(a, b, residual=res)
    cand = REGISTRY.get(name, "nvidia", "matmul")
    assert cand.applies_to(region) is True and not gemm_mma.cp_async_path(region, a)
    host = [nv.to_host(x).astype(np.float64) for x in (a, b, res, cand.run(region, params))]
    want = host[0] @ host[1] + host[2]
    err = float(np.abs(host[3] - want).max())
    # the output's own rounding (inputs are exact on both sides); a lost or misplaced element of A or B
    # moves thousands of outputs by ~0.07 each (k = 200), so the largest of them by ~0.3
    tol = 4 * (2.0 ** -11 if dtype == "float16" else 2.0 ** -8) * float(np.abs(want).max())
    assert err < tol, f"max abs error {err} over {tol}"
