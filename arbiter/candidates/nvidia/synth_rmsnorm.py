"""Synthesized RMSNorm on NVIDIA: a fused row kernel generated from the RMSNorm row program."""
from __future__ import annotations

import numpy as np

from arbiter.candidates import register
from arbiter.candidates.nvidia._synth_rows import SynthRows


class SynthRMSNorm(SynthRows):
    name = "synth_rmsnorm"
    op = "rmsnorm"

    def run(self, region, params):
        return self.launch(region, region.alloc_out(), (np.float32(region.eps),), (region.weight,))


register(SynthRMSNorm())
