"""A plug-in for tests/test_tune_faults.py, loaded through ARBITER_PLUGINS: its candidate passes the gate, then
raises once it is being timed. The gate hands every probe a poisoned output of its own; timing runs what a
caller runs, with no output given, which is where this fault lives (a scratch buffer sized for the gate's): past
the gate's own two calls without an output (its context checks), so that timing is where it shows."""
import numpy as np

from arbiter import Candidate, Tier, register

PLAIN_CALLS_GATED = 2  # the gate's context checks call twice without out= (arbiter.verify._context)


class RaisesWhenTimed(Candidate):
    name, target, op, tier = "raises_when_timed", "cpu", "rmsnorm", Tier.HAND_TUNED
    calls = 0
    plain = 0

    def run(self, region, params):
        type(self).calls += 1
        if region.out is None:  # a caller's call (as timed), not one of the gate's probes
            type(self).plain += 1
            if type(self).plain > PLAIN_CALLS_GATED:  # past the gate's own calls without out=
                raise RuntimeError("plug-in fault: scratch buffer exhausted")
        out = region.alloc_out()
        x = region.x
        np.multiply(x / np.sqrt((x * x).mean(-1, keepdims=True) + region.eps), region.weight, out=out)
        return out


register(RaisesWhenTimed())
