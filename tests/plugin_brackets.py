"""A plug-in for tests/test_cli_output.py (loaded through ARBITER_PLUGINS): candidates whose names and
reasons hold square brackets and Rich closing tags, as a user's own names may."""
import numpy as np

from arbiter import Candidate, Tier, register


class BracketFFT(Candidate):
    """NumPy's FFT under the name ``fft[/x]``; the tier default for fft on the CPU (highest priority)."""

    name, target, op, tier, priority = "fft[/x]", "cpu", "fft", Tier.HAND_TUNED, 10

    def applies_to(self, region):
        return (region.kind == "r2c" and not region.inverse) or "r2c forward only [/x]"

    def run(self, region, params):
        out = region.alloc_out()
        np.copyto(out, np.fft.rfft(region.x, axis=-1), casting="same_kind")
        return out


class NeedsExtra(Candidate):
    """Never available here; its reason names an extra the way the built-in candidates do."""

    name, target, op, tier = "needs[extra]", "cpu", "softmax", Tier.EMITTED

    def available(self):
        return "install example-package[extra] [/x]"

    def run(self, region, params):
        raise AssertionError("never runs: unavailable")


register(BracketFFT())
register(NeedsExtra())
