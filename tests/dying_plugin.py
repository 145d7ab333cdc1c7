"""A plug-in for tests/test_parallel.py, loaded in worker processes through ARBITER_PLUGINS: its candidate
kills its process the first time it runs anywhere (the file at $ARBITER_TEST_MARKER remembers)."""
import os

import numpy as np

from arbiter import Candidate, Tier, register


class DiesOnce(Candidate):
    name, target, op, tier = "dies_once", "cpu", "rmsnorm", Tier.EMITTED

    def run(self, region, params):
        marker = os.environ["ARBITER_TEST_MARKER"]
        if not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(3)
        out = region.alloc_out()
        x = region.x
        np.multiply(x / np.sqrt((x * x).mean(-1, keepdims=True) + region.eps), region.weight, out=out)
        return out


register(DiesOnce())
