"""A right NumPy softmax into the region's output, for test candidates that differ from it only in when or how
often they run it (stalls, extra work, what they note about the pools): one definition for them all."""
from __future__ import annotations

import numpy as np


def softmax_into_out(region):
    """``region``'s softmax over the last axis, in ``region.alloc_out()``."""
    out = region.alloc_out()
    x = region.x
    np.subtract(x, x.max(axis=-1, keepdims=True), out=out)
    np.exp(out, out=out)
    out /= out.sum(axis=-1, keepdims=True)
    return out


class NumPyOnlySoftmax:
    """A right softmax on NumPy arrays that is not torch's kernel (``torch_native`` False): a torch caller's fast
    path and torch.compile's traced winner must both leave it to the full path."""

    name, target, op, priority = "numpy_only_softmax", "cpu", "softmax", 10

    def run(self, region, params):
        return softmax_into_out(region)


def numpy_only_softmax():
    """A ``NumPyOnlySoftmax`` registered as a hand-tuned candidate (the class above is mixed in with ``Candidate``
    here: this module stays importable without the registry)."""
    from arbiter import Candidate, Tier

    cls = type("NumPyOnly", (NumPyOnlySoftmax, Candidate), {"tier": Tier.HAND_TUNED})
    return cls()
