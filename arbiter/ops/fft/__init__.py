"""``fft``: a 1-D discrete Fourier transform of every row (c2c, r2c, c2r; forward or inverse)."""
from __future__ import annotations

import numpy as np

from arbiter import regions, targets
from arbiter.ops.family import Family
from arbiter.ops.kind import OpKind
from arbiter.oracles.fft import oracle


def _structured(region, rng):
    """Constant rows, single impulses and alternating signs: all energy in one bin (zero, Nyquist)."""
    x = region.x
    host = np.asarray(targets.get(region.target).to_host(x)).copy()
    rows, n = host.shape
    for r in range(rows):
        kind = r % 3
        row = np.zeros(n, dtype=host.dtype)
        if kind == 0:
            row[:] = 1.0
        elif kind == 1:
            row[rng.integers(0, n)] = 1.0
        else:
            row[:] = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
        host[r] = row
    x[...] = targets.get(region.target).from_host(host, region.dtype)


FAMILIES = (
    Family("structured", ("fft",),
           "constant rows, single impulses, alternating signs: all energy in the zero or Nyquist bin",
           _structured),
)


def sub_rows(region, i0: int, i1: int):
    return (regions.FFT(region.x[i0:i1], kind=region.kind, inverse=region.inverse, n=region.n if region.c2r else None),
            (slice(i0, i1),))


SUITE = (
    ({"batch": 16, "n": 1024}, "complex64", {"kind": "c2c"}),
    ({"batch": 8, "n": 1000}, "float64", {"kind": "r2c"}),
)

KIND = OpKind("fft", regions.FFT, oracle, families=FAMILIES, suite=SUITE, sub_rows=sub_rows,
              torch_reference="arbiter.ops.fft.torch_ref:ref_fft")
