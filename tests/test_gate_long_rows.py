"""Issue 28 item 11: gating a row op whose one row is longer than the gate's float64 chunk (a 1 x 67,108,864
softmax) built the whole row's float64 reference and the comparison's temporaries at once: peak RSS grew 2.9 GiB
for a 256 MiB operand (the stated bound: 3x operands and output plus 64 MiB). Now such a row's reference is
produced a piece at a time (``arbiter.oracles.long_rows``)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from arbiter import Candidate, Tier
from arbiter.ops import op_kind
from arbiter.oracles import long_rows
from arbiter.regions import LayerNorm, RMSNorm, Softmax
from arbiter.verify import CHUNK_ELEMENTS, verify

COLS = 2 * CHUNK_ELEMENTS + 12345  # one row: three pieces, the last one short


def _regions():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, COLS)).astype(np.float32) * 4
    w, b = rng.standard_normal(COLS).astype(np.float32), rng.standard_normal(COLS).astype(np.float32)
    return [Softmax(x), Softmax(np.ascontiguousarray(x.T), axis=0), RMSNorm(x, w, eps=1e-6),
            LayerNorm(x, w, b, eps=1e-5), LayerNorm(x, w, None, eps=1e-5)]


@pytest.mark.parametrize("index", range(5))
def test_the_long_row_reference_is_the_oracles(index):
    region = _regions()[index]
    ref = op_kind(region.op).oracle(region)
    pieced = np.full(ref.shape, np.nan)
    for where, origin, piece in long_rows.pieces(region, CHUNK_ELEMENTS):
        assert piece.size <= CHUNK_ELEMENTS
        pieced[where] = piece
        assert origin((0,)) == tuple(s.start if isinstance(s, slice) else s for s in where)
    np.testing.assert_allclose(pieced, ref, rtol=1e-12, atol=1e-12)  # float64 summation order alone


class _Scaled(Candidate):
    """A softmax off by ``factor`` in the one element ``at`` (the gate must name it), else exact."""

    name, target, op, tier = "scaled_softmax", "cpu", "softmax", Tier.HAND_TUNED

    def __init__(self, factor=1.0, at=None):
        self.factor, self.at = factor, at

    def run(self, region, params):
        x = region.x.astype(np.float64)
        e = np.exp(x - x.max(axis=region.axis, keepdims=True))
        out = region.alloc_out()  # the documented way: a program's call gives no out= (the gate makes one too)
        out[...] = e / e.sum(axis=region.axis, keepdims=True)
        if self.at is not None:
            out[self.at] *= self.factor
        return out


def test_the_gate_on_a_long_row_passes_the_exact_and_names_the_wrong_element():
    x = np.random.default_rng(0).standard_normal((1, COLS)).astype(np.float32)
    assert verify(_Scaled(), {}, Softmax(x)).passed
    wrong = verify(_Scaled(1.5, (0, COLS - 7)), {}, Softmax(x))
    assert not wrong.passed and f"element (0, {COLS - 7})" in wrong.reason, wrong.reason


@pytest.mark.slow
def test_first_call_memory_of_a_one_row_softmax_is_within_the_bound(tmp_path):
    # 1 x 8,388,608 float32 (32 MiB): bound 3 x (32 + 32) + 64 = 256 MiB. Before: about 400 MiB (the row's
    # float64 reference and comparison temporaries at once; 2,917 MiB at 1 x 67,108,864).
    script = textwrap.dedent("""
        import resource, numpy as np, arbiter
        from arbiter.regions import Softmax
        x = np.random.default_rng(0).standard_normal((1, 1 << 23), dtype=np.float32)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        arbiter.run_arbitrated("softmax", Softmax(x))
        print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900,
                         env={**os.environ, "ARBITER_DB": str(tmp_path / "r.db")})
    assert out.returncode == 0, out.stderr
    grew = int(out.stdout.split()[-1])
    assert grew <= 3 * 2 * (32 << 20) + (64 << 20), grew / 2**20
