"""A plug-in for tests/test_cli_output.py (loaded through ARBITER_PLUGINS): numpy_fft replaced by an
unavailable stand-in of the same name, so an fft key has one vendor solution to time, one excluded
candidate of each kind (unavailable, not applicable) beside the failing plug-in. torch_fft, a vendor solution
too where torch is installed, is unregistered for the same reason."""
import contextlib

from arbiter import Candidate, Tier, register
from arbiter.candidates import unregister


class AbsentNumpyFFT(Candidate):
    name, target, op, tier = "numpy_fft", "cpu", "fft", Tier.HAND_TUNED

    def available(self):
        return "stood down by the test plug-in"

    def run(self, region, params):
        raise AssertionError("an unavailable candidate never runs")


register(AbsentNumpyFFT())

with contextlib.suppress(KeyError):
    unregister("torch_fft", "cpu", "fft")
