"""The import contracts hold: the layers, no cycles inside any package, private modules kept private
(``[tool.importlinter]`` in pyproject.toml, checked by ``lint-imports``; imports inside functions count too)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _lint_imports() -> list[str]:
    found = shutil.which("lint-imports", path=os.path.dirname(sys.executable)) or shutil.which("lint-imports")
    if found is None:
        pytest.skip("import-linter is not installed (it comes with the test extra: pip install -e .[test])")
    return [found]


def test_every_import_contract_is_kept():
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(_lint_imports() + ["--no-cache"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    report = done.stdout + done.stderr
    # The count says every contract of pyproject.toml was read and checked (a new one changes it here).
    assert done.returncode == 0 and "Contracts: 5 kept, 0 broken." in report, report


def test_the_hot_path_reads_as_plain_statements():
    """Issue 41 item 5: ``dispatch.py`` has no backslash-continued line (a lambda continued that way made a static
    call-graph walker refuse the file), and every lambda it holds is a one-line expression."""
    import ast
    import io
    import tokenize

    path = ROOT / "arbiter" / "dispatch.py"
    text = path.read_text()
    continued = [n for n, line in enumerate(text.splitlines(), 1)
                 if line.endswith("\\") and not line.lstrip().startswith("#")]
    strings = {n for tok in tokenize.generate_tokens(io.StringIO(text).readline) if tok.type == tokenize.STRING
               for n in range(tok.start[0], tok.end[0])}  # a backslash at the end of a docstring's line is text
    assert [n for n in continued if n not in strings] == []
    lambdas = [node for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Lambda)]
    assert all(node.lineno == node.end_lineno for node in lambdas)
