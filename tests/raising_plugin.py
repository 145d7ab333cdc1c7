"""A plug-in for tests/test_tune_faults.py, loaded through ARBITER_PLUGINS: its candidate passes the gate (its
first few calls are right), then raises on every later call in the process, i.e. once it is being timed."""
import numpy as np

from arbiter import Candidate, Tier, register

GATE_CALLS = 7  # more than the gate's probes of one rmsnorm key


class RaisesWhenTimed(Candidate):
    name, target, op, tier = "raises_when_timed", "cpu", "rmsnorm", Tier.HAND_TUNED
    calls = 0

    def run(self, region, params):
        type(self).calls += 1
        if type(self).calls > GATE_CALLS:
            raise RuntimeError("plug-in fault: scratch buffer exhausted")
        out = region.alloc_out()
        x = region.x
        np.multiply(x / np.sqrt((x * x).mean(-1, keepdims=True) + region.eps), region.weight, out=out)
        return out


register(RaisesWhenTimed())
