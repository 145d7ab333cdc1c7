"""What every command module of the CLI shares: the Typer ``app`` they add their commands to (each also taking
the global ``--db``), ``--help`` wrapped without breaking words, and the error handling of ``friendly``.

The package (``arbiter.cli``) imports the command modules; they import this, never the package.
"""
from __future__ import annotations

import functools
import inspect
import os
import re
import textwrap
import typing

import typer
from rich.text import Text
from typer.core import TyperCommand, TyperGroup

from arbiter import dispatch, targets
from arbiter.cli.output import console, lit
from arbiter.errors import ArbiterError, RegistryError, TargetUnavailable

DB_HELP = ("Registry: a file path or SQLAlchemy URL (default $ARBITER_DB, else ./registry.db); :memory: keeps "
           "results in this process only (tune and run refuse a registry they cannot write unless asked so). "
           "Taken before or after the command; after it wins.")


def _wrap(text: str, width: int, indent: str = "") -> str:
    """Paragraphs filled to ``width`` breaking only at spaces: click's own wrapping also breaks at hyphens
    ("no-" / "residual")."""
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if p.strip()]
    return "\n\n".join(textwrap.fill(p, width, initial_indent=indent, subsequent_indent=indent,
                                     break_on_hyphens=False, break_long_words=False) for p in paragraphs)


# Typer carries its own copy of click: subclass the classes it uses, not the click package's.
# (their types are typer's click's, which mypy cannot follow through these class attributes)
class _HelpFormatter(TyperCommand.context_class.formatter_class):  # type: ignore[name-defined]
    """``--help`` as click prints it, never breaking a word."""

    def write_text(self, text: str) -> None:
        self.write(_wrap(text, self.width, " " * self.current_indent) + "\n")

    def write_dl(self, rows, col_max: int = 30, col_spacing: int = 2) -> None:
        rows = list(rows)
        first_col = min(max((len(a) for a, _ in rows), default=0), col_max) + col_spacing
        for first, second in rows:
            self.write(f"{'':>{self.current_indent}}{first}")
            if not second:
                self.write("\n")
                continue
            if len(first) <= first_col - col_spacing:
                self.write(" " * (first_col - len(first)))
            else:
                self.write("\n" + " " * (first_col + self.current_indent))
            lines = _wrap(second, max(self.width - first_col - 2, 10)).splitlines() or [""]
            self.write(lines[0] + "\n")
            for line in lines[1:]:
                self.write(f"{'':>{first_col + self.current_indent}}{line}\n")


class _Context(TyperCommand.context_class):  # type: ignore[misc,valid-type]  # see _HelpFormatter
    formatter_class = _HelpFormatter


class _Group(TyperGroup):
    context_class = _Context


class _Command(TyperCommand):
    context_class = _Context


class _App(typer.Typer):
    """The Typer app; every command it registers also takes the global options (``--db``), so
    ``arbiter --db r.db tune`` and ``arbiter tune --db r.db`` mean the same."""

    def command(self, *args, **kwargs):
        register = super().command(*args, **{"cls": _Command, "context_settings": HELP_OPTIONS, **kwargs})
        return lambda f: register(_with_global_options(f))


def _use_db(db: str | None) -> None:
    if db:
        os.environ["ARBITER_DB"] = db  # read once, where the store is opened


def _with_global_options(command):
    """``command`` with a ``--db`` option added to its signature (Typer reads the signature)."""

    @functools.wraps(command)
    def wrapper(*args, db: str | None = None, **kwargs):
        _use_db(db)
        return command(*args, **kwargs)

    sig = inspect.signature(command, eval_str=True)
    option = inspect.Parameter("db", inspect.Parameter.KEYWORD_ONLY, annotation=str | None,
                               default=typer.Option(None, "--db", help=DB_HELP))
    # typer builds the command from this signature: the --db option joins the command's own
    wrapper.__signature__ = sig.replace(parameters=[*sig.parameters.values(), option])  # type: ignore[attr-defined]
    wrapper.__annotations__ = {**typing.get_type_hints(command), "db": str | None}
    return wrapper


HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}

# rich_markup_mode=None: help texts are printed as written (an attribute like chain=mul[t]>relu keeps its
# brackets; Rich markup would eat them).
app = _App(cls=_Group, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
           rich_markup_mode=None, context_settings=HELP_OPTIONS,
           help="kernel-arbiter: verify, measure and dispatch kernel candidates per problem key.")


def friendly(command):
    """Decorator for commands: bad input (a bad option, ``BadParameter``, included), an unavailable target and
    registry trouble print one clear line and exit 2 / 2 / 1, never a traceback (the messages already name the
    argument, target or file and the fix)."""
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except typer.BadParameter as exc:  # one line naming the option, as the others (click adds a usage block)
            hint = exc.param_hint if isinstance(exc.param_hint, str) else None
            error(f"{hint}: {exc.message}" if hint else exc.message)
            raise typer.Exit(2) from None
        except RegistryError as exc:
            error(exc)
            raise typer.Exit(1) from None
        except (ArbiterError, ValueError, KeyError) as exc:
            error(exc)
            raise typer.Exit(2) from None

    return wrapper


def error(exc) -> None:
    """``error: <message>`` on one line (soft-wrapped: a log keeps it whole)."""
    console().print(Text.assemble(("error:", "red"), " ", lit(exc)), highlight=False, soft_wrap=True)


def open_for_writing() -> None:
    """Make the registry named by --db/ARBITER_DB the process's store for a command whose point is to write it
    (``tune``, ``run``): a registry it cannot write raises ``RegistryError`` naming it and the fix (exit 1),
    where a library caller would get an in-memory store and a warning; ``--db :memory:`` asks for memory."""
    from arbiter.store.layered import open_default  # SQLAlchemy loads with the registry, not with --help

    dispatch.configure(store=open_default(writable=True))


def require_target(name: str) -> None:
    """Raise ``TargetUnavailable`` naming the first gate ``name`` fails here (no CuPy, no device, NVRTC,
    no libamdhip64, ...); an unknown name raises ValueError."""
    available = targets.get(name).available()
    if available is not True:
        raise TargetUnavailable(name, str(available or "available() is False"))


def _print_version(value: bool) -> None:
    if value:
        from arbiter import __version__

        print(f"kernel-arbiter {__version__}")
        raise typer.Exit()


@app.callback()
def _root(db: str = typer.Option(None, "--db", help=DB_HELP),
          version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                       help="Print the version and exit.")):
    _use_db(db)
