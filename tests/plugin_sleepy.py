"""A plug-in for tests/test_cli_output.py (loaded through ARBITER_PLUGINS): a correct fft candidate that
takes a second per call, so its gate is slow enough to get its own progress line."""
import time

import numpy as np

from arbiter import Candidate, Tier, register


class SleepyFFT(Candidate):
    name, target, op, tier = "sleepy_fft", "cpu", "fft", Tier.EMITTED

    def run(self, region, params):
        time.sleep(1.0)
        out = region.alloc_out()
        np.copyto(out, np.fft.rfft(region.x, axis=-1) if region.kind == "r2c" else np.fft.fft(region.x, axis=-1),
                  casting="same_kind")
        return out


register(SleepyFFT())
