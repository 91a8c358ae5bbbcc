"""rescore-ppl: perplexity of a trained LM on a text, and per-rare-word-bucket cross-entropy."""

from __future__ import annotations

import os

import click

from rescore.cli.common import command, errors_to_exit, setup_logging, verbose_option
from rescore.cli.examples import attach
from rescore.cli.options import MAX_BATCH, MAX_BUCKETS, MAX_TOKENS, MAX_WINDOW, Conflict, Count, Grid, Need, Real
from rescore.jobs.ppl import CacheTuneJob, PplJob


TRAIN_TEXT = "--train-text (the word counts of the buckets)"
# What each option needs to act (rescore.cli.options.Need), the pairs that exclude each other
# (--tune-cache reports the cache's grid only) and --help's sections
NEEDS = {
    "--plot": Need(lambda p: p["train_text"] is not None, TRAIN_TEXT),
    "--buckets": Need(lambda p: p["train_text"] is not None, TRAIN_TEXT),
    "--compare-name": Need(lambda p: p["compare"] is not None, "--compare (the model it names)"),
    "--title": Need(lambda p: p["plot"] is not None, "--plot (the chart it names)"),
    "--cache-theta": Need(lambda p: p["cache_window"] > 0, "--cache-window > 0 (the neural cache it sets)"),
    "--cache-lambda": Need(lambda p: p["cache_window"] > 0, "--cache-window > 0 (the neural cache it sets)"),
    **{name: Need(lambda p: p["tune_cache"], "--tune-cache (the grid it sweeps)")
       for name in ("--cache-windows", "--cache-thetas", "--cache-lambdas")},
}
CONFLICTS = [Conflict("--tune-cache", name, "--tune-cache reports the neural cache's grid alone")
             for name in ("--cache-window", "--train-text", "--compare", "--plot", "--name")]
GROUPS = {
    "Input": ["--train-text", "--compare"],
    "Carry and pointer": ["--cache-window", "--cache-theta", "--cache-lambda", "--tune-cache", "--cache-windows",
                          "--cache-thetas", "--cache-lambdas"],
    "Output": ["--buckets", "--report", "--plot", "--name", "--compare-name", "--title"],
    "Performance": ["--device", "--batch-size", "--bptt"],
}


@command(groups=GROUPS, needs=NEEDS, conflicts=CONFLICTS)
@click.argument("ckpt", type=click.Path(exists=True, dir_okay=False))
@click.argument("text", type=click.Path(exists=True, dir_okay=False))
@click.option("--train-text", type=click.Path(exists=True, dir_okay=False), default=None,
              help="The LM's training text: word frequencies for the rare-word buckets.")
@click.option("--compare", "compare", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A second checkpoint: per-bucket cross-entropy difference CKPT - CKPT2.")
@click.option("--report", type=click.Path(dir_okay=False), default=None, help="Write a JSON report.")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="Write a PNG bar chart (per-bucket ce, or the difference with --compare).")
@click.option("--name", default=None,
              help="Name of CKPT in the table and chart. Default: from its config, e.g. 'LSTM 2x650, pointer + "
                   "memory'.")
@click.option("--compare-name", default=None, help="Name of the --compare checkpoint. Default: from its config.")
@click.option("--title", default=None, help="Title of the chart. Default: the text and the model names.")
@click.option("--buckets", "n_buckets", type=Count(1, MAX_BUCKETS), default=10, help="Number of rare-word buckets.")
@click.option("--batch-size", type=Count(1, MAX_BATCH), default=10, help="Parallel streams the text is cut into.")
@click.option("--bptt", type=Count(1, MAX_TOKENS), default=100, help="Tokens per forward call.")
@click.option("--device", default="auto", help="auto, cpu, cuda, cuda:N.")
@click.option("--cache-window", type=Count(0, MAX_WINDOW), default=0,
              help="Neural cache (Grave et al. 2017) on CKPT: pairs kept; 0: no cache.")
@click.option("--cache-theta", type=Real(0.0, low_open=True), default=0.3, help="Neural cache flatness theta.")
@click.option("--cache-lambda", type=Real(0.0, 1.0, high_open=True), default=0.1,
              help="Neural cache interpolation weight lambda.")
@click.option("--tune-cache", is_flag=True,
              help="Tune the neural cache on TEXT (a validation text, never the test text): the perplexity of "
                   "every point of --cache-windows x --cache-thetas x --cache-lambdas from one pass of the "
                   "model, and the best; --report writes them as JSON.")
@click.option("--cache-windows", type=Grid(1, MAX_WINDOW, integer=True), default="100", show_default=True,
              help="--tune-cache: windows, 'a,b,c'.")
@click.option("--cache-thetas", type=Grid(0.0, low_open=True), default="0.1,0.3,0.6", show_default=True,
              help="--tune-cache: thetas, 'a,b,c' or 'start:stop:step'.")
@click.option("--cache-lambdas", type=Grid(0.0, 1.0, high_open=True), default="0.05,0.1,0.2", show_default=True,
              help="--tune-cache: lambdas in [0, 1), 'a,b,c' or 'start:stop:step'.")
@verbose_option
def main(ckpt, text, train_text, compare, report, plot, name, compare_name, title, n_buckets, batch_size, bptt, device,
         cache_window, cache_theta, cache_lambda, tune_cache, cache_windows, cache_thetas, cache_lambdas, verbose):
    """Perplexity of CKPT on TEXT (one sentence per line; every word and each sentence end is
    predicted, OOV words as <unk>); with --train-text, cross-entropy per rare-word bucket; with
    --tune-cache, the neural cache's settings by perplexity on TEXT."""
    setup_logging(verbose)
    with errors_to_exit():
        if tune_cache:
            job = CacheTuneJob(ckpt, text, windows=cache_windows, thetas=cache_thetas, lambdas=cache_lambdas,
                               report=report, batch_size=batch_size, bptt=bptt, device=device)
        else:
            job = PplJob(ckpt, text, train_text=train_text, compare=compare, report=report, plot=plot, name=name,
                         compare_name=compare_name, title=title, n_buckets=n_buckets, batch_size=batch_size,
                         bptt=bptt, device=device, cache_window=cache_window, cache_theta=cache_theta,
                         cache_lambda=cache_lambda)
            if report and plot and os.path.abspath(report) == os.path.abspath(plot):
                raise click.UsageError("--report and --plot must be different files")
        click.echo(job.run())


attach(main, "rescore-ppl")  # the example at the end of --help (rescore/cli/examples.py)


if __name__ == "__main__":
    main()
