"""The nonfinite family's NaN bias column is never overwritten by its Inf column: both were drawn at random, so one
gate in n (n the bias's columns) probed no NaN at all, and a relu that drops NaN (``fmax(z, 0)``) passed it (seen on
an H100: tests/candidates/nvidia/test_gpu_special_values.py failed once in three runs)."""
import numpy as np
import pytest

from arbiter.candidates import Candidate, Tier
from arbiter.candidates.cpu.numpy_matmul import NumpyMatmul
from arbiter.regions import Matmul
from arbiter.verify import verify


class ReluFmax(Candidate):
    """A matmul whose relu is ``fmax(z, 0)``: NaN becomes 0 (the oracle keeps it)."""

    name, op, target, tier, priority = "relu_fmax", "matmul", "cpu", Tier.HAND_TUNED, 100

    def applies_to(self, region):
        return (region.activation == "relu" and region.residual is None) or "relu without residual only"

    def run(self, region, params):
        out = region.alloc_out()
        z = region.a @ region.b + region.bias
        out[...] = np.fmax(z, 0.0)
        return out


def test_a_nan_dropping_relu_is_refused_by_every_gate_at_two_columns():
    # two bias columns: the two draws met one gate in two before
    for seed in range(12):
        region = Matmul.random("cpu", "float32", {"m": 9, "n": 2, "k": 7}, {"bias": "1", "activation": "relu"},
                               rng=np.random.default_rng(seed))
        verdict = verify(ReluFmax(), {}, region)
        assert not verdict.passed and "nonfinite" in verdict.reason, (seed, verdict.reason)


@pytest.mark.parametrize("gate_seed", [1941180338318686961, 1674, 1945])
def test_a_correct_sgemm_whose_sum_cancels_the_bias_passes(monkeypatch, gate_seed):
    # Gate seeds that refused NumPy's own float32 matmul at 9x2x7 + bias + relu (relative error 1.09e-05 over
    # 1e-05, one gate in 1,500: a + b and the bias nearly cancel, the relu leaves a few small elements, and the
    # budget is relative to them). The summation order's rounding floor (OpKind.rounding) lets it through; the
    # fmax relu above is still refused at these seeds.
    monkeypatch.setenv("ARBITER_GATE_SEED", str(gate_seed))
    region = Matmul.random("cpu", "float32", {"m": 9, "n": 2, "k": 7}, {"bias": "1", "activation": "relu"},
                           rng=np.random.default_rng(7))
    verdict = verify(NumpyMatmul(), {}, region)
    assert verdict.passed, verdict.reason
    wrong = verify(ReluFmax(), {}, region)
    assert not wrong.passed and "nonfinite" in wrong.reason, wrong.reason


def test_the_rounding_floor_does_not_hide_a_dropped_term():
    # the floor is ~4 u sqrt(k) of each element's scale: a product missing its last k term is far beyond it
    class DropsLastTerm(NumpyMatmul):
        name = "drops_last_term"

        def run(self, region, params):
            out = region.alloc_out()
            z = region.a[:, :-1] @ region.b[:-1]
            out[...] = z if region.bias is None else z + region.bias
            return out

    region = Matmul.random("cpu", "float32", {"m": 64, "n": 48, "k": 513}, {}, rng=np.random.default_rng(3))
    verdict = verify(DropsLastTerm(), {}, region)
    assert not verdict.passed, verdict.reason
