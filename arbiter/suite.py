"""Built-in problem suites: what the main job (``arbiter run``) and ``arbiter tune --suite`` use.

A suite is a list of ``Problem`` descriptions (op, dims, dtype, attrs); a region
is built from one with seeded random data on a target.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from arbiter.ops import op_kind


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


SUITES: dict[str, list[Problem]] = {
    # Small enough for a 2-core CI machine in seconds, varied enough to exercise every candidate.
    "quick": [
        mm(64, 64, 64), mm(257, 129, 65), mm(512, 1, 512), mm(1, 512, 512),
        mm(256, 256, 256, activation="gelu", bias="1"), mm(200, 300, 100, activation="silu", bias="1", residual="1"),
        mm(128, 128, 128, "float64"), mm(96, 80, 72, "float16", activation="relu"),
        rows("softmax", 64, 1000), rows("softmax", 512, 4096), rows("softmax", 33, 129, "float64"),
        rows("softmax", 128, 2048, "float16"),
        rows("rmsnorm", 64, 1000), rows("rmsnorm", 512, 4096), rows("rmsnorm", 33, 129, "float64"),
        rows("layernorm", 64, 1000), rows("layernorm", 257, 2048),
        Problem("attention", {"batch": 1, "heads": 4, "q": 128, "k": 128, "d": 64}, "float32", {"causal": "1"}),
        Problem("attention", {"batch": 2, "heads": 2, "q": 1, "k": 300, "d": 64}, "float32"),
        Problem("fft", {"batch": 16, "n": 1024}, "complex64", {"kind": "c2c"}),
        Problem("fft", {"batch": 8, "n": 1000}, "float64", {"kind": "r2c"}),
        Problem("gated", {"m": 64, "n": 256, "k": 128}),
        Problem("pointwise", {"size": 100_000}, "float32", {"chain": "mul[t]>add[s]>relu>tanh"}),
    ],
}


def suite(name: str) -> list[Problem]:
    if name not in SUITES:
        raise ValueError(f"suite: unknown suite {name!r}; known: {', '.join(sorted(SUITES))}")
    return SUITES[name]
