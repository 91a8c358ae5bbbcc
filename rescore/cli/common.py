"""What every command shares: one decorator (``@command()``: help on -h/--help, defaults shown,
``--version``, errors as ``error: ...``, the options' declared rules and --help groups of
rescore.cli.options), logging to stderr, and ``parse_grid`` for scripts that call the library
(commands take grids, as every option value, through rescore.cli.options' types).

Exit statuses, the same in every command:

* 0   done;
* 1   bad input data (a RescoreError: it names the file, the line and what was expected);
* 2   a bad option or combination of options (click's own checks, or an OptionError of the
      library's validation), before any work;
* 130 interrupted (Ctrl-C, SIGINT): the progress lines say ``interrupted``, outputs are whole or absent.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from typing import Iterator, Mapping, Optional, Sequence

import click

from rescore import __version__
from rescore.bulk import collect_less, exit_now
from rescore.cli.options import MAX_GRID_POINTS, Conflict, Need, check_rules, format_grouped  # noqa: F401 (the bound)
from rescore.cli.options import parse_grid as _parse_grid
from rescore.errors import OptionError, RescoreError

verbose_option = click.option("-v", "--verbose", count=True, help="More log output on stderr (-vv: debug).")
version_option = click.version_option(__version__, "--version", message="%(prog)s (rescore) %(version)s")

CONTEXT_SETTINGS = {"show_default": True, "help_option_names": ["-h", "--help"]}


def fail(e: RescoreError) -> "NoReturn":  # type: ignore[name-defined]  # noqa: F821
    """Print ``error: <message>`` on stderr and exit: 2 for an OptionError, 1 for bad data."""
    click.echo(f"error: {e}", err=True)
    sys.exit(2 if isinstance(e, OptionError) else 1)


class _Errors:
    """Every error of a command reads ``error: ...`` on stderr: click's option errors (exit 2,
    with a pointer to --help), OptionError (exit 2) and RescoreError (exit 1)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        collect_less()  # (a command's process: rescore.bulk)
        try:
            rv = super().main(args, prog_name, complete_var, False, **extra)
        except click.UsageError as e:
            path = e.ctx.command_path if e.ctx is not None else (prog_name or self.name)
            click.echo(f"error: {e.format_message()} (see '{path} --help')", err=True)
            sys.exit(e.exit_code)
        except click.ClickException as e:
            click.echo(f"error: {e.format_message()}", err=True)
            sys.exit(e.exit_code)
        except (click.exceptions.Abort, SystemExit) as e:
            if isinstance(e.__context__, KeyboardInterrupt):  # Ctrl-C, here or in the command's own handler
                from rescore.progress import close_interrupted
                close_interrupted()
                click.echo("error: interrupted", err=True)
                sys.exit(130)  # 128 + SIGINT, as a shell reports it
            if isinstance(e, SystemExit):
                raise
            click.echo("error: aborted", err=True)
            sys.exit(1)
        except RescoreError as e:
            fail(e)
        code = rv if isinstance(rv, int) else 0
        if args is None:  # run as a program (click read sys.argv): no interpreter teardown (rescore.bulk)
            exit_now(code)
        sys.exit(code)


class Command(_Errors, click.Command):
    """A click command with rescore's error messages and exit statuses (_Errors), its options'
    declared requirements and conflicts checked before it runs, and its --help in groups
    (rescore.cli.options): ``groups`` maps a group title to its options' long names, ``needs``
    an option to what it needs to act (a Need), ``conflicts`` lists the pairs that exclude each
    other."""

    def __init__(self, *args, groups: Optional[Mapping[str, Sequence[str]]] = None,
                 needs: Optional[Mapping[str, Need]] = None, conflicts: Sequence[Conflict] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.groups = dict(groups or {})
        self.needs = dict(needs or {})
        self.conflicts = tuple(conflicts)

    def invoke(self, ctx: click.Context):
        check_rules(ctx, self.needs, self.conflicts)  # (an OptionError: exit 2, before any work)
        return super().invoke(ctx)

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        format_grouped(self, ctx, formatter, self.groups)


class Group(_Errors, click.Group):
    """A click group (a command with subcommands) with rescore's error messages and exit
    statuses; declare it with ``@click.group(cls=Group)`` and add ``@version_option``. Its
    subcommands (``@group.command(...)``) are :class:`Command` s."""

    command_class = Command

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        format_grouped(self, ctx, formatter, {})
        self.format_commands(ctx, formatter)


def command(groups: Optional[Mapping[str, Sequence[str]]] = None, needs: Optional[Mapping[str, Need]] = None,
            conflicts: Sequence[Conflict] = (), **kwargs):
    """``@click.command`` with rescore's settings: -h/--help, defaults shown, --version, the
    ``error: ...`` messages and exit statuses, the options' rules and help groups of
    :class:`Command`."""

    def decorate(f):
        return click.command(cls=Command, context_settings=CONTEXT_SETTINGS, groups=groups, needs=needs,
                             conflicts=conflicts, **kwargs)(version_option(f))

    return decorate


def setup_logging(verbose: int = 0) -> None:
    """Log to stderr: warnings and info by default, debug with -vv."""
    level = logging.DEBUG if verbose >= 2 else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s: %(message)s", datefmt="%H:%M:%S")
    if verbose < 2:
        logging.getLogger("matplotlib").setLevel(logging.WARNING)


@contextlib.contextmanager
def errors_to_exit() -> Iterator[None]:
    """Bad input becomes `error: <file>:<line>: expected ...` on stderr and exit status 1 (2 for
    an OptionError). Commands declared with ``@command()`` get this for the whole command; the
    block form stays for code that runs outside one."""
    try:
        yield
    except RescoreError as e:
        fail(e)


def parse_grid(spec: str, name: str) -> list:
    """'0,0.5,1' or 'start:stop:step' (stop included) -> sorted list of finite floats, at most
    MAX_GRID_POINTS of them, none twice (rescore.cli.options.parse_grid; an OptionError naming
    ``name``). Commands take grids through the option type rescore.cli.options.Grid."""
    try:
        return _parse_grid(spec)
    except ValueError as e:
        raise OptionError(str(e).removeprefix("expected "), option=name, got=spec) from None
