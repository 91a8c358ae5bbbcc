"""rescore-nbest: interpolate an N-best dir's costs (with NN LM costs when given), pick the
1-best per utterance, write Kaldi archives and a WER report."""

from __future__ import annotations

import logging
import sys

import click
from click.core import ParameterSource

from rescore.cli.common import errors_to_exit, setup_logging, verbose_option
from rescore.cli.engine_options import apply_engine_options, engine_options  # issue 4

log = logging.getLogger("rescore-nbest")


@click.command(context_settings={"show_default": True, "help_option_names": ["-h", "--help"]})
@click.argument("nbest_dir", type=click.Path(file_okay=False))
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--data-dir", type=click.Path(file_okay=False), help="Kaldi data dir: text (references), segments/utt2spk (conversations).")
@click.option("--words-txt", type=click.Path(dir_okay=False), help="Symbol table for 'words' ids; when not given, NBEST_DIR/words.txt, NBEST_DIR/lang/words.txt and NBEST_DIR/../lang/words.txt are tried.")
@click.option("--nn-costs", type=click.Path(dir_okay=False), help="NN LM costs per hypothesis, lmwt.nn format (key c1 ... c_{n+1}, or key total).")
@click.option("--params", "params_file", type=click.Path(dir_okay=False), help="JSON with weight, inv_acwt, wip (as rescore-tune writes); options given on the command line win.")
@click.option("--weight", type=float, default=0.0, help="NN LM weight w: cost = ac/inv_acwt + nolm + (1-w)(withlm-nolm) + w*nn + wip*|h|.")
@click.option("--inv-acwt", type=float, default=10.0, help="Inverse acoustic scale (Kaldi's LMWT).")
@click.option("--wip", type=float, default=0.0, help="Word insertion penalty (cost per word).")
@click.option("--train-text", type=click.Path(dir_okay=False), help="LM training text: adds the per rare-word bucket table and buckets.png.")
@click.option("--buckets", "num_buckets", type=int, default=10, help="Number of rare-word buckets.")
@click.option("--allow-missing", is_flag=True, help="References without an N-best are dropped with a warning instead of an error.")
@engine_options  # --model ... (issue 4)
@verbose_option
@click.pass_context
def main(ctx, nbest_dir, out_dir, data_dir, words_txt, nn_costs, params_file, weight, inv_acwt, wip, train_text,
         num_buckets, allow_missing, verbose, **engine_kw):
    """Rescore NBEST_DIR (Kaldi layout: words/words_text, acwt, lmwt.withlm, lmwt.nolm) into
    OUT_DIR: lmwt.interp (new graph costs, Kaldi text archive for linear-to-nbest), text
    (1-best words) and, with references, report.json and report.txt (printed)."""
    setup_logging(verbose)
    from rescore.combine import Params, format_report, rescore_nbest
    from rescore.io.kaldi import read_nn_costs
    from rescore.metrics import count_words
    from rescore.nbest import load_nbest_dir

    with errors_to_exit():
        params = Params.from_json(params_file) if params_file else Params()
        for name, value in (("weight", weight), ("inv_acwt", inv_acwt), ("wip", wip)):
            if params_file is None or ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE:
                setattr(params, name, value)
        nbest = load_nbest_dir(nbest_dir, data_dir, words_txt, allow_missing=allow_missing)
        # --split and --model (issue 4): score with the NN LM, lmwt.nn into OUT_DIR
        train_counts = count_words(train_text) if train_text else None
        nbest, costs, nn_costs = apply_engine_options(nbest, params, out_dir, nn_costs,
                                                      train_counts=train_counts, **engine_kw)
        if costs is None:
            costs = read_nn_costs(nn_costs) if nn_costs else None
        report = rescore_nbest(nbest, out_dir, params=params, nn_costs=costs, nn_source=nn_costs,
                               train_counts=train_counts, num_buckets=num_buckets)
    if report is not None:
        click.echo(format_report(report))
    log.info("outputs in %s", out_dir)


if __name__ == "__main__":
    main()
