"""A plug-in for tests/store/test_registry_trust.py (loaded through ARBITER_PLUGINS): a hand-tuned softmax off by
5% in every element, which the gate fails; a registry writer then flips its verdict and points a solution at it."""
import numpy as np

from arbiter import Candidate, Tier, register


class InexactSoftmax(Candidate):
    name, target, op, tier = "inexact_softmax", "cpu", "softmax", Tier.HAND_TUNED

    def run(self, region, params):
        x = np.asarray(region.x, dtype=np.float64)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return (1.05 * e / e.sum(axis=-1, keepdims=True)).astype(region.x.dtype)


register(InexactSoftmax())
