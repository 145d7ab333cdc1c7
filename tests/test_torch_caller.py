"""A torch caller's winner is its own (issue 26 item 3): within a tier, solutions that take its tensors as
they are (``torch_native``) come first in its tier order, and its route lives apart from a CuPy (here NumPy)
caller's route for the same key."""
import numpy as np

import arbiter
from arbiter import Candidate, Tier, dispatch
from arbiter.decide import decide
from arbiter.regions import Softmax
from arbiter.request import Persist, Request


class _Softmax(Candidate):
    target, op = "cpu", "softmax"

    def __init__(self, name, priority, torch_native):
        self.name, self.tier, self.priority, self.torch_native = name, Tier.HAND_TUNED, priority, torch_native

    def run(self, region, params):
        x = region.x - region.x.max(axis=-1, keepdims=True)
        e = np.exp(x)
        out = region.out if region.out is not None else np.empty(x.shape, x.dtype)  # no torch on this box
        out[...] = e / e.sum(axis=-1, keepdims=True)
        return out


def _regions():
    x = np.random.default_rng(0).standard_normal((6, 9)).astype(np.float32)
    plain = Softmax(x, -1)
    torch_caller = Softmax(x, -1)
    torch_caller.torch_in = {"x": x}  # what a torch CUDA caller's region carries (its tensors by name)
    return plain, torch_caller


def test_a_torch_callers_tier_default_prefers_a_solution_without_conversions(only_candidates):
    only_candidates("cpu", "softmax", _Softmax("converts", 10, False), _Softmax("native", 5, True))
    plain, torch_caller = _regions()
    tier_now = Request(stored=False, persist=Persist.NONE)
    assert decide(plain, tier_now, dispatch.store()).winner.candidate.name == "converts"
    assert decide(torch_caller, tier_now, dispatch.store()).winner.candidate.name == "native"


def test_torch_and_other_callers_of_one_key_keep_their_own_routes(only_candidates):
    only_candidates("cpu", "softmax", _Softmax("converts", 10, False), _Softmax("native", 5, True))
    plain, torch_caller = _regions()
    assert plain.key == torch_caller.key
    arbiter.run_arbitrated("softmax", torch_caller)
    arbiter.run_arbitrated("softmax", plain)
    assert dispatch.route(plain.key).solution.candidate_name == "converts"
    assert dispatch.route(plain.key, torch_caller=True).solution.candidate_name == "native"
    # the tier choice stored first (the torch caller's) does not decide for the other caller, nor the reverse
    dispatch.reset()
    arbiter.run_arbitrated("softmax", torch_caller)
    assert dispatch.route(plain.key, torch_caller=True).solution.candidate_name == "native"
