"""The Solution value type and the text enums stored and shown with it."""
from __future__ import annotations

import json

import pytest

from arbiter import Tier
from arbiter.candidates import Candidate
from arbiter.dispatch import POLICIES, MissPolicy
from arbiter.select import Status
from arbiter.solution import ChosenBy, Solution, TimingMode, params_id
from arbiter.store import MeasurementRecord, SolutionRecord, VerdictKey


class Tiled(Candidate):
    name, target, op, tier = "tiled", "cpu", "matmul", Tier.EMITTED

    def param_space(self):
        return [{"tile": 32, "k": 8}]


def test_a_solution_is_its_name_and_canonical_parameters_whatever_the_dict_order_or_identity():
    a = Solution("tiled", {"tile": 32, "k": 8}, "tiled@1")
    b = Solution("tiled", {"k": 8, "tile": 32})
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a.params_id == '{"k":8,"tile":32}' == params_id({"tile": 32, "k": 8})
    assert a != Solution("tiled", {"tile": 64, "k": 8}) and a != Solution("other", {"tile": 32, "k": 8})
    with pytest.raises(AttributeError):
        a.candidate_name = "other"  # frozen


def test_a_solution_keeps_its_own_copy_of_the_parameters():
    params = {"tile": 32}
    s = Solution("tiled", params)
    params["tile"] = 64
    assert s.params == {"tile": 32} and s.params_id == '{"tile":32}'


def test_the_label_shows_parameters_only_when_there_are_some():
    assert Solution("numpy_matmul").label == "numpy_matmul" == str(Solution("numpy_matmul", {}))
    assert Solution("tiled", {"tile": 32}).label == 'tiled{"tile":32}'


def test_a_solution_read_back_from_stored_text_is_the_same_solution():
    s = Solution("tiled", {"tile": 32, "k": 8})
    back = Solution.from_text("tiled", s.params_id, "tiled@1")
    assert back == s and back.params == s.params and back.identity == "tiled@1"


def test_the_verdict_key_is_built_from_a_solution_with_its_identity_only():
    cand = Tiled()
    s = Solution.of(cand, cand.param_space()[0])
    assert s.identity == cand.identity()
    assert VerdictKey.of(s, "k1", "env1") == VerdictKey(cand.identity(), '{"k":8,"tile":32}', "k1", "env1")
    with pytest.raises(ValueError, match="^solution: tiled.* no code identity"):
        VerdictKey.of(Solution("tiled", {"tile": 32}), "k1", "env1")
    with pytest.raises(ValueError, match="^solution: .* no code identity"):
        SolutionRecord.of("k1", Solution("tiled"), ChosenBy.TIER, "env1")


def test_records_give_their_solution_and_read_their_enums_from_text():
    record = SolutionRecord("k1", "tiled", "tiled@1", {"tile": 32}, "measured", "env1")
    assert record.chosen_by is ChosenBy.MEASURED and record.solution == Solution("tiled", {"tile": 32})
    assert record.solution.identity == "tiled@1"
    m = MeasurementRecord("tiled", {"tile": 32}, "stream", 1e-5, 9e-6, 1.1e-5, 0.2, 10, 0.0)
    assert m.mode is TimingMode.STREAM and m.solution == record.solution
    with pytest.raises(ValueError):
        SolutionRecord("k1", "tiled", "tiled@1", {}, "fastest", "env1")


@pytest.mark.parametrize("member", [*ChosenBy, *TimingMode, *Status, *MissPolicy])
def test_enum_members_are_their_text_wherever_they_are_shown(member):
    text = member.value
    assert member == text and str(member) == text and f"{member}" == text and f"{member:>12}" == f"{text:>12}"
    assert json.dumps({"k": member}) == json.dumps({"k": text})
    assert {text: 1}[member] == 1 and {member: 1}[text] == 1  # mixed keys find each other


def test_the_miss_policies_and_how_a_winner_was_chosen_are_separate_words():
    assert POLICIES == ("tier", "tune", "record", "strict")
    assert [c.value for c in ChosenBy] == ["tier", "measured", "forced", "disabled"]
