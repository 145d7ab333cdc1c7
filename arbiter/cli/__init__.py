"""The ``arbiter`` command line (Typer). One module per command group:

* ``arbiter.cli.run``: ``arbiter run``, the main job (arbitrate a built-in suite, print decisions and counters);
* ``arbiter.cli.tune``: ``arbiter tune`` and ``arbiter explain`` (measured selection);

Each module adds its commands to ``app`` (``arbiter.cli.common``) when imported below.
"""
from __future__ import annotations

# Each registers its commands with ``app``, in this order (the order ``--help`` lists them).
# isort: off
from arbiter.cli import run  # noqa: F401
from arbiter.cli import tune  # noqa: F401
from arbiter.cli import registry  # noqa: F401
from arbiter.cli import report  # noqa: F401
# isort: on
from arbiter.cli.common import app


def main() -> None:
    app()
