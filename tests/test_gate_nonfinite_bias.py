"""The nonfinite family's NaN bias column is never overwritten by its Inf column: both were drawn at random, so one
gate in n (n the bias's columns) probed no NaN at all, and a relu that drops NaN (``fmax(z, 0)``) passed it (seen on
an H100: tests/candidates/nvidia/test_gpu_special_values.py failed once in three runs)."""
import numpy as np

from arbiter.candidates import Candidate, Tier
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
