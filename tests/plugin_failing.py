"""A plug-in for tests/test_cli_output.py (loaded through ARBITER_PLUGINS): an fft candidate that always
raises (the gate fails it), with a Rich closing tag in its name and its error."""
from arbiter import Candidate, Tier, register


class RaisesFFT(Candidate):
    name, target, op, tier = "raises[/x]", "cpu", "fft", Tier.EMITTED

    def run(self, region, params):
        raise ValueError("boom [/y]")


register(RaisesFFT())
