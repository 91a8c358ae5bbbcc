"""What every command shares: logging to stderr and turning RescoreError into `error: ...`, exit 1."""

from __future__ import annotations

import contextlib
import logging
import sys
from typing import Iterator

import click

from rescore.errors import OptionError, RescoreError

verbose_option = click.option("-v", "--verbose", count=True, help="More log output on stderr (-vv: debug).")


def setup_logging(verbose: int = 0) -> None:
    """Log to stderr: warnings and info by default, debug with -vv."""
    level = logging.DEBUG if verbose >= 2 else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s: %(message)s", datefmt="%H:%M:%S")
    if verbose < 2:
        logging.getLogger("matplotlib").setLevel(logging.WARNING)


@contextlib.contextmanager
def errors_to_exit() -> Iterator[None]:
    """Bad input becomes `error: <file>:<line>: expected ...` on stderr and exit status 1."""
    try:
        yield
    except RescoreError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2 if isinstance(e, OptionError) else 1)


def parse_grid(spec: str, name: str) -> list:
    """'0,0.5,1' or 'start:stop:step' (stop included) -> sorted list of floats."""
    try:
        if ":" in spec:
            start, stop, step = (float(x) for x in spec.split(":"))
            if step <= 0:
                raise ValueError
            n = int(round((stop - start) / step))
            vals = [round(start + i * step, 10) for i in range(n + 1)]
        else:
            vals = [float(x) for x in spec.split(",") if x.strip()]
        if not vals:
            raise ValueError
    except ValueError:
        raise click.BadParameter(f"expected 'a,b,c' or 'start:stop:step', got {spec!r}", param_hint=name) from None
    return sorted(set(vals))
