"""softmax's torch reference (``arbiter.torch.REFERENCE``)."""
from __future__ import annotations

import torch


def ref_softmax(x, dim):
    return torch.softmax(x, dim)
