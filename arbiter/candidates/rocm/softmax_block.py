"""Emitted softmax on AMD GPUs, one block a row: the nvidia ``softmax_block`` candidate via hiprtc (float32)."""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.nvidia.softmax_block import SoftmaxBlock
from arbiter.candidates.rocm._hip import RocmCandidate


class RocmSoftmaxBlock(RocmCandidate, SoftmaxBlock):  # type: ignore[misc]  # templates: declared in RocmCandidate, valued in the nvidia class
    name = "rocm_softmax_block"


register(RocmSoftmaxBlock())
