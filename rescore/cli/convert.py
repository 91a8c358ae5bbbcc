"""rescore-convert-nbest: an N-best list from one format into another (rescore.formats.registry):
a Kaldi N-best dir <-> an N-best TSV file; ESPnet, icefall, NeMo -> a TSV file; any of them ->
ESPnet, NeMo or icefall result files. docs/ecosystems.md has the commands for each recognizer."""

from __future__ import annotations

from pathlib import Path

import click

from rescore.cli.common import command, setup_logging, verbose_option
from rescore.cli.examples import attach
from rescore.cli.formats import AUTO, FORMAT_CHOICES, ALIAS_NOTE, format_needs, read_option_decorator, read_options
from rescore.cli.options import Need
from rescore.errors import OptionError
from rescore.formats.base import WriteArgs
from rescore.formats.kaldi import KALDI_ARCHIVES, default_words_txt
from rescore.formats.registry import ALIASES, OPTIONS, RESULT_FORMATS, input_format


def _convert_format(p) -> str:
    return input_format(p["source"], p["src_format"])


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
    "Other formats": [o.flag for o in OPTIONS],
}


@command(groups=CONVERT_GROUPS, needs=CONVERT_NEEDS)
@click.argument("source", type=click.Path(exists=True))
@click.argument("target", type=click.Path())
@click.option("--from", "src_format", type=click.Choice(FORMAT_CHOICES), default="auto",
              help=f"What SOURCE is ({AUTO}; {ALIAS_NOTE}).")
@click.option("--to", "dst_format", type=click.Choice(("tsv", "kaldi", *RESULT_FORMATS, *ALIASES)),
              default="tsv",
              help=f"What to write ({ALIAS_NOTE}): a TSV file; a Kaldi N-best dir (from a TSV file with "
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
@read_option_decorator
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
    into an N-best TSV file; or a TSV file into a Kaldi N-best dir. Kaldi -> TSV -> Kaldi gives the
    same bytes for text archives. A TARGET dir (new, empty or an earlier output)
    is written as one set, with a manifest.json that says whether it is complete."""
    setup_logging(verbose)
    from rescore.formats.icefall import icefall_test_set
    from rescore.formats.kaldi import table_to_kaldi
    from rescore.formats.registry import canonical, result_files, result_names, write_files
    from rescore.formats.tsv import write_nbest_table
    from rescore.io.outdir import OutputSet
    from rescore.io.outputs import check_not_input
    from rescore.nbest.tables import load_table, ranking_costs

    fmt = input_format(source, src_format)
    dst_format = canonical(dst_format)
    if icefall_suffix is not None and (not icefall_suffix or "/" in icefall_suffix):
        raise OptionError("a file name part (not empty, no '/')", option="--icefall-suffix", got=icefall_suffix)
    read = read_options(options)
    inputs = [source, manifest, words_txt, data_dir]
    if fmt == "kaldi" and words_txt is None:
        inputs.append(default_words_txt(source))
    inputs = [p for p in inputs if p]
    test_set = Path(data_dir).name if data_dir is not None else icefall_test_set(source)
    out = None
    if dst_format == "kaldi":  # a dir written as one set (every name it may write, checked before reading)
        names = list(KALDI_ARCHIVES if words_txt is not None else KALDI_ARCHIVES[:-1])
        out = OutputSet(target, names, inputs, known=KALDI_ARCHIVES, option="TARGET")
    elif dst_format in RESULT_FORMATS:
        names = result_names(dst_format, WriteArgs(test_set=test_set, speaker=read.speaker, suffix=icefall_suffix))
        out = OutputSet(target, names, inputs, known=names, option="TARGET")
    else:
        check_not_input(Path(target), inputs, "TARGET")
    if out is not None:
        out.check()
    table = load_table(source, fmt, manifest if fmt == "nemo" else None, words_txt if fmt == "kaldi" else None,
                       read)
    if dst_format in RESULT_FORMATS:
        refs = None
        if data_dir is not None:
            from rescore.io.kaldi import read_data_dir

            refs = read_data_dir(data_dir).text
            if refs is None:
                raise OptionError("a data dir with a 'text' (the references)", option="--data-dir", got=data_dir)
        files = result_files(dst_format, table, ranking_costs(table), WriteArgs(
            manifest=manifest, refs=refs, test_set=test_set, speaker=read.speaker, suffix=icefall_suffix))
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
