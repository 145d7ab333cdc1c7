"""A plug-in for tests/test_cli_output.py (loaded through ARBITER_PLUGINS): a correct fft candidate that
takes 0.15 s per call, so its gate (about 40 calls on the test's key) outlasts the progress line's 2 s bound
(``cli.output``'s ``SLOW_S``) and gets a line of its own. (It slept a second a call before: 40 s a gate.)"""
import time

import numpy as np

from arbiter import Candidate, Tier, register


class SleepyFFT(Candidate):
    name, target, op, tier = "sleepy_fft", "cpu", "fft", Tier.EMITTED

    def run(self, region, params):
        time.sleep(0.15)
        out = region.alloc_out()
        np.copyto(out, np.fft.rfft(region.x, axis=-1) if region.kind == "r2c" else np.fft.fft(region.x, axis=-1),
                  casting="same_kind")
        return out


register(SleepyFFT())
