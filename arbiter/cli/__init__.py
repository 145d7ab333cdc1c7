"""The ``arbiter`` command line (Typer). One module per command group:

* ``arbiter.cli.run``: ``arbiter run``, the main job (arbitrate a built-in suite, print decisions and counters);
* ``arbiter.cli.tune``: ``arbiter tune`` and ``arbiter explain`` (measured selection);

Each module adds its commands to ``app`` when imported below.
"""
from __future__ import annotations

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="kernel-arbiter: verify, measure and dispatch kernel candidates per problem key.")



@app.callback()
def _root(db: str = typer.Option(None, "--db", help="Registry: a file path or SQLAlchemy URL "
                                                    "(default $ARBITER_DB, else ./registry.db).")):
    import os

    if db:
        os.environ["ARBITER_DB"] = db  # read once, where the store is opened


from arbiter.cli import run as _run  # noqa: E402,F401  (registers commands)
from arbiter.cli import tune as _tune  # noqa: E402,F401


def main() -> None:
    app()
