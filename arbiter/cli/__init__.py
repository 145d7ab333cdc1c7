"""The ``arbiter`` command line (Typer). One module per command group:

* ``arbiter.cli.run``: ``arbiter run``, the main job (arbitrate a built-in suite, print decisions and counters);
* ``arbiter.cli.tune``: ``arbiter tune`` and ``arbiter explain`` (measured selection);

Each module adds its commands to ``app`` when imported below.
"""
from __future__ import annotations

import sys

import typer
from rich.console import Console

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="kernel-arbiter: verify, measure and dispatch kernel candidates per problem key.")



def friendly(command):
    """Decorator for commands: bad input and registry trouble print one clear line and exit 2 / 1,
    never a traceback (the messages already name the argument or file and the fix)."""
    import functools

    from arbiter.errors import ArbiterError, RegistryError

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except RegistryError as exc:
            console().print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(1)
        except (ArbiterError, ValueError, KeyError) as exc:
            console().print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(2)

    return wrapper


def console() -> Console:
    """A Rich console; wide when output is piped (logs, CI, tests) so tables don't fold."""
    return Console(width=None if sys.stdout.isatty() else 160)


@app.callback()
def _root(db: str = typer.Option(None, "--db", help="Registry: a file path or SQLAlchemy URL "
                                                    "(default $ARBITER_DB, else ./registry.db).")):
    import os

    if db:
        os.environ["ARBITER_DB"] = db  # read once, where the store is opened


from arbiter.cli import run as _run  # noqa: E402,F401  (registers commands)
from arbiter.cli import tune as _tune  # noqa: E402,F401
from arbiter.cli import registry as _registry  # noqa: E402,F401
from arbiter.cli import report as _report  # noqa: E402,F401


def main() -> None:
    app()
