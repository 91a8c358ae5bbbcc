"""rescore-wer: WER of one or more hypothesis texts against a reference text, overall and per
rare-word bucket; with two or more, each compared with the first by a paired bootstrap."""

from __future__ import annotations

import os

import click

from rescore.cli.common import command, errors_to_exit, setup_logging, verbose_option
from rescore.cli.examples import attach
from rescore.cli.options import MAX_BUCKETS, MAX_SEED, Count, Need, Real
from rescore.jobs.wer import WerJob
from rescore.metrics.compare import MIN_BOOTSTRAP_UNITS

MAX_DRAWS = 1_000_000  # bootstrap draws (each a resampled WER per system)


def _systems(hyp_texts, names):
    """[(name, path)] from HYP arguments (PATH or NAME=PATH) and --name options (in order)."""
    out = []
    for k, arg in enumerate(hyp_texts):
        name, path = None, arg
        if "=" in arg and not os.path.exists(arg):
            name, path = arg.split("=", 1)
        if k < len(names):
            name = names[k]
        out.append((name or path, path))
    if len(names) > len(hyp_texts):
        raise click.UsageError(f"{len(names)} --name options for {len(hyp_texts)} HYP_TEXT files")
    seen = [n for n, _ in out]
    dup = sorted({n for n in seen if seen.count(n) > 1})
    if dup:
        raise click.UsageError(f"two systems named {dup[0]!r}: give each a --name")
    return out


SYSTEMS = Need(lambda p: len(p["hyp_texts"]) >= 2, "two or more HYP_TEXT (the paired bootstrap compares them)")
# What each option needs to act (rescore.cli.options.Need) and --help's sections
NEEDS = {
    "--buckets": Need(lambda p: p["train_text"] is not None, "--train-text (the word counts of the buckets)"),
    "--plot": Need(lambda p: p["train_text"] is not None, "--train-text (the buckets come from training counts)"),
    "--title": Need(lambda p: p["plot"] is not None, "--plot (the chart it names)"),
    "--groups": SYSTEMS,
    "--bootstrap": SYSTEMS,
    "--seed": SYSTEMS,
    "--confidence": SYSTEMS,
}
GROUPS = {
    "Input": ["--name", "--train-text", "--groups", "--allow-missing", "--normalize-refs"],
    "Output": ["--buckets", "--bootstrap", "--seed", "--confidence", "--report", "--plot", "--title"],
}


@command(groups=GROUPS, needs=NEEDS)
@click.argument("ref_text", type=click.Path(dir_okay=False))
@click.argument("hyp_texts", nargs=-1, required=True, metavar="HYP_TEXT [HYP_TEXT ...]")
@click.option("--name", "names", multiple=True,
              help="Name of each HYP_TEXT in order (repeat it); or write a HYP_TEXT as NAME=PATH. Default: the path.")
@click.option("--train-text", type=click.Path(dir_okay=False),
              help="LM training text: adds the per rare-word bucket table.")
@click.option("--buckets", "num_buckets", type=Count(1, MAX_BUCKETS), default=10, help="Number of rare-word buckets.")
@click.option("--groups", type=click.Path(dir_okay=False),
              help="segments or utt2spk of the data: the bootstrap resamples whole recordings (speakers) instead of "
                   f"utterances. With fewer than {MIN_BOOTSTRAP_UNITS} its figures are marked unreliable; with one "
                   "there is no CI, p-value or P(better).")
@click.option("--bootstrap", "draws", type=Count(0, MAX_DRAWS), default=1000,
              help="Paired bootstrap draws for the CIs and p-values (0: none); with two or more HYP_TEXTs.")
@click.option("--seed", type=Count(0, MAX_SEED), default=0, help="Seed of the bootstrap's resampling.")
@click.option("--confidence", type=Real(0.0, 1.0, low_open=True, high_open=True), default=0.95,
              help="Level of the confidence intervals.")
@click.option("--report", type=click.Path(dir_okay=False), help="Write the report as JSON.")
@click.option("--plot", type=click.Path(dir_okay=False),
              help="Chart of the per-bucket WER of every system (and the differences with their CIs) as PNG; needs "
                   "--train-text.")
@click.option("--title", help="Title of the chart. Default: the reference file and the system names.")
@click.option("--allow-missing", is_flag=True,
              help="Score a missing hypothesis as empty and ignore extra ones instead of failing.")
@click.option("--normalize-refs", is_flag=True,
              help="Normalise REF_TEXT before scoring as a recipe's scoring filter does: typographic quotes "
                   "as ASCII, lower case, punctuation stripped (apostrophes and hyphens between letters kept, and an "
                   "apostrophe at a word's edge where the recognizer's words have that form: 'cause, rangers'), for "
                   "raw transcripts against a recognizer's normalised words (a warning suggests it).")
@verbose_option
def main(ref_text, hyp_texts, names, train_text, num_buckets, groups, draws, seed, confidence, report, plot,
         title, allow_missing, normalize_refs, verbose):
    """WER of each HYP_TEXT against REF_TEXT (Kaldi text files: utt-id w1 w2 ...). With one
    HYP_TEXT: compute-wer's line and the bucket table. With more: the first is the baseline and
    each further one is compared with it (WER with sub/del/ins, relative change, a paired
    bootstrap CI of the difference and its p-value), per bucket too."""
    setup_logging(verbose)
    with errors_to_exit():
        job = WerJob(ref_text=ref_text, systems=tuple(_systems(hyp_texts, list(names))), train_text=train_text,
                     num_buckets=num_buckets, groups=groups, draws=draws, seed=seed, confidence=confidence,
                     report=report, plot=plot, title=title, allow_missing=allow_missing,
                     normalize_refs=normalize_refs)
        text = job.run()
    click.echo(text)


attach(main, "rescore-wer")  # the example at the end of --help (rescore/cli/examples.py)


if __name__ == "__main__":
    main()
