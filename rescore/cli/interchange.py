"""Other recognizers' N-best lists in rescore: rescore-nbest's ``--format`` options (one
decorator, ``@interchange_options``, and the call that runs such a job), and the converter
command ``rescore-convert-nbest`` (Kaldi N-best dir <-> interchange file; ESPnet, icefall,
NeMo -> interchange file; any of them -> ESPnet, NeMo or icefall result files).
docs/ecosystems.md has the commands for each recognizer."""

from __future__ import annotations

from pathlib import Path

import click

from rescore.cli.common import command, setup_logging, verbose_option
from rescore.cli.examples import attach

# rescore.io.ecosystems.FORMATS and rescore.io.results.WRITE_FORMATS, NEMO_TEXT_PROCESSING and
# ESPNET_TOKEN_TYPES (kept here so that --help imports nothing)
FORMATS = ("kaldi", "interchange", "espnet", "icefall", "nemo")
WRITE_FORMATS = ("espnet", "nemo", "icefall")
NEMO_TEXT_PROCESSING = ("lowercase", "rm_punctuation", "separate_punctuation")
ESPNET_TOKEN_TYPES = ("bpe", "char", "word")

# the readers' own options (rescore.io.ecosystems.ReadOptions), of rescore-nbest and rescore-convert-nbest
_READ_OPTIONS = [
    click.option("--nemo-beam", type=click.IntRange(min=1), metavar="W",
                 help="With --format nemo: the beam width of a predictions file whose name does not give it "
                      "(NeMo's names: preds_out_width{W}_alpha*_beta*.tsv, preds_out_{strategy}_bw{W}*.tsv)."),
    click.option("--nemo-text-processing", metavar="STEPS",
                 help="With --format nemo: normalise the manifest's references as NeMo's beam-search script "
                      "normalised its predictions (its text_processing config): comma-separated among "
                      f"{', '.join(NEMO_TEXT_PROCESSING)} (applied in that order), e.g. lowercase,rm_punctuation."),
    click.option("--nemo-punctuation-marks", default=".,?", show_default=True,
                 help="With --nemo-text-processing: text_processing.punctuation_marks."),
    click.option("--espnet-tokens", type=click.Choice(ESPNET_TOKEN_TYPES),
                 help="With --format espnet: take the words from 'token' (ESPnet writes no 'text' without a "
                      "tokenizer), joined as ESPnet's tokenizer of that --token_type joins them: bpe ('\u2581' "
                      "starts a word), char ('<space>' between words), word."),
    click.option("--speaker", type=click.IntRange(min=1), metavar="K",
                 help="With --format espnet: speaker K of a multi-speaker decode (<n>best_recog_spk<K>/ "
                      "folders); one run per speaker."),
]
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
    *_READ_OPTIONS,
    click.option("--write-format", type=click.Choice(WRITE_FORMATS),
                 help="Also write the result in that recognizer's own files into OUT_DIR, for its scoring "
                      "scripts: espnet: text, score, 1best_recog/{text,score}; nemo (with --manifest): "
                      "preds_rescored.tsv, manifest_rescored.json (pred_text); icefall (references needed): "
                      "recogs-SET-rescored.txt, errs-SET-rescored.txt, wer-summary-SET.txt."),
]


def read_options(options: dict, fmt: str):
    """Pop the readers' options; a rescore.io.ecosystems.ReadOptions (a UsageError for one that
    is not for ``fmt``)."""
    from rescore.io.ecosystems import ReadOptions

    o = {k: options.pop(k) for k in ("nemo_beam", "nemo_text_processing", "nemo_punctuation_marks",
                                     "espnet_tokens", "speaker")}
    for k, owner in (("nemo_beam", "nemo"), ("nemo_text_processing", "nemo"), ("espnet_tokens", "espnet"),
                     ("speaker", "espnet")):
        if o[k] is not None and fmt != owner:
            raise click.UsageError(f"--{k.replace('_', '-')} is for --format {owner} (the input is {fmt})")
    steps = tuple(x.strip() for x in (o["nemo_text_processing"] or "").split(",") if x.strip())
    bad = [x for x in steps if x not in NEMO_TEXT_PROCESSING]
    if bad:
        raise click.BadParameter(f"steps among {', '.join(NEMO_TEXT_PROCESSING)}, got {bad[0]!r}",
                                 param_hint="--nemo-text-processing")
    return ReadOptions(nemo_beam=o["nemo_beam"], nemo_text_processing=steps,
                       nemo_punctuation_marks=o["nemo_punctuation_marks"], espnet_tokens=o["espnet_tokens"],
                       speaker=o["speaker"])


def interchange_options(f):
    for option in reversed(_OPTIONS):
        f = option(f)
    return f


def pop_other_format(nbest_dir, options: dict):
    """Pop this module's options from rescore-nbest's keyword arguments; for an input that is not
    a Kaldi dir, return them (for run_other_format), else None."""
    from rescore.io.ecosystems import input_format

    fmt = input_format(nbest_dir, options.pop("input_format"))
    other = {"fmt": fmt, "score_weights": options.pop("score_weights"), "manifest": options.pop("manifest"),
             "write_format": options.pop("write_format"), "read_options": read_options(options, fmt)}
    if other["fmt"] != "kaldi":
        return other
    if other["score_weights"] or other["manifest"] or other["write_format"]:
        raise click.UsageError("--score-weight, --manifest and --write-format are for inputs other than a Kaldi "
                               "dir (--format)")
    return None


def run_other_format(other: dict, job: dict):
    """Run rescore-nbest on a non-Kaldi input (rescore.jobs.interchange): ``job``, rescore-nbest's
    NbestJob arguments; returns the report or None."""
    from rescore.jobs.interchange import InterchangeJob, parse_score_weights, rescore_table

    return rescore_table(InterchangeJob(**job, fmt=other["fmt"], manifest=other["manifest"],
                                        score_weights=parse_score_weights(other["score_weights"]),
                                        read_options=other["read_options"], write_format=other["write_format"]))


def _read_options(f):
    for option in reversed(_READ_OPTIONS):
        f = option(f)
    return f


@command()
@click.argument("source", type=click.Path(exists=True))
@click.argument("target", type=click.Path())
@click.option("--from", "src_format", type=click.Choice(("auto", *FORMATS)), default="auto",
              help="What SOURCE is (auto: a dir is a Kaldi N-best dir, a file an interchange file).")
@click.option("--to", "dst_format", type=click.Choice(("interchange", "kaldi", *WRITE_FORMATS)),
              default="interchange",
              help="What to write: an interchange file; a Kaldi N-best dir (from an interchange file with "
                   "columns ac, graph, nolm); or, into the dir TARGET, the 1-best (by the column 'total', e.g. of "
                   "rescore-nbest's scores.tsv, else the sum of the columns) as ESPnet's decode dir holds it "
                   "(text, score, 1best_recog/), as NeMo's files (with --manifest: preds_rescored.tsv, "
                   "manifest_rescored.json) or as icefall's recogs/errs files (with references).")
@click.option("--words-txt", type=click.Path(dir_okay=False),
              help="Symbol table: reads a Kaldi dir's 'words' ids (default: the one beside the dir); with --to "
                   "kaldi also writes 'words' (ids) beside words_text.")
@click.option("--manifest", type=click.Path(dir_okay=False),
              help="With --from nemo or --to nemo: the decoded manifest.")
@_read_options
@click.option("--no-trailing-space", is_flag=True,
              help="With --to kaldi: no line ends in a space (as hand-made archives); by default words, acwt and "
                   "lmwt.* end in one as Kaldi's binaries write them (words_text never does).")
@verbose_option
def convert(source, target, src_format, dst_format, words_txt, manifest, no_trailing_space, verbose, **options):
    """Convert the N-best list SOURCE into TARGET: a Kaldi N-best dir (columns ac = acwt, graph =
    lmwt.withlm, nolm = lmwt.nolm), an ESPnet decode dir, an icefall dump or a NeMo beam-search TSV
    into an interchange file; or an interchange file into a Kaldi N-best dir. Kaldi -> interchange
    -> Kaldi gives the same bytes for text archives. A TARGET dir (new, empty or an earlier output)
    is written as one set, with a manifest.json that says whether it is complete."""
    setup_logging(verbose)
    from rescore.errors import OptionError
    from rescore.io.ecosystems import input_format, table_to_kaldi
    from rescore.nbest.tables import load_table
    from rescore.io.interchange import write_nbest_table
    from rescore.io.outdir import OutputSet
    from rescore.io.outputs import check_not_input
    from rescore.io.results import files_for, icefall_test_set, names_for, ranking_costs, write_files

    fmt = input_format(source, src_format)
    if manifest is not None and "nemo" not in (fmt, dst_format):
        raise OptionError("--from nemo or --to nemo (the manifest is NeMo's)", option="--manifest", got=manifest)
    inputs = [source, manifest, words_txt]
    if fmt == "kaldi" and words_txt is None:
        from rescore.nbest.sets import default_words_txt

        inputs.append(default_words_txt(Path(source)))
    inputs = [p for p in inputs if p]
    out = None
    if dst_format == "kaldi":  # a dir written as one set (every name it may write, checked before reading)
        names = list(KALDI_ARCHIVES if words_txt is not None else KALDI_ARCHIVES[:-1])
        out = OutputSet(target, names, inputs, known=KALDI_ARCHIVES, option="TARGET")
    elif dst_format in WRITE_FORMATS:
        names = names_for(dst_format, icefall_test_set(source))
        out = OutputSet(target, names, inputs, known=names, option="TARGET")
    else:
        check_not_input(Path(target), inputs, "TARGET")
    if out is not None:
        out.check()
    table = load_table(source, fmt, manifest if fmt == "nemo" else None, words_txt if fmt == "kaldi" else None,
                       read_options(options, fmt))
    if dst_format in WRITE_FORMATS:
        files = files_for(dst_format, table, ranking_costs(table), manifest=manifest)
        with out:
            written = write_files(out, files)
        click.echo(f"wrote {', '.join(written)} into {target} ({len(table.utterances)} utterances)", err=True)
    elif dst_format == "kaldi":
        with out:
            written = table_to_kaldi(table, target, words_txt, kaldi_style=not no_trailing_space, place=out.path)
        click.echo(f"wrote {len(written)} archives ({table.num_hyps} hypotheses) into {target}", err=True)
    else:
        write_nbest_table(target, table)
        click.echo(f"wrote {target}: {len(table.utterances)} utterances, {table.num_hyps} hypotheses, "
                   f"columns {', '.join(table.columns)}", err=True)


attach(convert, "rescore-convert-nbest")  # the example at the end of --help (rescore/cli/examples.py)


if __name__ == "__main__":
    convert()
