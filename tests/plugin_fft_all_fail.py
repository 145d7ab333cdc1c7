"""A plug-in for tests/test_tune_exit.py (loaded through ARBITER_PLUGINS, after plugin_failing and
plugin_numpy_fft_absent): scipy_fft stood down too, so no solution of an fft key passes the gate."""
from arbiter import Candidate, Tier, register


class AbsentScipyFFT(Candidate):
    name, target, op, tier = "scipy_fft", "cpu", "fft", Tier.HAND_TUNED

    def available(self):
        return "stood down by the test plug-in"

    def run(self, region, params):
        raise AssertionError("an unavailable candidate never runs")


register(AbsentScipyFFT())
