"""Every option of every command, walked from click's own metadata (the console scripts of
setup.cfg and each group's subcommands), so that an option or a command is covered the day it is
added (rescore.cli.options):

* typed values: each numeric option is fed nan, inf, a negative, zero and a huge value (a grid
  also a zero step and a value twice) and refuses it with exit 2 and ``error:`` naming the
  option, unless ACCEPTED lists it with the reason the value is legal;
* declared requirements: each option with a Need, given without what it needs, exits 2 saying it
  would do nothing; each declared conflict, both given, exits 2;
* grouped --help: each option is in exactly one group of its command's table, and defaults are
  printed plainly.

An option that neither declares a requirement nor is marked "always acts" is not refused by a
test: the group table (which every option must be in) is where a new option is looked at, and a
second mandatory list would be kept up by rote.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import click
import pytest
from click.testing import CliRunner

from rescore.cli.options import Count, Grid, Real, Shares, ungrouped
from tests.cli.test_help import SCRIPTS


def _commands() -> Iterator[Tuple[str, click.Command, List[str], click.Command]]:
    """(name, top-level command, the subcommand's words, the command itself) of every console
    script and every subcommand of a group."""
    for name, (module, attr) in sorted(SCRIPTS.items()):
        top = getattr(importlib.import_module(module), attr)
        subs = getattr(top, "commands", None)
        if subs is None:
            yield name, top, [], top
        for sub, cmd in sorted((subs or {}).items()):
            yield f"{name} {sub}", top, [sub], cmd


COMMANDS = list(_commands())
BY_NAME = {name: (top, sub, cmd) for name, top, sub, cmd in COMMANDS}


def _long(p: click.Parameter) -> str:
    return max(p.opts, key=len)


def _numeric(p: click.Parameter) -> bool:
    """An option that takes a number or numbers (its type is one of rescore.cli.options', or a
    number-or-word type such as --oov-penalty's NATS|auto and --classes' C|auto)."""
    return isinstance(p, click.Option) and not p.count and (
        isinstance(p.type, (Real, Count, Grid, Shares)) or p.type.name in ("NATS|auto", "C|auto"))


NUMERIC = [(name, _long(p)) for name, _, _, cmd in COMMANDS for p in cmd.params if _numeric(p)]
VALUES = {"nan": "nan", "inf": "inf", "negative": "-1", "zero": "0", "huge": "1e300"}
GRID_VALUES = {**VALUES, "zero step": "0:1:0", "twice": "1,1"}
HUGE_INT = "1000000000000"

# Values a numeric option takes on purpose, with the reason (command, option) -> {kind: why}.
ANY_PENALTY = "any finite word insertion penalty: a negative one rewards words, 0 is none"
WIP = {"negative": ANY_PENALTY, "zero": ANY_PENALTY, "huge": ANY_PENALTY}
SCALE = "a scale: a huge one only weighs the other costs down (no memory follows it)"
NN_OFF = "0: the NN LM's weight off (the first pass alone)"
NATS = {"zero": "0 nats: no penalty", "huge": "any finite number of nats"}
THETA = {"huge": "a large flatness theta sharpens the cache's distribution; any finite one is legal"}
LAMBDA = {"zero": "0: the cache interpolated with weight 0 (its baseline)"}
WINDOW = {"zero": "0: no cache"}
CASCADE_MARGIN = {"zero": "0 nats: only the cheap model's best (and its ties) survive",
                  "huge": "any finite margin: a huge one keeps every hypothesis (no memory follows it)"}
ACCEPTED: Dict[Tuple[str, str], Dict[str, str]] = {
    ("rescore-nbest", "--weight"): {"zero": NN_OFF},
    ("rescore-nbest", "--inv-acwt"): {"huge": SCALE},
    ("rescore-nbest", "--wip"): WIP,
    ("rescore-nbest", "--oov-penalty"): NATS,
    ("rescore-nbest", "--cache-window"): WINDOW,
    ("rescore-nbest", "--cache-theta"): THETA,
    ("rescore-nbest", "--cache-lambda"): LAMBDA,
    ("rescore-nbest", "--history-min-posterior"): {"zero": "0: keep every word of the history"},
    ("rescore-nbest", "--cascade-top"): {"zero": "0: no limit by rank"},
    ("rescore-nbest", "--cascade-margin"): CASCADE_MARGIN,
    ("rescore-tune", "--weights"): {"zero": NN_OFF},
    ("rescore-tune", "--inv-acwts"): {"huge": SCALE},
    ("rescore-tune", "--wips"): WIP,
    ("rescore-tune", "--mixes"): {"zero": "0: the first model's share off"},
    ("rescore-tune", "--cascade-margins"): CASCADE_MARGIN,
    ("rescore-tune", "--oov-penalty"): NATS,
    ("rescore-wer", "--bootstrap"): {"zero": "0: no bootstrap"},
    ("rescore-wer", "--seed"): {"zero": "a seed"},
    ("rescore-ppl", "--cache-window"): WINDOW,
    ("rescore-ppl", "--cache-theta"): THETA,
    ("rescore-ppl", "--cache-lambda"): LAMBDA,
    ("rescore-ppl", "--cache-thetas"): THETA,
    ("rescore-ppl", "--cache-lambdas"): LAMBDA,
    ("rescore-train-lm", "--dropout"): {"zero": "0: no dropout"},
    ("rescore-train-lm", "--coverage"): {"zero": "0: off",
                                         "huge": "a loss weight: any finite one (the loss shows a divergence)"},
    ("rescore-train-lm", "--self-norm"): {"zero": "0: off",
                                          "huge": "a loss weight: any finite one (the loss shows a divergence)"},
    ("rescore-train-lm", "--lr"): {"huge": "a learning rate: any finite one (the loss shows a divergence)"},
    ("rescore-train-lm", "--warmup"): {"zero": "0: no warm-up"},
    ("rescore-train-lm", "--anneal"): {"huge": "a divisor of the learning rate: any finite one >= 1"},
    ("rescore-train-lm", "--clip"): {"zero": "0: no clipping", "huge": "a norm no gradient reaches: no clipping"},
    ("rescore-train-lm", "--max-minutes"): {"zero": "0: no budget", "huge": "a budget: any finite one"},
    ("rescore-train-lm", "--seed"): {"zero": "a seed"},
    ("rescore-train-lm", "--threads"): {"zero": "0: torch's default"},
    ("rescore-make-nbest", "--lw"): {"huge": "PocketSphinx's LM weight: any positive one"},
    ("rescore-make-nbest", "--fwdflatlw"): {"huge": "PocketSphinx's LM weight: any positive one"},
    ("rescore-make-nbest", "--bestpathlw"): {"huge": "PocketSphinx's LM weight: any positive one"},
    ("rescore-make-nbest", "--wip"): {"huge": "PocketSphinx's word insertion probability: any positive one"},
    ("rescore-make-nbest", "--maxhmmpf"): {"negative": "-1: PocketSphinx's 'no cap'",
                                           "zero": "PocketSphinx's own range, -1 and up"},
    ("rescore-tts-data", "--gap"): {"zero": "0: sentences back to back"},
    ("rescore-lattice cover", "--acoustic-scale"): {"huge": SCALE},
    ("rescore-lattice cover", "--lm-scale"): {"zero": "0: the path costs of the acoustics alone", "huge": SCALE},
    ("rescore-lattice apply", "--acoustic-scale"): {"huge": SCALE},
    ("rescore-lattice apply", "--lm-scale"): {"zero": "0: the path costs of the acoustics alone", "huge": SCALE},
    ("rescore-lattice apply", "--weight"): {"zero": NN_OFF},
    ("rescore-lattice tune", "--inv-acwts"): {"huge": SCALE},
    ("rescore-lattice tune", "--wips"): WIP,
}


def _invoke(name: str, args: List[str]):
    top, sub, _ = BY_NAME[name]
    return CliRunner().invoke(top, sub + args, prog_name=name.split()[0], catch_exceptions=True)


def _refused(result, option: str) -> bool:
    """Whether click refused the option's value: exit 2, an ``error:`` line naming the option."""
    errors = [ln for ln in result.output.splitlines() if ln.startswith("error: ")]
    return result.exit_code == 2 and any("Invalid value" in ln and option in ln for ln in errors)


def test_every_command_and_numeric_option_is_walked():
    assert len(COMMANDS) >= 13 and "rescore-lattice tune" in BY_NAME
    assert len(NUMERIC) >= 60, len(NUMERIC)


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_numbers_go_through_the_typed_options(name):
    """No option takes click's bare FLOAT or INT (they take 'nan' and 'inf', and no bound): a
    number goes through Real, Count or Grid."""
    _, _, cmd = BY_NAME[name]
    bare = [_long(p) for p in cmd.params if isinstance(p, click.Option) and not p.count
            and isinstance(p.type, (click.types.FloatParamType, click.types.IntParamType))
            and not isinstance(p.type, (Real, Count))]
    assert not bare, f"{name}: options of click's own number types: {bare}"


@pytest.mark.parametrize("name, option", NUMERIC, ids=[f"{n} {o}" for n, o in NUMERIC])
def test_numeric_option_refuses_what_is_not_a_value(name, option):
    _, _, cmd = BY_NAME[name]
    param = next(p for p in cmd.params if isinstance(p, click.Option) and _long(p) == option)
    values = dict(GRID_VALUES if isinstance(param.type, Grid) else VALUES)
    if isinstance(param.type, Count) or (isinstance(param.type, Grid) and param.type.integer):
        values["huge"] = HUGE_INT
    accepted = ACCEPTED.get((name, option), {})
    wrong = []
    for kind, value in values.items():
        result = _invoke(name, [option, value])
        assert "Traceback" not in result.output and (result.exception is None
                                                      or isinstance(result.exception, SystemExit)), result.output
        if _refused(result, option) == (kind in accepted):
            wrong.append(f"{kind} ({value}): {'refused' if kind in accepted else 'accepted'}: "
                         f"{result.output.strip()[-300:]}")
    assert not wrong, f"{name} {option}:\n" + "\n".join(wrong)


def test_the_accepted_values_are_options_of_the_commands():
    assert set(ACCEPTED) <= set(NUMERIC), sorted(set(ACCEPTED) - set(NUMERIC))


# --- declared requirements and conflicts -----------------------------------------------------

def _sample(p: click.Parameter, tmp: Path) -> List[str]:
    """A value the parameter's type takes (the rules are checked after click has parsed them)."""
    t = p.type
    if isinstance(p, click.Option) and (p.is_flag or p.count):
        return []
    if isinstance(t, click.Path):
        values = [str(tmp / "d") if t.dir_okay else str(tmp / "f")]
    elif isinstance(t, click.Choice):
        values = [next((c for c in t.choices if c != p.default), t.choices[0])]
    elif isinstance(t, (Real, Count)):
        values = [_inside(t.min, t.max, isinstance(t, Count))]
    elif isinstance(t, Grid):
        values = [_inside(t.low, t.high, t.integer)]
    elif isinstance(t, Shares):
        values = ["0.5,0.5"]
    elif t.name in ("NATS|auto", "C|auto"):
        values = ["auto"]
    else:
        values = ["x"]
    return values * (p.nargs if p.nargs > 1 else 1)


def _inside(low, high, integer: bool) -> str:
    """A value strictly inside a range (a bound may be open), >= 1 where it is open above."""
    low = 0 if low is None else low
    value = (low + high) / 2 if high is not None else low + 1
    return str(int(value) if integer else value)


def _base(name: str, cmd: click.Command, tmp: Path, leave: Tuple[str, ...] = ()) -> List[str]:
    """The command's required arguments and options, as values its types take (tmp/d a dir,
    tmp/f a file), or its BASES."""
    (tmp / "d").mkdir(exist_ok=True)
    (tmp / "f").write_text("x\n")
    if name in BASES:
        return BASES[name](tmp)
    args: List[str] = []
    for p in cmd.params:
        if not p.required or (isinstance(p, click.Option) and _long(p) in leave):
            continue
        args += _sample(p, tmp) if isinstance(p, click.Argument) else [_long(p), *_sample(p, tmp)]
    return args


# Inputs that make a requirement testable where the generated ones would meet it (a file SOURCE
# is a TSV file, a dir SOURCE a Kaldi dir, whose --words-txt acts)
BASES = {"rescore-convert-nbest": lambda tmp: [str(tmp / "f"), str(tmp / "out.tsv")]}

NEEDS = [(name, option) for name, _, _, cmd in COMMANDS for option in getattr(cmd, "needs", {})]
CONFLICTS = [(name, c) for name, _, _, cmd in COMMANDS for c in getattr(cmd, "conflicts", ())]


@pytest.mark.parametrize("name, option", NEEDS, ids=[f"{n} {o}" for n, o in NEEDS])
def test_an_option_without_what_it_needs_is_refused(name, option, tmp_path):
    _, _, cmd = BY_NAME[name]
    param = next(p for p in cmd.params if _long(p) == option)
    result = _invoke(name, _base(name, cmd, tmp_path, leave=(option,)) + [option, *_sample(param, tmp_path)])
    assert result.exit_code == 2, result.output[-600:]
    assert f"error: {option}: expected" in result.output and "would do nothing" in result.output, \
        result.output[-600:]


@pytest.mark.parametrize("name, conflict", CONFLICTS, ids=[f"{n} {c.first} {c.second}" for n, c in CONFLICTS])
def test_conflicting_options_are_refused(name, conflict, tmp_path):
    _, _, cmd = BY_NAME[name]
    params = {_long(p): p for p in cmd.params if isinstance(p, click.Option)}
    args = [conflict.first, *_sample(params[conflict.first], tmp_path),
            conflict.second, *_sample(params[conflict.second], tmp_path)]
    result = _invoke(name, _base(name, cmd, tmp_path) + args)
    assert result.exit_code == 2, result.output[-600:]
    assert f"error: {conflict.first}: expected {conflict.first} or {conflict.second}, not both" in result.output, \
        result.output[-600:]


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_rules_name_real_options(name):
    _, _, cmd = BY_NAME[name]
    options = {_long(p) for p in cmd.params if isinstance(p, click.Option)}
    named = set(getattr(cmd, "needs", {})) | {n for c in getattr(cmd, "conflicts", ()) for n in (c.first, c.second)}
    assert named <= options, f"{name}: rules of no option: {sorted(named - options)}"


# --- grouped --help ------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_every_option_is_in_exactly_one_help_group(name):
    _, _, cmd = BY_NAME[name]
    missing, twice, unknown = ungrouped(cmd, getattr(cmd, "groups", {}))
    assert not missing, f"{name}: options in no --help group (add them to its table): {missing}"
    assert not twice, f"{name}: options in two groups: {twice}"
    assert not unknown, f"{name}: groups or names of nothing: {unknown}"


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_help_prints_defaults_plainly(name):
    text = _invoke(name, ["--help"]).output
    assert "[default: (" not in text and "default: {" not in text, text
    assert "x<=None" not in text and "x>=None" not in text


def test_nbest_help_puts_the_core_first():
    text = _invoke("rescore-nbest", ["--help"]).output
    sections = [ln for ln in text.splitlines() if ln.endswith(":") and not ln.startswith(" ")]
    assert sections[:3] == ["Input options:", "Model options:", "Weight options:"], sections
    assert sections[-1] == "Other options:"
    assert text.index("--model ") < text.index("--jobs ") and text.index("--format ") > text.index("--wip ")
    assert "[default: 10;" in text  # --inv-acwt: not '(10)'


# --- what the walk does not reach: rescore-lattice tune's W=DIR arguments -------------------

@pytest.mark.parametrize("dirs, message", [
    (["nan=A", "0.5=B"], "'nan' is not a finite number"),
    (["inf=A"], "'inf' is not a finite number"),
    (["1.5=A"], "1.5 is not in the range 0<=x<=1"),
    (["0.5=A", "0.50=B"], "one decode dir per weight, got two for 0.5"),
    (["0.5"], "expected W=DIR"),
])
def test_lattice_tune_takes_one_finite_weight_per_decode_dir(dirs, message, tmp_path):
    (tmp_path / "words.txt").write_text("<eps> 0\n")
    args = ["--nbest-dir", str(tmp_path), "--data-dir", str(tmp_path), "--words-txt", str(tmp_path / "words.txt")]
    result = _invoke("rescore-lattice tune", args + [d.replace("A", str(tmp_path)).replace("B", str(tmp_path))
                                                     for d in dirs])
    assert result.exit_code == 2 and "error: " in result.output and "W=DIR" in result.output, result.output
    assert message in result.output, result.output
