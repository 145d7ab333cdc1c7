"""Published tables stay in step with the code."""
from pathlib import Path

from arbiter.probes import document

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_budget_table_matches_the_code():
    assert (DOCS / "budgets.md").read_text() == document(), \
        "docs/budgets.md is out of date: run `python -m arbiter.probes > docs/budgets.md`"


def test_cli_reference_matches_the_app():
    from arbiter.cli.docs import markdown as cli_markdown

    assert (DOCS / "cli.md").read_text() == cli_markdown(), \
        "docs/cli.md is out of date: run `python -m arbiter.cli.docs > docs/cli.md`"


def test_ops_inventory_matches_the_registry():
    from arbiter.cli.docs import ops_inventory, with_inventory

    text = (DOCS / "ops.md").read_text()
    assert text == with_inventory(text), \
        "docs/ops.md's candidate inventory is out of date: run `python -m arbiter.cli.docs --ops docs/ops.md`"
    inventory = ops_inventory()
    assert "| cpu | `numpy_fft` | HAND_TUNED |" in inventory  # issue 27 item 7: it was missing by hand
    from arbiter.candidates import REGISTRY
    from arbiter.ops import OPS
    from arbiter.targets import TARGET_NAMES

    for op in OPS:
        for target in TARGET_NAMES:
            for cand in REGISTRY.candidates(target, op):
                if type(cand).__module__.startswith("arbiter.candidates."):
                    assert f"| {target} | `{cand.name}` |" in inventory, (target, op, cand.name)
