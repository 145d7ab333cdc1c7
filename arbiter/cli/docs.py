"""The CLI reference, generated from the Typer app so it cannot drift.

``python -m arbiter.cli.docs > docs/cli.md`` writes it; ``tests/test_docs.py``
fails when the file differs from what this prints.
"""
from __future__ import annotations

import inspect

import typer
from typer.core import TyperGroup

from arbiter.cli import app

HEADER = """# CLI reference

Generated from the Typer app by `python -m arbiter.cli.docs > docs/cli.md`; a test fails when
this file and the code disagree. `arbiter COMMAND --help` prints the same.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _params(params, ctx) -> list[str]:
    """A table of a command's options and arguments, as ``--help`` words them (defaults and ranges included)."""
    rows = [r for r in (p.get_help_record(ctx) for p in params if p.name != "help") if r is not None]
    if not rows:
        return []
    return ["| option | meaning |", "| --- | --- |",
            *(f"| `{_cell(names)}` | {_cell(meaning)} |" for names, meaning in rows), ""]


def markdown() -> str:
    """The reference as Markdown: the root options, then every command in name order."""
    root = typer.main.get_command(app)
    assert isinstance(root, TyperGroup)  # the app has commands: typer makes it a group
    ctx = root.make_context("arbiter", [], resilient_parsing=True)
    lines = [HEADER, "## `arbiter`", "", inspect.cleandoc(root.help or ""), "",
             "Usage: `arbiter [OPTIONS] COMMAND [ARGS]...`", "", *_params(root.params, ctx)]
    for name in root.list_commands(ctx):
        cmd = root.get_command(ctx, name)
        assert cmd is not None  # a name list_commands gave
        sub = cmd.make_context(name, [], parent=ctx, resilient_parsing=True)
        usage = " ".join(cmd.collect_usage_pieces(sub))
        lines += [f"## `arbiter {name}`", "", inspect.cleandoc(cmd.help or ""), "",
                  f"Usage: `arbiter {name} {usage}`", "", *_params(cmd.params, sub)]
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
