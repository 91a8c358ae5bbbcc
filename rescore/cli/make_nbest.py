"""rescore-make-nbest: decode a Kaldi data dir with PocketSphinx into a Kaldi-style N-best dir."""

from __future__ import annotations

import logging

import click

from rescore.cli.common import command, errors_to_exit, setup_logging, verbose_option
from rescore.cli.examples import attach
from rescore.cli.options import MAX_JOBS, MAX_STEPS, Count, Real
from rescore.jobs.make_nbest import DecoderSettings, MakeNbestJob

log = logging.getLogger("rescore-make-nbest")


@command(groups={"Input": ["--hmm", "--dict", "--lm"], "Weights": ["--lw", "--fwdflatlw", "--bestpathlw", "--wip"],
                 "Output": ["--nbest"], "Performance": ["--nj", "--maxhmmpf"]})
@click.argument("data_dir", type=click.Path(file_okay=False, exists=True))
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--nbest", "-n", type=Count(1, 10000), default=100,
              help="Distinct word sequences per utterance (at most).")
@click.option("--nj", type=Count(1, MAX_JOBS), default=2, help="Decoding processes.")
@click.option("--lw", type=Real(0.0, low_open=True), default=6.5, help="PocketSphinx fwdtree LM weight.")
@click.option("--fwdflatlw", type=Real(0.0, low_open=True), default=8.5, help="PocketSphinx fwdflat LM weight.")
@click.option("--bestpathlw", type=Real(0.0, low_open=True), default=9.5,
              help="LM weight of the lattice search; the N-best's inv_acwt.")
@click.option("--wip", type=Real(0.0, low_open=True), default=0.65, help="PocketSphinx word insertion probability.")
@click.option("--maxhmmpf", type=Count(-1, MAX_STEPS), default=10000,
              help="PocketSphinx's cap on active HMMs per frame (speed); -1: none.")
@click.option("--hmm", type=click.Path(file_okay=False, exists=True),
              help="Acoustic model dir (default: PocketSphinx's en-us).")
@click.option("--dict", "dict_", type=click.Path(dir_okay=False, exists=True),
              help="Pronunciation dictionary (default: cmudict-en-us.dict).")
@click.option("--lm", type=click.Path(dir_okay=False, exists=True),
              help="First-pass n-gram LM (default: en-us.lm.bin).")
@verbose_option
def main(data_dir, out_dir, nbest, nj, lw, fwdflatlw, bestpathlw, wip, maxhmmpf, hmm, dict_, lm, verbose):
    """Decode DATA_DIR (wav.scp of 16 kHz 16-bit mono WAVs, + segments) with PocketSphinx and
    write OUT_DIR: words_text, words, acwt, lmwt.withlm, lmwt.nolm, words.txt (Kaldi text
    archives, keys <utt>-<rank>), ps_1best.txt and decode.json.  Costs are natural-log
    costs; cost = acwt / bestpathlw + lmwt.withlm ranks the entries as PocketSphinx does
    (so rescore with --inv-acwt BESTPATHLW --wip 0).  words.txt holds the words PocketSphinx can
    recognize (those of --dict that --lm knows, alternative pronunciations like word(2)
    folded, written as the hypotheses are) and the words of DATA_DIR/text: rescore-nbest
    --oov-penalty auto counts those outside the NN LM's vocabulary."""
    setup_logging(verbose)
    with errors_to_exit():
        settings = DecoderSettings(lw=lw, fwdflatlw=fwdflatlw, bestpathlw=bestpathlw, wip=wip,
                                   maxhmmpf=maxhmmpf, hmm=hmm, dict=dict_, lm=lm)
        summary = MakeNbestJob(data_dir, out_dir, settings, nbest=nbest, nj=nj).run()
    click.echo(summary)


attach(main, "rescore-make-nbest")  # the example at the end of --help (rescore/cli/examples.py)


if __name__ == "__main__":
    main()
