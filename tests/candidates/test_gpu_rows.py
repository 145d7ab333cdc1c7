"""The table-driven GPU row kernels (``arbiter.candidates.gpu_rows``) without a GPU: what each table entry
registers on each target, and what a run launches, through a kernel backend whose compiler only records.

The GPU gate tests (tests/candidates/nvidia/test_nvidia_gate.py, test_nvidia_ops.py and test_row_kernels.py)
run every entry's every parameter set on the device; these pin the launch arithmetic and its signature."""
from __future__ import annotations

import itertools
import pickle
import types

import pytest

from arbiter.candidates import REGISTRY, Tier
from arbiter.candidates.gpu_rows import ROW_SPECS, RowKernel
from arbiter.targets import hiprtc, nvrtc
from arbiter.targets.kernels import KernelBackend

SPECS = {spec.name: spec for spec in ROW_SPECS}


class Recorded:
    """A compiled kernel that only records: its source and name, then each launch."""

    def __init__(self, source, name, launches):
        self.source, self.name, self.launches = source, name, launches

    def __call__(self, grid, block, args):
        self.launches.append((self.name, self.source, grid, block, args))


@pytest.fixture
def launches():
    return []


@pytest.fixture
def backend(launches):
    return KernelBackend("nvidia", "nowhere", lambda source, name: Recorded(source, name, launches))


class Array:
    """A device array as the launch arithmetic sees it: an address, and a role to recognise it by."""

    def __init__(self, role, ptr):
        self.role, self.data = role, types.SimpleNamespace(ptr=ptr)

    def __repr__(self):
        return self.role


def region(dtype="float32", rows=7, cols=129, misaligned=(), bias=True, bucket_cols=None):
    def array(role, ptr):
        return Array(role, ptr + (4 if role in misaligned else 0))

    r = types.SimpleNamespace(dtype=dtype, dims={"rows": rows, "cols": cols}, eps=1e-5, layout="R", axis_last=True,
                              has_epilogue=False, x=array("x", 4096), weight=array("w", 8192),
                              bias=array("b", 12288) if bias else None,
                              key=types.SimpleNamespace(bucket=(("cols", bucket_cols or cols), ("rows", rows))))
    out = array("out", 16384)
    r.alloc_out = lambda: out
    return r


def launch(cand, reg, params, launches):
    del launches[:]
    cand.run(reg, params)
    [(name, source, grid, block, args)] = launches
    defines = dict(line.split()[1:] for line in source.splitlines() if line.startswith("#define ")
                   and line.split()[1] in ("ROW_THREADS", "ROWS_PER_BLOCK", "VEC", "ITERS", "HAS_BIAS"))
    return name, {k: int(v) for k, v in defines.items()}, grid, block, [a if isinstance(a, Array) else
                                                                          (type(a).__name__, a.item()) for a in args]


def test_every_table_entry_is_a_candidate_on_its_targets():
    for spec in ROW_SPECS:
        nv = REGISTRY.get(spec.name, "nvidia", spec.op)
        assert isinstance(nv, RowKernel) and nv.backend is nvrtc.BACKEND
        assert (nv.tier, nv.priority, nv.param_space()) == (Tier.EMITTED, spec.priority, list(spec.params))
        assert nv.dtypes == ("float32", "float16", "bfloat16")
        amd = REGISTRY.get(f"rocm_{spec.name}", "rocm", spec.op)
        assert (amd is not None) == ("rocm" in spec.targets)
        if amd is not None:  # the same entry, another backend: its dtypes are the backend's (float32)
            assert amd.backend is hiprtc.BACKEND and amd.dtypes == ("float32",)
            assert (amd.tier, amd.priority, amd.param_space()) == (nv.tier, nv.priority, nv.param_space())
    assert {s.name for s in ROW_SPECS if "rocm" in s.targets} == {"softmax_warp", "softmax_block", "rmsnorm_rows"}


@pytest.mark.parametrize("name, params, reg, expected", [
    # 129 columns are no multiple of 4: scalar loads; a warp a row, 8 loads a thread (5 rounded up), 4 rows a block.
    ("softmax_warp", {"rows_per_block": 4, "vec": True}, region(rows=7, cols=129),
     ({"ROW_THREADS": 32, "ROWS_PER_BLOCK": 4, "VEC": 1, "ITERS": 8}, (2,), (128,))),
    # 4096 float16 columns, 8 a load: 512 loads need 64 threads (32 x 8 registers fall short); a block a row.
    ("rmsnorm_rows", {"threads": 32, "vec": True}, region("float16", rows=3, cols=4096),
     ({"ROW_THREADS": 64, "ROWS_PER_BLOCK": 1, "VEC": 8, "ITERS": 8}, (3,), (64,))),
    # a misaligned weight turns vector loads off
    ("rmsnorm_rows", {"threads": 256, "vec": True}, region(rows=5, cols=2048, misaligned=("w",)),
     ({"ROW_THREADS": 256, "ROWS_PER_BLOCK": 1, "VEC": 1, "ITERS": 8}, (5,), (256,))),
    # 65536 columns: 128 threads grow to 1024 (16 loads of 4 each)
    ("softmax_block", {"threads": 128, "vec": True}, region(rows=2, cols=65536),
     ({"ROW_THREADS": 1024, "ROWS_PER_BLOCK": 1, "VEC": 4, "ITERS": 16}, (2,), (1024,))),
    ("layernorm_rows", {"threads": 32, "vec": True}, region(rows=9, cols=1024, bias=False),
     ({"ROW_THREADS": 32, "ROWS_PER_BLOCK": 4, "VEC": 4, "ITERS": 8, "HAS_BIAS": 0}, (3,), (128,))),
])
def test_launch_geometry(backend, launches, name, params, reg, expected):
    cand = RowKernel(SPECS[name], backend)
    kernel, defines, grid, block, _ = launch(cand, reg, params, launches)
    assert (kernel, (defines, grid, block)) == (SPECS[name].kernel, expected)


def test_arguments_follow_the_spec(backend, launches):
    rows, cols = 9, 1024
    sizes = [("int32", rows), ("int32", cols), ("int64", cols), ("int64", cols)]
    eps = ("float32", pytest.approx(1e-5))
    cases = {("softmax_warp", True): ["x", "out"] + sizes,
             ("rmsnorm_rows", True): ["x", "w", "out"] + sizes + [eps],
             ("layernorm_rows", True): ["x", "w", "b", "out"] + sizes + [eps],
             ("layernorm_rows", False): ["x", "w", "w", "out"] + sizes + [eps]}  # no bias: the weight, unread
    for (name, bias), expected in cases.items():
        cand = RowKernel(SPECS[name], backend)
        _, defines, _, _, args = launch(cand, region(rows=rows, cols=cols, bias=bias), cand.param_space()[0], launches)
        assert [a.role if isinstance(a, Array) else a for a in args] == expected
        assert defines.get("HAS_BIAS", int(bias)) == int(bias)


@pytest.mark.parametrize("name", SPECS)
def test_equal_launch_signatures_launch_alike(backend, launches, name):
    """What the tuner relies on to time a launch once: parameter sets with one signature launch the same kernel
    with the same grid and block at any alignment; on aligned arrays, different signatures launch differently."""
    cand = RowKernel(SPECS[name], backend)
    for dtype, cols, misaligned, bias in itertools.product(
            ("float32", "float16"), (1, 129, 1000, 2048, 4096, 16385, 65536), ((), ("x",), ("w",), ("out",)),
            (True, False) if SPECS[name].optional else (True,)):
        if cols > SPECS[name].max_cols:
            continue
        reg = region(dtype, 5, cols, misaligned, bias)
        seen = {}
        for params in cand.param_space():
            signature = cand.launch_signature(reg, params)
            seen.setdefault(signature, []).append(launch(cand, reg, params, launches)[:4])
        for same in seen.values():
            assert all(got == same[0] for got in same), (name, dtype, cols, misaligned, same)
        if not misaligned:
            firsts = [same[0] for same in seen.values()]
            assert len(firsts) == len({repr(f) for f in firsts}), (name, dtype, cols)


def test_coinciding_parameter_sets_share_a_signature():
    warp, block = REGISTRY.get("softmax_warp", "nvidia", "softmax"), REGISTRY.get("softmax_block", "nvidia", "softmax")
    odd = region(cols=1000 + 1)  # not 16-byte rows: vec has nothing to switch
    assert warp.launch_signature(odd, {"rows_per_block": 4, "vec": True}) == \
        warp.launch_signature(odd, {"rows_per_block": 4, "vec": False})
    wide = region(cols=65536)  # every block size grows to 1024 threads
    assert len({block.launch_signature(wide, p) for p in block.param_space()}) == 2  # vec on, vec off
    assert len({block.launch_signature(region(cols=1024), p) for p in block.param_space()}) == 5


def test_applies_to_reads_the_spec():
    warp, norm = REGISTRY.get("softmax_warp", "nvidia", "softmax"), REGISTRY.get("layernorm_rows", "nvidia",
                                                                                  "layernorm")
    assert warp.applies_to(region(bucket_cols=2048)) is True
    assert "up to 2048 columns" in warp.applies_to(region(bucket_cols=4096))
    assert norm.applies_to(region(bucket_cols=65536)) is True
    assert "float64" in norm.applies_to(region("float64"))
    strided = region()
    strided.layout = "S"
    assert "C-contiguous" in norm.applies_to(strided)
    fused = region()
    fused.has_epilogue = True
    assert "epilogue" in warp.applies_to(fused)
    amd = REGISTRY.get("rocm_rmsnorm_rows", "rocm", "rmsnorm")
    assert amd.applies_to(region("float16")) == "dtype float16 is not one of float32"


def test_each_entry_has_its_own_identity_and_pickles_by_reference():
    cands = [REGISTRY.get(s.name, "nvidia", s.op) for s in ROW_SPECS]
    sources = [c.source() for c in cands]
    for spec, source in zip(ROW_SPECS, sources):  # its own template and entry, not the first entry's (one class)
        assert 'extern "C"' in source and spec.kernel in source and repr(spec) in source
    assert len({c.identity() for c in cands}) == len(cands)
    clone = pickle.loads(pickle.dumps(cands[0]))  # how arbiter.isolate hands a candidate to its child
    assert clone.backend is nvrtc.BACKEND and clone.spec == cands[0].spec and clone.name == cands[0].name


def test_nothing_is_launched_for_an_empty_region(backend, launches):
    cand = RowKernel(SPECS["rmsnorm_rows"], backend)
    out = cand.run(region(rows=0, cols=64), cand.param_space()[0])
    assert out.role == "out" and launches == []
