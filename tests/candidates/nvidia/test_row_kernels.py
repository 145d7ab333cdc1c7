"""The table-driven row kernels on the GPU: what the tuner's deduplication relies on, checked on the device.

Every entry's every parameter set passes the gate in test_nvidia_gate.py / test_nvidia_ops.py (they walk the
registry). Here: parameter sets with one ``launch_signature`` must be one kernel, so they compute the same bits;
and tuning times each launch once. The launch arithmetic itself is pinned without a GPU in
tests/candidates/test_gpu_rows.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from arbiter import dispatch
from arbiter.candidates import REGISTRY
from arbiter.candidates.gpu_rows import ROW_SPECS
from arbiter.regions import LayerNorm, RMSNorm, Softmax
from arbiter.tune import tune_region
from gpu_support import requires_gpu

pytestmark = [pytest.mark.gpu, requires_gpu]

REGIONS = {"softmax": Softmax, "rmsnorm": RMSNorm, "layernorm": LayerNorm}


def _region(op, dtype, rows, cols, seed=30):
    extra = {"eps": 1e-3} if op != "softmax" else {}
    attrs = {"bias": "1"} if op == "layernorm" else None
    return REGIONS[op].random("nvidia", dtype, {"rows": rows, "cols": cols}, attrs,
                              rng=np.random.default_rng(seed), **extra)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("cols", [129, 1001, 2048, 4096, 65536])
@pytest.mark.parametrize("spec", ROW_SPECS, ids=lambda s: s.name)
def test_parameter_sets_with_one_signature_compute_the_same_bits(spec, cols, dtype):
    import cupy as cp

    cand = REGISTRY.get(spec.name, "nvidia", spec.op)
    region = _region(spec.op, dtype, 5, cols)
    if cand.applies_to(region) is not True:
        pytest.skip(str(cand.applies_to(region)))
    groups: dict = {}
    for params in cand.param_space():
        groups.setdefault(cand.launch_signature(region, params), []).append(params)
    for group in groups.values():
        outs = [cp.asnumpy(cand.run(region, params)).view(np.uint8) for params in group]
        for params, out in zip(group[1:], outs[1:]):
            assert np.array_equal(out, outs[0]), f"{spec.name}{params} vs {group[0]}: one signature, other bits"


def test_tuning_times_each_row_launch_once():
    # 1001 columns: no row is 16-byte aligned, so vec on and off are one launch for every entry.
    region = _region("softmax", "float32", 64, 1001)
    decision = tune_region(region, dispatch.store(), budget_s=5.0)
    twins = [r for r in decision.rows if r.reason.startswith("runs as ")]
    # (triton_softmax's tiles with one launch at 1001 columns are twins too: BLOCK_CAP above the row's width)
    cuda = [r for r in twins if r.candidate.name != "triton_softmax"]
    assert {r.candidate.name for r in cuda} == {"softmax_warp", "softmax_block"}
    assert all(r.timing is None and r.status == "passed" for r in twins)
    assert all(r.params["vec"] is False for r in cuda)  # the vec=True set of each launch is the one timed
