"""``Memo``: a process-lifetime cache (compiled kernels, launch plans, dtype names), marked as state.

A candidate's identity digests the module globals its code reads (``arbiter.candidates.behaviour_text``): a
constant table there is behaviour, and a change to it must re-verify. A cache filled on first use is not: were
its contents digested, the identity after one call would differ from the identity in the next process, and every
stored verdict would be computed again. A cache declared as ``Memo()`` is digested by its type alone."""
from __future__ import annotations


class Memo(dict):
    """A dict whose contents are state, not behaviour (see the module docstring)."""

    __slots__ = ()
