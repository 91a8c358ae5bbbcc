"""Command-line options: their value types, what each needs to act, and their --help groups.

One home for three rules that hold in every command (``rescore.cli.common.Command`` applies them):

* **Typed values.** Every number an option takes goes through a type of this module: ``Real``
  (a finite float, in a range where one is meaningful), ``Count`` (an integer in a range; an upper
  bound where memory follows the value), ``Grid`` (a sweep 'a,b,c' or 'start:stop:step': finite,
  step > 0, no value twice) and ``Shares`` (a mix of models). ``nan``, ``inf`` and out-of-range
  values are click usage errors (exit 2, ``error:`` naming the option) before any work.
* **Declared requirements and conflicts.** A command declares, by option, what the option needs to
  act (:class:`Need`, a test on the command's parameters) and which options exclude each other
  (:class:`Conflict`); :func:`check_rules` refuses an option given on the command line (or in the
  environment), whatever its value, that would do nothing, or two that conflict: an OptionError
  (exit 2) naming it.
* **Grouped --help.** A command lists its options by group (titles of :data:`GROUPS`, its core
  group first); :func:`format_grouped` writes one section per group, and defaults are printed
  plainly.

Torch-free: a command's ``--help`` and its option checks stay instant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple

import click

from rescore.errors import OptionError
from rescore.nbest.interp import check_mix

# Upper bounds of the values that size memory (the buffers follow them): well above any useful
# setting, well below what exhausts a machine.
MAX_WINDOW = 100_000  # a neural cache's (hidden state, word) pairs per stream
MAX_BATCH = 100_000  # streams, conversations or sentences side by side
MAX_TOKENS = 10_000_000  # token positions in one forward call or one chunk
MAX_WIDTH = 100_000  # layer widths, attention heads, vocabulary classes
MAX_LAYERS = 1_000  # layers, blocks or a width multiplier (the weights follow them)
MAX_VOCAB = 10_000_000  # words kept (the embedding and output layer follow it)
MAX_STEPS = 10 ** 9  # epochs, batches, steps, active HMMs
MAX_JOBS = 1_024  # processes
MAX_THREADS = 4_096  # CPU threads
MAX_BUCKETS = 1_000  # rare-word buckets (one table row, one bar each)
MAX_SEED = 2 ** 32 - 1  # what every random generator takes
MAX_GRID_POINTS = 10_000  # per grid axis; rescore-tune also bounds the product of the axes


# ------------------------------------------------------------------------------------------------
# value types

class Real(click.FloatRange):
    """A finite float, in [low, high] where given (``low_open``/``high_open``: the bound itself
    excluded). click's own FLOAT takes 'nan' and 'inf', and a range lets nan through."""

    name = "float"

    def __init__(self, low: Optional[float] = None, high: Optional[float] = None, *, low_open: bool = False,
                 high_open: bool = False):
        super().__init__(low, high, min_open=low_open, max_open=high_open)

    def _describe_range(self) -> str:
        return _describe(self.min, self.max, self.min_open, self.max_open)

    def convert(self, value, param, ctx):
        rv = click.types.FloatParamType.convert(self, value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(rv, param, ctx)


class Count(click.IntRange):
    """An integer in [low, high]."""

    name = "integer"

    def __init__(self, low: Optional[int] = 0, high: Optional[int] = None):
        super().__init__(low, high)

    def _describe_range(self) -> str:
        return _describe(self.min, self.max, False, False)


def _describe(low, high, low_open: bool, high_open: bool) -> str:
    """A range as --help shows it: 'x>0', '0<=x<1'; '' for none."""
    def shown(v) -> str:
        return str(v) if isinstance(v, int) else f"{v:g}"

    if low is None and high is None:
        return ""
    if high is None:
        return f"x{'>' if low_open else '>='}{shown(low)}"
    left = "" if low is None else f"{shown(low)}{'<' if low_open else '<='}"
    return f"{left}x{'<' if high_open else '<='}{shown(high)}"


class Grid(click.ParamType):
    """A sweep of values: 'a,b,c' or 'start:stop:step' (stop included) -> their sorted list of
    finite floats (``integer``: ints), each in [low, high] (``low_open``: low excluded), at most
    MAX_GRID_POINTS of them, none twice."""

    name = "grid"

    def __init__(self, low: Optional[float] = None, high: Optional[float] = None, *, low_open: bool = False,
                 high_open: bool = False, integer: bool = False):
        self.low, self.high, self.low_open, self.high_open, self.integer = low, high, low_open, high_open, integer

    def get_metavar(self, param, *args, **kwargs) -> str:
        return "A,B,C" if self.integer else "GRID"

    def describe(self) -> str:
        """The values' range, as the error says it: 'numbers in (0, inf)'."""
        if self.low is None and self.high is None:
            return "finite numbers"
        lo = "-inf" if self.low is None else f"{self.low:g}"
        hi = "inf" if self.high is None else f"{self.high:g}"
        kind = "integers" if self.integer else "numbers"
        return (f"{kind} in {'(' if self.low_open or self.low is None else '['}{lo}, {hi}"
                f"{')' if self.high_open or self.high is None else ']'}")

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        try:
            values = parse_grid(str(value), integer=self.integer)
        except ValueError as e:
            self.fail(f"{value!r}: {e}", param, ctx)
        for v in values:
            if ((self.low is not None and (v < self.low or (self.low_open and v == self.low)))
                    or (self.high is not None and (v > self.high or (self.high_open and v == self.high)))):
                self.fail(f"{value!r}: expected {self.describe()}, got {v:g}", param, ctx)
        return values


class Shares(click.ParamType):
    """A mix of models: 'S1,S2,...' -> a tuple of finite shares >= 0 summing to 1
    (rescore.nbest.interp.check_mix)."""

    name = "shares"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            return check_mix([float(x) for x in str(value).split(",")], long_name(param) if param else "")
        except ValueError:
            self.fail(f"expected shares as numbers separated by commas, e.g. 0.6,0.4, got {value!r}", param, ctx)
        except OptionError as e:
            self.fail(f"expected {e.expected}, got {value!r}", param, ctx)


def parse_grid(spec: str, integer: bool = False) -> list:
    """'0,0.5,1' or 'start:stop:step' (stop included; integers for ``integer``) -> the sorted list
    of values; a ValueError that says what is wrong with ``spec``."""
    kind = int if integer else float
    shape = "'a,b,c' or 'start:stop:step'"
    if ":" in spec:
        try:
            start, stop, step = (kind(x) for x in spec.split(":"))
        except ValueError:
            raise ValueError(f"expected {shape} with {'integers' if integer else 'numbers'}") from None
        if not all(math.isfinite(x) for x in (start, stop, step)) or step <= 0 or stop < start:
            raise ValueError("expected finite numbers, stop >= start, step > 0")
        n = int(round((stop - start) / step)) + 1 if not integer else (stop - start) // step + 1
        if n > MAX_GRID_POINTS:
            raise ValueError(f"expected at most {MAX_GRID_POINTS} values, got {n}")
        if integer:
            return list(range(start, stop + 1, step))
        return [round(start + i * step, 10) for i in range(n)]
    try:
        values = [kind(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"expected {shape} with {'integers' if integer else 'numbers'}") from None
    if not values:
        raise ValueError(f"expected {shape}")
    if not all(math.isfinite(v) for v in values):
        raise ValueError("expected finite numbers")
    if len(values) > MAX_GRID_POINTS:
        raise ValueError(f"expected at most {MAX_GRID_POINTS} values, got {len(values)}")
    twice = sorted({v for v in values if values.count(v) > 1})
    if twice:
        raise ValueError(f"expected each value once, got {twice[0]:g} twice")
    return sorted(values)


# ------------------------------------------------------------------------------------------------
# what an option needs, what it excludes

Params = Mapping[str, object]  # a command's parameters by name (click's ctx.params)


@dataclass(frozen=True)
class Need:
    """What an option needs to act: ``acts(params)`` is whether it does, given the command's
    other parameters; ``what`` says what it needs, for the error ('--model (...)')."""

    acts: Callable[[Params], bool]
    what: str


@dataclass(frozen=True)
class Conflict:
    """Two options that exclude each other (by their long names), and why."""

    first: str
    second: str
    why: str


def given(ctx: click.Context, param: click.Parameter) -> bool:
    """Whether the user gave ``param`` (on the command line or in the environment, whatever its
    value), rather than it taking its default."""
    source = ctx.get_parameter_source(param.name)  # type: ignore[arg-type]
    return source in (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT)


def long_name(param: click.Parameter) -> str:
    """The name an option is known by in tables and messages: its longest flag ('--model')."""
    return max(param.opts, key=len) if param.opts else (param.name or "")


def check_rules(ctx: click.Context, needs: Mapping[str, Need], conflicts: Sequence[Conflict]) -> None:
    """The one check of declared requirements and conflicts (module doc): an OptionError naming
    the first option given that would do nothing, or the first pair given that conflicts."""
    params = {long_name(p): p for p in ctx.command.params}  # (the tables name only these: tests/cli/test_options.py)
    for c in conflicts:
        if given(ctx, params[c.first]) and given(ctx, params[c.second]):
            raise OptionError(f"{c.first} or {c.second}, not both ({c.why})", option=c.first,
                              got=_shown(ctx.params.get(params[c.first].name)))
    for p in ctx.command.params:
        need = needs.get(long_name(p))
        if need is not None and given(ctx, p) and not need.acts(ctx.params):
            option = long_name(p)
            raise OptionError(f"{need.what}; without it {option} would do nothing", option=option,
                              got=_shown(ctx.params.get(p.name)))


def _shown(value) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


# ------------------------------------------------------------------------------------------------
# --help in groups

GROUPS = ("Input", "Model", "Weights", "Carry and pointer", "Training", "Output", "Other formats", "Performance",
          "Other")
HEADINGS = {"Weights": "Weight options", "Other formats": "Other recognizers' formats"}
COMMON = ("--verbose", "--version", "--help")  # every command's, in "Other" (added here, not in the tables)


def format_grouped(command: click.Command, ctx: click.Context, formatter: click.HelpFormatter,
                   groups: Mapping[str, Sequence[str]]) -> None:
    """Write ``command``'s options in sections, one per group of ``groups`` (title -> long option
    names, in the table's order; "Other", with the common options, last); a default that help
    shows as text is printed as given, not in parentheses."""
    records: Dict[str, Tuple[str, str]] = {}
    for p in command.get_params(ctx):
        rv = p.get_help_record(ctx) if isinstance(p, click.Option) else None
        if rv is None:
            continue
        shown = getattr(p, "show_default", None)
        if isinstance(shown, str):  # click writes '[default: (TEXT)]'
            rv = (rv[0], rv[1].replace(f"default: ({shown})", f"default: {shown}"))
        records[long_name(p)] = rv
    placed = {name: title for title, names in groups.items() for name in names}
    for title in [*(t for t in groups if t != "Other"), "Other"]:
        names = [n for n in groups.get(title, ()) if n in records]
        if title == "Other":
            names += [n for n in records if n not in placed]  # the common options, and any not placed yet
        if names:
            with formatter.section(HEADINGS.get(title, f"{title} options")):
                formatter.write_dl([records[n] for n in names])


def ungrouped(command: click.Command, groups: Mapping[str, Sequence[str]]) -> Tuple[list, list, list]:
    """The table's faults for a test: options in no group, options in two, names of no option."""
    names = [long_name(p) for p in command.params if isinstance(p, click.Option)]
    listed = [n for ns in groups.values() for n in ns]
    unknown_groups = [t for t in groups if t not in GROUPS]
    return ([n for n in names if n not in listed and n not in COMMON],
            sorted({n for n in listed if listed.count(n) > 1} | {n for n in listed if n in COMMON}),
            sorted({n for n in listed if n not in names}) + unknown_groups)
