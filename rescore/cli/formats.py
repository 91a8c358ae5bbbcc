"""The N-best formats' options, made from their one registry (rescore.formats.registry): the
readers' own options (each format declares them), what each needs to act, and rescore-nbest's
``--format`` group (``@format_options``; :func:`pop_format_options` gives the job's fields).
rescore-convert-nbest (rescore.cli.convert) takes the readers' options from here too."""

from __future__ import annotations

import math
from typing import Dict, Sequence

import click

from rescore.cli.options import Count, Need
from rescore.errors import check
from rescore.formats.base import Option, ReadOptions, WriteArgs
from rescore.formats.registry import ALIASES, FORMATS, NAMES, OPTIONS, RESULT_FORMATS, input_format, result_names

FORMAT_CHOICES = ("auto", *NAMES, *ALIASES)  # the values of --format and --from
AUTO = "auto: a file is a TSV file, a dir a Kaldi dir"
ALIAS_NOTE = "; ".join(f"{a}: the former name of {n}" for a, n in ALIASES.items())


def click_option(o: Option):
    """The click option of a reader's option (rescore.formats.base.Option)."""
    kw = dict(help=o.help, metavar=o.metavar)
    if o.kind == "count":
        kw["type"] = Count(o.low, o.high)
    elif o.kind == "choice":
        kw["type"] = click.Choice(o.choices)
    if o.default is not None:
        kw.update(default=o.default, show_default=True)
    return click.option(o.flag, o.field, **kw)


def read_options(options: dict) -> ReadOptions:
    """Pop the readers' options (OPTIONS) from a command's keyword arguments: a ReadOptions
    (whether they are for the input's format is a declared requirement: format_needs)."""
    values = {}
    for o in OPTIONS:
        v = options.pop(o.field)
        if o.kind == "steps":
            v = tuple(x.strip() for x in (v or "").split(",") if x.strip())
            bad = [x for x in v if x not in o.choices]
            if bad:
                raise click.BadParameter(f"steps among {', '.join(o.choices)}, got {bad[0]!r}", param_hint=o.flag)
        values[o.field] = v
    return ReadOptions(**values)


def _format(p, path: str, fmt: str) -> str:
    """The input's format: the parameter ``fmt``, or what 'auto' makes of the parameter ``path``."""
    return input_format(p[path], p[fmt])


def format_needs(path: str, fmt: str) -> dict:
    """What the readers' options need to act (rescore.cli.options.Need, by option): the input
    format they are for, or another of its options; ``path``, ``fmt``: the command's parameters
    of the input and its format option."""
    flag = "--format" if fmt == "input_format" else "--from"
    needs = {}
    for f in FORMATS.values():
        for o in f.options:
            if o.needs is not None:
                field, what = o.needs
                needs[o.flag] = Need(lambda p, field=field: bool(p[field]), what)
            else:
                needs[o.flag] = Need(lambda p, owner=f.name: _format(p, path, fmt) == owner,
                                     f"{flag} {f.name} ({o.acts_on})")
    return needs


def read_option_decorator(f):
    """The readers' options (OPTIONS), as every command that reads the formats offers them."""
    for o in reversed(OPTIONS):
        f = click_option(o)(f)
    return f


def other_format(p) -> bool:
    return _format(p, "nbest_dir", "input_format") != "kaldi"


# What rescore-nbest's format options need (rescore.cli.options.Need, by option).
NBEST_NEEDS = {
    **format_needs("nbest_dir", "input_format"),
    "--score-weight": Need(other_format, "an input other than a Kaldi dir (--format; a Kaldi dir's costs are "
                                          "weighted by --inv-acwt and --weight)"),
    "--write-format": Need(other_format, "an input other than a Kaldi dir (--format)"),
    "--manifest": Need(lambda p: "nemo" in (_format(p, "nbest_dir", "input_format"), p["write_format"]),
                       "--format nemo or --write-format nemo (the manifest is NeMo's)"),
    "--icefall-suffix": Need(lambda p: p["write_format"] == "icefall", "--write-format icefall (the files it names)"),
}
# rescore-nbest's --help group of these options
NBEST_GROUP = ["--format", "--score-weight", "--manifest", "--write-format", "--icefall-suffix",
               *(o.flag for o in OPTIONS)]

def result_files_help() -> str:
    """What each result format writes (SET: the test set's name), as --help says it."""
    out = []
    for name in RESULT_FORMATS:
        f = FORMATS[name]
        needs = [w for w, flag in (("with --manifest", f.manifest), ("references needed", f.refs)) if flag]
        files = ", ".join(result_names(name, WriteArgs(test_set="SET")))
        shown = f"{name} ({', '.join(needs)})" if needs else name
        out.append(f"{shown}: {files}")
    return "; ".join(out)


_NBEST_OPTIONS = [
    click.option("--format", "input_format", type=click.Choice(FORMAT_CHOICES), default="auto",
                 help="What NBEST_DIR is: " + "; ".join(f"{n}: {f.what}" for n, f in FORMATS.items())
                      + f"; {AUTO}; {ALIAS_NOTE}. All but kaldi write OUT_DIR/text and scores.tsv "
                      "(docs/ecosystems.md); --words-txt gives their recognizer's words (--oov-penalty auto)."),
    click.option("--score-weight", "score_weights", multiple=True, metavar="NAME=X",
                 help="Weight of a score column of an input other than a Kaldi dir (repeat it): total = sum of "
                      "weight x column + w (--weight) x NN LM cost + wip x words. A column without one has "
                      "weight 1; Kaldi's columns ac, graph, nolm default to ac/inv_acwt + (1-w) graph + w nolm."),
    click.option("--manifest", type=click.Path(dir_okay=False),
                 help="With --format nemo: the manifest (JSON lines) that NeMo decoded: utterance ids and "
                      "references."),
    read_option_decorator,
    click.option("--write-format", type=click.Choice(RESULT_FORMATS),
                 help="Also write the result in that recognizer's own files into OUT_DIR, for its scoring "
                      f"scripts: {result_files_help()}."),
    click.option("--icefall-suffix", metavar="SUFFIX",
                 help="With --write-format icefall: name the files as a current zipformer decode.py names them, "
                      "with its params.suffix: recogs-SET-SUFFIX.txt, errs-SET-SUFFIX.txt, "
                      "wer-summary-SET-SUFFIX.txt."),
]


def format_options(f):
    """rescore-nbest's format options (NBEST_GROUP)."""
    for option in reversed(_NBEST_OPTIONS):
        f = option(f)
    return f


def pop_format_options(nbest_dir, options: dict) -> dict:
    """Pop the format options from rescore-nbest's keyword arguments: the NbestJob fields they
    set (rescore.jobs.nbest), for any input format."""
    return {"fmt": input_format(nbest_dir, options.pop("input_format")),
            "score_weights": parse_score_weights(options.pop("score_weights")), "manifest": options.pop("manifest"),
            "write_format": options.pop("write_format"), "icefall_suffix": options.pop("icefall_suffix"),
            "read_options": read_options(options)}


def parse_score_weights(specs: Sequence[str], option: str = "--score-weight") -> Dict[str, float]:
    """['ac=0.1', 'ctc=0.3'] -> {'ac': 0.1, 'ctc': 0.3} (finite numbers, each column once)."""
    out: Dict[str, float] = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        try:
            x = float(value) if sep and name else math.nan
        except ValueError:
            x = math.nan
        check(math.isfinite(x), "NAME=NUMBER (a score column and its finite weight), e.g. ctc=0.3", option, spec)
        check(name not in out, "each score column once", option, spec)
        out[name] = x
    return out
