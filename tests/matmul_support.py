"""Small real matmul candidates shared by the measurement tests (imported by name: `pythonpath = ["tests"]`)."""
from __future__ import annotations

import time

import numpy as np

from arbiter import Candidate, Tier


def mm(region):
    """``a @ b`` written into the region's output: what every correct candidate of these tests computes."""
    out = region.alloc_out()
    np.matmul(region.a, region.b, out=out)
    return out


class SlowVendor(Candidate):
    """Correct, but pays ``delay_s`` of 'library overhead' a call: the tier default that measurement displaces."""

    name, target, op, tier, priority = "slow_vendor", "cpu", "matmul", Tier.HAND_TUNED, 50

    def __init__(self, delay_s: float):
        self.delay_s = delay_s

    def run(self, region, params):
        time.sleep(self.delay_s)
        return mm(region)
