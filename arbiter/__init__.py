"""kernel-arbiter: a measured-arbiter kernel registry.

Register candidates, verify each against a float64 oracle (the F4 gate), pick a
winner per problem key by tier or measured time per shape bucket, and dispatch
to it with ``run_arbitrated(op, region)``.
"""
from arbiter import cpu_threads

cpu_threads.configure()  # before numba or an OpenMP runtime starts: see arbiter/cpu_threads.py

from arbiter import regions  # noqa: E402
from arbiter.candidates import Candidate, Contract, Fallback, Tier, candidate, register, unregister  # noqa: E402
from arbiter.dispatch import arbitrate, bind, configure, flush, run_arbitrated, stats  # noqa: E402
from arbiter.env import project_version as _project_version  # noqa: E402
from arbiter.errors import (  # noqa: E402
    ArbiterError,
    CaptureMissError,
    NoCandidateError,
    RegionError,
    RegistryError,
    StrictMissError,
)
from arbiter.graphs import Captured, capture  # noqa: E402
from arbiter.ops import register_op  # noqa: E402

__version__ = _project_version()  # from the installed metadata, never a literal

__all__ = [
    "ArbiterError",
    "Candidate",
    "CaptureMissError",
    "Captured",
    "Contract",
    "Fallback",
    "NoCandidateError",
    "RegionError",
    "RegistryError",
    "StrictMissError",
    "Tier",
    "arbitrate",
    "bind",
    "candidate",
    "capture",
    "configure",
    "flush",
    "regions",
    "register",
    "register_op",
    "run_arbitrated",
    "stats",
    "unregister",
]
