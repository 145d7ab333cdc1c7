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
