"""Other recognizers' N-best lists in rescore: rescore-nbest's ``--format`` options (one
decorator, ``@interchange_options``, and the call that runs such a job), and the converter
command ``rescore-convert-nbest`` (Kaldi N-best dir <-> interchange file, and ESPnet, icefall,
NeMo -> interchange file). docs/ecosystems.md has the commands for each recognizer."""

from __future__ import annotations

from pathlib import Path

import click

from rescore.cli.common import command, setup_logging, verbose_option
from rescore.cli.examples import attach

# rescore.io.ecosystems.FORMATS (kept here so that --help imports nothing)
FORMATS = ("kaldi", "interchange", "espnet", "icefall", "nemo")
KALDI_ARCHIVES = ("words_text", "acwt", "lmwt.withlm", "lmwt.nolm", "words")  # what --to kaldi writes

_OPTIONS = [
    click.option("--format", "input_format", type=click.Choice(("auto", *FORMATS)), default="auto",
                 help="What NBEST_DIR is: a Kaldi N-best dir, an N-best interchange file (TSV), an ESPnet decode "
                      "dir (<n>best_recog/, or ESPnet1's data.json), an icefall N-best dump (JSON lines) or a NeMo "
                      "beam-search TSV (preds_out_size*_alpha*_beta*.tsv, with --manifest); auto: a file is an "
                      "interchange file, "
                      "a dir a Kaldi dir. All but kaldi write OUT_DIR/text and scores.tsv (docs/ecosystems.md); "
                      "--words-txt gives their recognizer's words (--oov-penalty auto)."),
    click.option("--score-weight", "score_weights", multiple=True, metavar="NAME=X",
                 help="Weight of a score column of an input other than a Kaldi dir (repeat it): total = sum of "
                      "weight x column + w (--weight) x NN LM cost + wip x words. A column without one has "
                      "weight 1; Kaldi's columns ac, graph, nolm default to ac/inv_acwt + (1-w) graph + w nolm."),
    click.option("--manifest", type=click.Path(dir_okay=False),
                 help="With --format nemo: the manifest (JSON lines) that NeMo decoded: utterance ids and "
                      "references."),
]


def interchange_options(f):
    for option in reversed(_OPTIONS):
        f = option(f)
    return f


def pop_other_format(nbest_dir, options: dict):
    """Pop this module's options from rescore-nbest's keyword arguments; for an input that is not
    a Kaldi dir, return them (for run_other_format), else None."""
    from rescore.io.ecosystems import input_format

    other = {"fmt": input_format(nbest_dir, options.pop("input_format")),
             "score_weights": options.pop("score_weights"), "manifest": options.pop("manifest")}
    if other["fmt"] != "kaldi":
        return other
    if other["score_weights"] or other["manifest"]:
        raise click.UsageError("--score-weight and --manifest are for inputs other than a Kaldi dir (--format)")
    return None


def run_other_format(other: dict, job: dict):
    """Run rescore-nbest on a non-Kaldi input (rescore.jobs.interchange): ``job``, rescore-nbest's
    NbestJob arguments; returns the report or None."""
    from rescore.jobs.interchange import InterchangeJob, parse_score_weights, rescore_table

    return rescore_table(InterchangeJob(**job, fmt=other["fmt"], manifest=other["manifest"],
                                        score_weights=parse_score_weights(other["score_weights"])))


@command()
@click.argument("source", type=click.Path(exists=True))
@click.argument("target", type=click.Path())
@click.option("--from", "src_format", type=click.Choice(("auto", *FORMATS)), default="auto",
              help="What SOURCE is (auto: a dir is a Kaldi N-best dir, a file an interchange file).")
@click.option("--to", "dst_format", type=click.Choice(("interchange", "kaldi")), default="interchange",
              help="What to write: an interchange file, or a Kaldi N-best dir (from an interchange file with "
                   "columns ac, graph, nolm).")
@click.option("--words-txt", type=click.Path(dir_okay=False),
              help="Symbol table: reads a Kaldi dir's 'words' ids (default: the one beside the dir); with --to "
                   "kaldi also writes 'words' (ids) beside words_text.")
@click.option("--manifest", type=click.Path(dir_okay=False), help="With --from nemo: the decoded manifest.")
@click.option("--no-trailing-space", is_flag=True,
              help="With --to kaldi: no line ends in a space (as hand-made archives); by default words, acwt and "
                   "lmwt.* end in one as Kaldi's binaries write them (words_text never does).")
@verbose_option
def convert(source, target, src_format, dst_format, words_txt, manifest, no_trailing_space, verbose):
    """Convert the N-best list SOURCE into TARGET: a Kaldi N-best dir (columns ac = acwt, graph =
    lmwt.withlm, nolm = lmwt.nolm), an ESPnet decode dir, an icefall dump or a NeMo beam-search TSV
    into an interchange file; or an interchange file into a Kaldi N-best dir. Kaldi -> interchange
    -> Kaldi gives the same bytes for text archives."""
    setup_logging(verbose)
    from rescore.errors import OptionError
    from rescore.io.ecosystems import input_format, table_to_kaldi
    from rescore.nbest.tables import load_table
    from rescore.io.interchange import write_nbest_table
    from rescore.io.outputs import check_not_input, check_output_dir

    fmt = input_format(source, src_format)
    if manifest is not None and fmt != "nemo":
        raise OptionError("--from nemo (the manifest is NeMo's)", option="--manifest", got=manifest)
    inputs = [source, manifest, words_txt]
    if fmt == "kaldi" and words_txt is None:
        from rescore.nbest.sets import default_words_txt

        inputs.append(default_words_txt(Path(source)))
    if dst_format == "kaldi":  # (every name it may write, checked before reading)
        check_output_dir(target, "TARGET", names=KALDI_ARCHIVES, inputs=inputs)
    else:
        check_not_input(Path(target), inputs, "TARGET")
    table = load_table(source, fmt, manifest, words_txt if fmt == "kaldi" else None)
    if dst_format == "kaldi":
        written = table_to_kaldi(table, target, words_txt, kaldi_style=not no_trailing_space)
        click.echo(f"wrote {len(written)} archives ({table.num_hyps} hypotheses) into {target}", err=True)
    else:
        write_nbest_table(target, table)
        click.echo(f"wrote {target}: {len(table.utterances)} utterances, {table.num_hyps} hypotheses, "
                   f"columns {', '.join(table.columns)}", err=True)


attach(convert, "rescore-convert-nbest")  # the example at the end of --help (rescore/cli/examples.py)


if __name__ == "__main__":
    convert()
