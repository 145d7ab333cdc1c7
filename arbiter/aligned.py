"""Host arrays whose data starts on a 64-byte boundary, as torch's CPU allocator gives every tensor.

NumPy aligns its data to 16 bytes only (large arrays land 16 bytes past a page), so a probe drawn by NumPy never
has the alignment a torch caller's tensors always have, and a kernel with a wrong path taken only on 64-byte-aligned
pointers would never run that path in the gate. The gate's probes are drawn here (``regions._normal``, the CPU
target's ``from_host``, ``layouts.place``); alternate probes move every operand one element off (``shifted``), so
both classes are probed under one verdict.
"""
from __future__ import annotations

import math

import numpy as np

ALIGN = 64  # bytes: torch's CPU allocator (c10::alloc_cpu), AVX-512's vector width, a cache line


def empty(shape, dtype, order: str = "C", skew: int = 0) -> np.ndarray:
    """An uninitialised array of ``shape`` whose data starts on a 64-byte boundary, then ``skew`` elements on."""
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(shape)
    dtype = np.dtype(dtype)
    size = math.prod(shape)
    pad = ALIGN // dtype.itemsize + 1 + skew
    flat = np.empty(size + pad, dtype=dtype)
    lead = (-flat.ctypes.data % ALIGN) // dtype.itemsize + skew
    data = flat[lead:lead + size]
    if order == "F":
        return data.reshape(shape[::-1]).T
    return data.reshape(shape)


def is_aligned(array: np.ndarray) -> bool:
    return array.ctypes.data % ALIGN == 0
