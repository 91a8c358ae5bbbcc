"""Other recognizers' N-best lists in rescore: rescore-nbest's ``--format`` options (one
decorator, ``@interchange_options``, and the call that runs such a job), and the converter
command ``rescore-convert-nbest`` (Kaldi N-best dir <-> interchange file; ESPnet, icefall,
NeMo -> interchange file; any of them -> ESPnet, NeMo or icefall result files).
docs/ecosystems.md has the commands for each recognizer."""

from __future__ import annotations

from pathlib import Path

import click

from rescore.cli.common import command, setup_logging, verbose_option
from rescore.cli.options import Count, Need
from rescore.cli.examples import attach
from rescore.errors import OptionError

# rescore.io.ecosystems.FORMATS and rescore.io.results.WRITE_FORMATS, NEMO_TEXT_PROCESSING and
# ESPNET_TOKEN_TYPES (kept here so that --help imports nothing)
FORMATS = ("kaldi", "interchange", "espnet", "icefall", "nemo")
WRITE_FORMATS = ("espnet", "nemo", "icefall")
NEMO_TEXT_PROCESSING = ("lowercase", "rm_punctuation", "separate_punctuation")
ESPNET_TOKEN_TYPES = ("bpe", "char", "word")
MAX_BEAM = 100_000  # a beam width (its file holds W hypotheses per utterance)
MAX_SPEAKERS = 1_000  # speakers of a multi-speaker ESPnet decode

# the readers' own options (rescore.io.ecosystems.ReadOptions), of rescore-nbest and rescore-convert-nbest
_READ_OPTIONS = [
    click.option("--nemo-beam", type=Count(1, MAX_BEAM), metavar="W",
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
    click.option("--speaker", type=Count(1, MAX_SPEAKERS), metavar="K",
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
    click.option("--icefall-suffix", metavar="SUFFIX",
                 help="With --write-format icefall: name the files as a current zipformer decode.py names them, "
                      "with its params.suffix: recogs-SET-SUFFIX.txt, errs-SET-SUFFIX.txt, "
                      "wer-summary-SET-SUFFIX.txt."),
]


def read_options(options: dict):
    """Pop the readers' options; a rescore.io.ecosystems.ReadOptions (whether they are for the
    input's format is a declared requirement: format_needs)."""
    from rescore.io.ecosystems import ReadOptions

    o = {k: options.pop(k) for k in ("nemo_beam", "nemo_text_processing", "nemo_punctuation_marks",
                                     "espnet_tokens", "speaker")}
    steps = tuple(x.strip() for x in (o["nemo_text_processing"] or "").split(",") if x.strip())
    bad = [x for x in steps if x not in NEMO_TEXT_PROCESSING]
    if bad:
        raise click.BadParameter(f"steps among {', '.join(NEMO_TEXT_PROCESSING)}, got {bad[0]!r}",
                                 param_hint="--nemo-text-processing")
    return ReadOptions(nemo_beam=o["nemo_beam"], nemo_text_processing=steps,
                       nemo_punctuation_marks=o["nemo_punctuation_marks"], espnet_tokens=o["espnet_tokens"],
                       speaker=o["speaker"])


def _format(p, path: str, fmt: str) -> str:
    """The input's format: the parameter ``fmt``, or what 'auto' makes of the parameter ``path``."""
    from rescore.io.ecosystems import input_format  # (only when an option that needs it is given)

    return input_format(p[path], p[fmt])


def format_needs(path: str, fmt: str) -> dict:
    """What the readers' options need to act (rescore.cli.options.Need, by option): the input
    format they are for; ``path``, ``fmt``: the command's parameters of the input and its
    format option."""
    def reads(owner: str, what: str):
        return Need(lambda p: _format(p, path, fmt) == owner, f"--{'format' if fmt == 'input_format' else 'from'} "
                    f"{owner} ({what})")

    return {"--nemo-beam": reads("nemo", "NeMo's predictions file"),
            "--nemo-text-processing": reads("nemo", "NeMo's manifest"),
            "--nemo-punctuation-marks": Need(lambda p: bool(p["nemo_text_processing"]),
                                             "--nemo-text-processing (the punctuation it strips)"),
            "--espnet-tokens": reads("espnet", "ESPnet's decode dir"),
            "--speaker": reads("espnet", "ESPnet's multi-speaker decode dir")}


def other_format(p) -> bool:
    return _format(p, "nbest_dir", "input_format") != "kaldi"


# What rescore-nbest's other-format options need (rescore.cli.options.Need, by option).
NBEST_NEEDS = {
    **format_needs("nbest_dir", "input_format"),
    "--score-weight": Need(other_format, "an input other than a Kaldi dir (--format; a Kaldi dir's costs are "
                                          "weighted by --inv-acwt and --weight)"),
    "--write-format": Need(other_format, "an input other than a Kaldi dir (--format)"),
    "--manifest": Need(lambda p: "nemo" in (_format(p, "nbest_dir", "input_format"), p["write_format"]),
                       "--format nemo or --write-format nemo (the manifest is NeMo's)"),
    "--icefall-suffix": Need(lambda p: p["write_format"] == "icefall", "--write-format icefall (the files it names)"),
}


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
             "write_format": options.pop("write_format"), "icefall_suffix": options.pop("icefall_suffix"),
             "read_options": read_options(options)}
    return other if other["fmt"] != "kaldi" else None


def run_other_format(other: dict, job: dict):
    """Run rescore-nbest on a non-Kaldi input (rescore.jobs.interchange): ``job``, rescore-nbest's
    NbestJob arguments; returns the report or None."""
    from rescore.jobs.interchange import InterchangeJob, parse_score_weights, rescore_table

    return rescore_table(InterchangeJob(**job, fmt=other["fmt"], manifest=other["manifest"],
                                        score_weights=parse_score_weights(other["score_weights"]),
                                        read_options=other["read_options"], write_format=other["write_format"],
                                        icefall_suffix=other["icefall_suffix"]))


def _read_options(f):
    for option in reversed(_READ_OPTIONS):
        f = option(f)
    return f


def _convert_format(p) -> str:
    return _format(p, "source", "src_format")


# What rescore-convert-nbest's options need (rescore.cli.options.Need) and their --help groups.
CONVERT_NEEDS = {
    **format_needs("source", "src_format"),
    "--manifest": Need(lambda p: "nemo" in (_convert_format(p), p["dst_format"]),
                       "--from nemo or --to nemo (the manifest is NeMo's)"),
    "--words-txt": Need(lambda p: "kaldi" in (_convert_format(p), p["dst_format"]),
                        "a Kaldi N-best dir as SOURCE or --to kaldi (the symbol table of its 'words' ids)"),
    "--no-trailing-space": Need(lambda p: p["dst_format"] == "kaldi", "--to kaldi (the line ends of its archives)"),
    "--data-dir": Need(lambda p: p["dst_format"] == "icefall", "--to icefall (the references of its errs and "
                                                                "wer-summary files)"),
    "--icefall-suffix": Need(lambda p: p["dst_format"] == "icefall", "--to icefall (the files it names)"),
}
CONVERT_GROUPS = {
    "Input": ["--from", "--words-txt", "--manifest", "--data-dir"],
    "Output": ["--to", "--no-trailing-space", "--icefall-suffix"],
    "Other formats": ["--nemo-beam", "--nemo-text-processing", "--nemo-punctuation-marks", "--espnet-tokens",
                      "--speaker"],
}


@command(groups=CONVERT_GROUPS, needs=CONVERT_NEEDS)
@click.argument("source", type=click.Path(exists=True))
@click.argument("target", type=click.Path())
@click.option("--from", "src_format", type=click.Choice(("auto", *FORMATS)), default="auto",
              help="What SOURCE is (auto: a dir is a Kaldi N-best dir, a file an interchange file).")
@click.option("--to", "dst_format", type=click.Choice(("interchange", "kaldi", *WRITE_FORMATS)),
              default="interchange",
              help="What to write: an interchange file; a Kaldi N-best dir (from an interchange file with "
                   "columns ac, graph, nolm); or, into the dir TARGET, the 1-best (by the column 'total', e.g. of "
                   "rescore-nbest's scores.tsv, else by rescore-nbest's total of the columns with its defaults: "
                   "Kaldi's ac/10 + graph, others summed) as ESPnet's decode dir holds it "
                   "(text, score, 1best_recog/), as NeMo's files (with --manifest: preds_rescored.tsv, "
                   "manifest_rescored.json) or as icefall's recogs/errs files (with references).")
@click.option("--words-txt", type=click.Path(dir_okay=False),
              help="Symbol table: reads a Kaldi dir's 'words' ids (default: the one beside the dir); with --to "
                   "kaldi also writes 'words' (ids) beside words_text.")
@click.option("--manifest", type=click.Path(dir_okay=False),
              help="With --from nemo or --to nemo: the decoded manifest.")
@_read_options
@click.option("--data-dir", type=click.Path(file_okay=False),
              help="With --to icefall: a Kaldi data dir whose 'text' holds the references (for an input without "
                   "its own, e.g. a scores.tsv); its name is the test set's in the file names.")
@click.option("--icefall-suffix", metavar="SUFFIX",
              help="With --to icefall: name the files as a current zipformer decode.py names them, with its "
                   "params.suffix: recogs-SET-SUFFIX.txt, errs-SET-SUFFIX.txt, wer-summary-SET-SUFFIX.txt.")
@click.option("--no-trailing-space", is_flag=True,
              help="With --to kaldi: no line ends in a space (as hand-made archives); by default words, acwt and "
                   "lmwt.* end in one as Kaldi's binaries write them (words_text never does).")
@verbose_option
def convert(source, target, src_format, dst_format, words_txt, manifest, data_dir, icefall_suffix, no_trailing_space,
            verbose, **options):
    """Convert the N-best list SOURCE into TARGET: a Kaldi N-best dir (columns ac = acwt, graph =
    lmwt.withlm, nolm = lmwt.nolm), an ESPnet decode dir, an icefall dump or a NeMo beam-search TSV
    into an interchange file; or an interchange file into a Kaldi N-best dir. Kaldi -> interchange
    -> Kaldi gives the same bytes for text archives. A TARGET dir (new, empty or an earlier output)
    is written as one set, with a manifest.json that says whether it is complete."""
    setup_logging(verbose)
    from rescore.io.ecosystems import input_format, table_to_kaldi
    from rescore.nbest.tables import load_table
    from rescore.io.interchange import write_nbest_table
    from rescore.io.outdir import OutputSet
    from rescore.io.outputs import check_not_input
    from rescore.io.results import files_for, icefall_test_set, names_for, write_files
    from rescore.nbest.tables import ranking_costs

    fmt = input_format(source, src_format)
    if icefall_suffix is not None and (not icefall_suffix or "/" in icefall_suffix):
        raise OptionError("a file name part (not empty, no '/')", option="--icefall-suffix", got=icefall_suffix)
    read = read_options(options)
    inputs = [source, manifest, words_txt, data_dir]
    if fmt == "kaldi" and words_txt is None:
        from rescore.nbest.sets import default_words_txt

        inputs.append(default_words_txt(Path(source)))
    inputs = [p for p in inputs if p]
    test_set = Path(data_dir).name if data_dir is not None else icefall_test_set(source)
    out = None
    if dst_format == "kaldi":  # a dir written as one set (every name it may write, checked before reading)
        names = list(KALDI_ARCHIVES if words_txt is not None else KALDI_ARCHIVES[:-1])
        out = OutputSet(target, names, inputs, known=KALDI_ARCHIVES, option="TARGET")
    elif dst_format in WRITE_FORMATS:
        names = names_for(dst_format, test_set, speaker=read.speaker, suffix=icefall_suffix)
        out = OutputSet(target, names, inputs, known=names, option="TARGET")
    else:
        check_not_input(Path(target), inputs, "TARGET")
    if out is not None:
        out.check()
    table = load_table(source, fmt, manifest if fmt == "nemo" else None, words_txt if fmt == "kaldi" else None,
                       read)
    if dst_format in WRITE_FORMATS:
        refs = None
        if data_dir is not None:
            from rescore.io.kaldi import read_data_dir

            refs = read_data_dir(data_dir).text
            if refs is None:
                raise OptionError("a data dir with a 'text' (the references)", option="--data-dir", got=data_dir)
        files = files_for(dst_format, table, ranking_costs(table), manifest=manifest, refs=refs, test_set=test_set,
                          speaker=read.speaker, suffix=icefall_suffix)
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
