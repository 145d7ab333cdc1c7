"""gated's torch reference (``arbiter.torch.REFERENCE``)."""
from __future__ import annotations

import torch.nn.functional as F


def ref_gated(x, w_gate, w_up):
    return F.silu(x @ w_gate) * (x @ w_up)
