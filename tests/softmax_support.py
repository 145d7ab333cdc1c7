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
