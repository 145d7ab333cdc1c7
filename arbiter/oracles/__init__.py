"""Oracles: the universal float64 reference of each op, on the host.

An oracle takes a region, upcasts its operands to float64 NumPy arrays and
computes the exact answer with the plainest NumPy it can. It is independent of
every candidate: no candidate's code is called from here.
"""
from __future__ import annotations

import numpy as np

from arbiter import targets


def host64(region, array) -> np.ndarray:
    """Any operand of ``region`` as a float64 host array."""
    return np.asarray(targets.get(region.target).to_host(array), dtype=np.float64)
