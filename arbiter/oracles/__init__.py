"""Oracles: the universal float64 reference of each op.

An oracle takes a region, upcasts its operands to float64 arrays and computes the exact answer
with the plainest array code it can. It is independent of every candidate: no candidate's code
is called from here.

By default the operands are brought to the host (NumPy). Inside ``on_device()`` (the gate on a
GPU target) ``host64`` keeps them on the region's device as float64 CuPy arrays instead, and the
same NumPy calls dispatch to CuPy (``__array_ufunc__`` / ``__array_function__``), so the float64
reference of a large probe is computed where the data is, not after a transfer.
"""
from __future__ import annotations

import contextlib
import sys
import threading

import numpy as np

from arbiter import targets

_mode = threading.local()


@contextlib.contextmanager
def on_device():
    """Within this block, oracles of device regions compute on the device (float64 CuPy arrays)."""
    before = getattr(_mode, "device", False)
    _mode.device = True
    try:
        yield
    finally:
        _mode.device = before


def array_module(array):
    """NumPy, or CuPy for a CuPy array (without importing CuPy when it is not loaded)."""
    if type(array).__module__.split(".", 1)[0] == "cupy":
        return sys.modules["cupy"]
    return np


def host64(region, array) -> np.ndarray:
    """Any operand of ``region`` as a float64 array: on the host, or on its device within ``on_device()``."""
    if getattr(_mode, "device", False):
        wide = targets.get(region.target).device_float64(array)
        if wide is not None:
            return wide
    return np.asarray(targets.get(region.target).to_host(array), dtype=np.float64)
