"""A solution: one candidate plus one parameter set (DESIGN.md's "solution index"), and the words stored with it.

``Solution`` is what selection ranks, dispatch installs, the tuner times, the ladder hints and the registry
stores as a winner. It names its candidate (``candidate_name``; the ``Candidate`` object itself is the
registry's), holds its parameters as a dict (``params``), and knows its canonical parameter text
(``params_id``: what the store keys on, computed once here), its display ``label`` and, with the candidate's
code identity, its ``VerdictKey`` (``arbiter.store.VerdictKey.of``).

Two solutions are the same solution when their candidate name and ``params_id`` are: counters, measurements
and stored winners are per solution across code changes. ``identity`` (the candidate's code identity, ``""``
when not needed) is what a verdict is per, so it is carried but not compared.

The enums are text-valued so that what is stored, exported and printed is the text it always was:
``ChosenBy`` (how a winner was chosen; not to be confused with the *miss policy* of ``dispatch``) and
``TimingMode``.

Nothing here imports the rest of the package but ``keys`` (for ``params_id``, the canonical text): the store
sits above this module.
"""
from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field

from arbiter.keys import params_id

__all__ = ["ChosenBy", "Solution", "TextEnum", "TimingMode", "params_id"]


class TextEnum(str, enum.Enum):
    """A str-valued enum whose text is its value everywhere (``str``, f-strings, JSON, the database), as
    ``enum.StrEnum`` on Python 3.11+; members compare equal to their text."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class ChosenBy(TextEnum):
    """How a key's winner was chosen (stored in the ``solutions.policy`` column, shown as "policy")."""

    TIER = "tier"  # the first solution in tier order that passed the gate
    MEASURED = "measured"  # the fastest, by a margin that beat the noise
    FORCED = "forced"  # named by the caller (it still passed the gate)
    DISABLED = "disabled"  # ARBITER_DISABLE: the tier default, in this process only (never stored)


class TimingMode(TextEnum):
    """What one timing measures (see ``arbiter.timing``)."""

    DEVICE = "device"  # events around one call, L2 flushed before it
    LATENCY = "latency"  # host clock around one call plus a synchronize
    STREAM = "stream"  # calls back to back between two events, per call


@dataclass(frozen=True)
class Solution:
    """A candidate (by name) plus one parameter set. Frozen and hashable: equal by name and ``params_id``."""

    candidate_name: str
    params: dict = field(default_factory=dict, compare=False)  # a private copy: mutating it is a bug
    identity: str = field(default="", compare=False)  # the candidate's code identity, when known
    params_id: str = field(init=False, repr=False)  # canonical text of ``params``

    def __post_init__(self):
        params = dict(self.params or {})
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "params_id", params_id(params))

    @classmethod
    def of(cls, candidate, params: dict) -> Solution:
        """``candidate`` (the object) with ``params``, its code identity included (computed now)."""
        return cls(candidate.name, params, candidate.identity())

    @classmethod
    def from_text(cls, candidate_name: str, text: str, identity: str = "") -> Solution:
        """A solution from the store's text (``params_id``), as stored in the verdict and counter tables."""
        return cls(candidate_name, json.loads(text) if text else {}, identity)

    @property
    def label(self) -> str:
        """The display name: the candidate, then its parameters when it has any (``blocked{"tile":32}``)."""
        return self.candidate_name if self.params_id == "{}" else f"{self.candidate_name}{self.params_id}"

    def __str__(self) -> str:
        return self.label
