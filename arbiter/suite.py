"""Built-in problem suites: what the main job (``arbiter run``) and ``arbiter tune --suite`` use.

A suite is a list of ``Problem`` descriptions (op, dims, dtype, attrs); a region
is built from one with seeded random data on a target.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from arbiter.errors import unknown
from arbiter.ops import OPS, op_kind


@dataclass(frozen=True)
class Problem:
    op: str
    dims: dict
    dtype: str = "float32"
    attrs: dict = field(default_factory=dict)

    def region(self, target: str = "cpu", seed: int = 0):
        kind = op_kind(self.op)
        region = kind.region_type.random(target, self.dtype, self.dims, self.attrs, rng=np.random.default_rng(seed))
        # A key recorded with the caller's consent to looser accuracy keeps it (see Region.allow_looser).
        return region.allow_looser() if self.attrs.get("accuracy") == "looser" else region

    def key(self, target: str = "cpu"):
        """The problem key ``region(target)`` would have, without allocating its operands: the key depends on
        shapes only through their bucket, so a one-element instance gives everything else."""
        from arbiter.keys import bucket_of

        kind = op_kind(self.op)
        tiny = Problem(self.op, {name: 1 for name in self.dims}, self.dtype, self.attrs).region(target)
        return tiny.key.with_bucket(bucket_of(self.dims, kind.region_type.bucket_policy))

    @property
    def label(self) -> str:
        attrs = ",".join(f"{k}={v}" for k, v in self.attrs.items())
        shape = "x".join(str(v) for v in self.dims.values())
        return f"{self.op} {shape} {self.dtype}" + (f" [{attrs}]" if attrs else "")


def mm(m, n, k, dtype="float32", **attrs) -> Problem:
    return Problem("matmul", {"m": m, "n": n, "k": k}, dtype, attrs)


def rows(op, r, c, dtype="float32", **attrs) -> Problem:
    return Problem(op, {"rows": r, "cols": c}, dtype, attrs)


def _quick() -> list[Problem]:
    # Each op kind's shapes (``OpKind.suite``), in registration order: small enough for a 2-core CI machine in
    # seconds, varied enough to exercise every candidate.
    return [Problem(name, dict(dims), dtype, dict(attrs)) for name, kind in OPS.items()
            for dims, dtype, attrs in kind.suite]


SUITES: dict[str, list[Problem]] = {"quick": _quick()}


def suite(name: str) -> list[Problem]:
    if name not in SUITES:
        raise ValueError(f"suite: {unknown('suite', name, SUITES)}")
    return SUITES[name]
