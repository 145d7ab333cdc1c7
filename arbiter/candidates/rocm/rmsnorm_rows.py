"""Emitted RMSNorm on AMD GPUs: the nvidia ``rmsnorm_rows`` candidate, ``rmsnorm.cu`` compiled by hiprtc (float32)."""
from __future__ import annotations

from arbiter.candidates import register
from arbiter.candidates.nvidia.rmsnorm_rows import RMSNormRows
from arbiter.candidates.rocm._hip import RocmCandidate


class RocmRMSNormRows(RocmCandidate, RMSNormRows):  # type: ignore[misc]  # templates: declared in RocmCandidate, valued in the nvidia class
    name = "rocm_rmsnorm_rows"


register(RocmRMSNormRows())
