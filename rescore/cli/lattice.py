"""rescore-lattice: the two Python steps of lattice rescoring by path cover (rescore.nbest.lattice),
between the Kaldi binaries of recipes/steps/lmrescore_lattice.sh.

    rescore-lattice cover LATS NBEST      path cover of each lattice -> N-best archive
    (old-LM removal, nbest-to-linear, rescore-nbest: the N-best step, stages 2 to 5)
    rescore-lattice apply LATS ARCHIVES OUT --weight W
                                          arc NN costs from the scored paths -> lattices
    rescore-lattice tune --nbest-dir D --data-dir D --words-txt W W1=DIR1 W2=DIR2 ...
                                          the weight, inv-acwt and penalty by WER on rescored lattices

Lattices are Kaldi text archives of CompactLattices (``lattice-copy ark:in ark,t:-``), gzipped or
not; '-' reads stdin or writes stdout. Output files are written whole or not at all; the archives
`apply` reads must be those of `cover` on the same lattices with the same scales (checked).
"""

from __future__ import annotations

import logging

import click

from rescore.cli.common import Command, Group, errors_to_exit, setup_logging, verbose_option, version_option
from rescore.cli.examples import attach
from rescore.cli.options import Grid, Real
from rescore.jobs.lattice import ApplyJob, CoverJob, LatticeTuneJob

log = logging.getLogger("rescore-lattice")

class WeightDir(click.ParamType):
    """W=DIR: a weight in [0, 1] and the decode dir rescored with it -> (weight, dir)."""

    name = "W=DIR"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        w, sep, d = value.partition("=")
        if not sep or not d:
            self.fail(f"{value!r}: expected W=DIR (a weight, '=', a decode dir)", param, ctx)
        try:
            return Real(0.0, 1.0).convert(w, param, ctx), d
        except click.BadParameter as e:
            self.fail(f"{value!r}: the weight: {e.message}", param, ctx)


_CTX = {"show_default": True, "help_option_names": ["-h", "--help"]}
_scale_options = [
    click.option("--acoustic-scale", type=Real(0.0, low_open=True), required=True,
                 help="Acoustic scale of the path costs (1 / inv_acwt), as lattice-path-cover's."),
    click.option("--lm-scale", type=Real(0.0), default=1.0, help="Scale of the graph costs of the path costs."),
]


def _scales(f):
    for opt in reversed(_scale_options):
        f = opt(f)
    return f


@click.group(cls=Group, context_settings=_CTX)
@version_option
def main():
    """Lattice rescoring with a neural LM by path cover (Kaldi's steps/pytorchnn method):
    `cover` writes the best path through every arc as an N-best archive for rescore-nbest;
    `apply` gives every arc the NN LM cost of its best history and adds it to the lattice."""


@main.command(cls=Command, context_settings=_CTX, groups={"Weights": ["--acoustic-scale", "--lm-scale"]})
@click.argument("lats", type=click.Path(dir_okay=False, allow_dash=True))
@click.argument("nbest_out", type=click.Path(dir_okay=False, allow_dash=True))
@_scales
@verbose_option
def cover(lats, nbest_out, acoustic_scale, lm_scale, verbose):
    """Path cover of each lattice of LATS (text CompactLattices) written to NBEST_OUT as linear
    lattices keyed <utt>-<k>, best first (an N-best archive in text form, for nbest-to-linear).
    A .gz output is gzipped."""
    setup_logging(verbose)
    CoverJob(lats, nbest_out, acoustic_scale, lm_scale).run()


@main.command(cls=Command, context_settings=_CTX, groups={"Weights": ["--acoustic-scale", "--lm-scale", "--weight"]})
@click.argument("lats", type=click.Path(dir_okay=False, allow_dash=True))
@click.argument("archives", type=click.Path(file_okay=False, exists=True))
@click.argument("lats_out", type=click.Path(dir_okay=False, allow_dash=True))
@_scales
@click.option("--weight", type=Real(0.0, 1.0), required=True,
              help="NN LM weight w: graph cost += w * NN cost (the old LM's w * cost comes off in Kaldi next).")
@verbose_option
def apply(lats, archives, lats_out, acoustic_scale, lm_scale, weight, verbose):
    """Add WEIGHT x the estimated NN LM cost to every word arc and final weight of LATS and
    write LATS_OUT. ARCHIVES is the N-best dir of the cover paths after rescore-nbest (words,
    lmwt.nn); the path cover is recomputed with the same scales as `cover`."""
    setup_logging(verbose)
    ApplyJob(lats, archives, lats_out, acoustic_scale, weight, lm_scale).run()


@main.command(cls=Command, context_settings=_CTX, groups={"Input": ["--nbest-dir", "--data-dir", "--words-txt"],
                                             "Weights": ["--inv-acwts", "--wips"], "Output": ["--report"]})
@click.argument("dirs", nargs=-1, required=True, type=WeightDir(), metavar="W=DIR...")
@click.option("--nbest-dir", type=click.Path(file_okay=False, exists=True), required=True,
              help="An N-best dir of the same utterances: their conversations (the split-half's halves, as "
                   "rescore-tune --split-half's).")
@click.option("--data-dir", type=click.Path(file_okay=False, exists=True), required=True,
              help="The data dir: references (text) and conversations (segments, utt2spk).")
@click.option("--words-txt", type=click.Path(dir_okay=False, exists=True), required=True,
              help="The lattices' words.txt.")
@click.option("--inv-acwts", type=Grid(0.0, low_open=True), default="6:16:0.5",
              help="Grid of inv_acwt (LMWT): 'a,b,c' or 'start:stop:step'.")
@click.option("--wips", type=Grid(), default="-1:3:0.5", help="Grid of word insertion penalties, as --inv-acwts.")
@click.option("--report", type=click.Path(dir_okay=False), default=None, help="Write the result as JSON.")
@verbose_option
def tune(dirs, nbest_dir, data_dir, words_txt, inv_acwts, wips, report, verbose):
    """Tune the NN LM weight, inv-acwt and word insertion penalty on rescored lattices: each
    W=DIR is the decode dir (lat.*.gz, read with Kaldi's lattice-copy on PATH) that
    recipes/steps/lmrescore_lattice.sh --stage 4 --weight W wrote. Prints the best setting by
    WER over every utterance, and split-half: tuned on the first half of the conversations, the
    WER of the second."""
    setup_logging(verbose)
    with errors_to_exit():
        by_weight = dict(dirs)
        if len(by_weight) < len(dirs):
            twice = next(w for w in by_weight if [x for x, _ in dirs].count(w) > 1)
            raise click.BadParameter(f"one decode dir per weight, got two for {twice:g}", param_hint="W=DIR")
        click.echo(LatticeTuneJob(nbest_dir, data_dir, words_txt, by_weight, inv_acwts, wips, report).run())


attach(main, "rescore-lattice")  # the example at the end of --help (rescore/cli/examples.py)


if __name__ == "__main__":
    main()
