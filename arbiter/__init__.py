"""kernel-arbiter: a measured-arbiter kernel registry.

Register candidates, verify each against a float64 oracle (the F4 gate), pick a
winner per problem key by tier or measured time per shape bucket, and dispatch
to it with ``run_arbitrated(op, region)``.
"""
from arbiter import regions
from arbiter.candidates import Candidate, Contract, Fallback, Tier, candidate, register, unregister
from arbiter.dispatch import arbitrate, bind, configure, flush, run_arbitrated, stats
from arbiter.errors import ArbiterError, NoCandidateError, RegionError, RegistryError, StrictMissError
from arbiter.ops import register_op

__version__ = "0.1.0"

__all__ = [
    "ArbiterError", "Candidate", "Contract", "Fallback", "NoCandidateError", "RegionError", "RegistryError",
    "StrictMissError", "Tier", "arbitrate", "bind", "candidate", "configure", "flush", "regions", "register",
    "register_op", "run_arbitrated", "stats", "unregister",
]
