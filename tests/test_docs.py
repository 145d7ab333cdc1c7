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
