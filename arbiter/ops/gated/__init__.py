"""``gated`` (SwiGLU): ``silu(x @ w_gate) * (x @ w_up)``."""
from __future__ import annotations

from arbiter import regions
from arbiter.ops import products
from arbiter.ops.family import Family, poke
from arbiter.ops.kind import OpKind, Product
from arbiter.oracles import array_module
from arbiter.oracles.gated import oracle


def product(region) -> Product:
    """Two products of x, combined as ``silu(g) * u`` (the oracle's formula, on the selected rows and columns)."""
    def finish(zs, r_sel, c_sel):
        g, u = zs
        return g / (1.0 + array_module(g).exp(-g)) * u

    return Product(region.x, (region.w_gate, region.w_up), finish)


def _nonfinite(region, rng):
    """A NaN row of x."""
    import numpy as np

    poke(region, region.x, (rng.integers(0, region.x.shape[0]), slice(None)), np.nan)


def _left(region):
    return region.x


FAMILIES = (
    products.mixed_rows("gated", _left),
    products.tiny("gated", _left, quadratic=True),
    Family("nonfinite", ("gated",), "a NaN row of x, where the oracle propagates it (a NaN output row)", _nonfinite,
           special=True),
)

# Its special-value semantics, as docs/budgets.md's table states them (NaN / Inf inputs, masked entries, other).
SPECIAL_VALUES = (
    "a NaN row of `x` makes its output row NaN",
    "-",
    "-",
)

KIND = OpKind("gated", regions.Gated, oracle, families=FAMILIES,
              suite=(({"m": 64, "n": 256, "k": 128}, "float32", {}),), product=product,
              torch_reference="arbiter.ops.gated.torch_ref:ref_gated",
              # 2: large shapes checked on random full tiles / each head's own rows (issue 38 item 6)
              gate_version=2,
              special_values=SPECIAL_VALUES)
