"""matmul's structure for the gate's large-shape check: one product, then bias, activation and residual."""
from __future__ import annotations

import numpy as np

from arbiter.ops.kind import Product
from arbiter.oracles.matmul import activation


def product(region) -> Product:
    def finish(zs, r_sel, c_sel):
        z = zs[0]
        if region.bias is not None:
            z = z + region.bias[c_sel].astype(np.float64)
        z = activation(region.activation, z)
        if region.residual is not None:
            z = z + region.residual[r_sel][:, c_sel].astype(np.float64)
        return z

    return Product(region.a, (region.b,), finish, linear=region.activation == "none", bias=region.bias,
                   residual=region.residual)
