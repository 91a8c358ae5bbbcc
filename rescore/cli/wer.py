"""rescore-wer: WER of a hypothesis text against a reference text, overall and per rare-word bucket."""

from __future__ import annotations

import json

import click

from rescore.cli.common import errors_to_exit, setup_logging, verbose_option


@click.command(context_settings={"show_default": True, "help_option_names": ["-h", "--help"]})
@click.argument("ref_text", type=click.Path(dir_okay=False))
@click.argument("hyp_text", type=click.Path(dir_okay=False))
@click.option("--train-text", type=click.Path(dir_okay=False), help="LM training text: adds the per rare-word bucket table (design §7).")
@click.option("--buckets", "num_buckets", type=int, default=10, help="Number of rare-word buckets.")
@click.option("--report", type=click.Path(dir_okay=False), help="Write the report as JSON.")
@click.option("--plot", type=click.Path(dir_okay=False), help="Bar chart of the per-bucket WER (PNG; needs --train-text).")
@click.option("--allow-missing", is_flag=True, help="Score a missing hypothesis as empty and ignore extra ones instead of failing.")
@verbose_option
def main(ref_text, hyp_text, train_text, num_buckets, report, plot, allow_missing, verbose):
    """WER of HYP_TEXT against REF_TEXT (Kaldi text files: utt-id w1 w2 ...)."""
    setup_logging(verbose)
    from rescore.io.kaldi import atomic_output
    from rescore.metrics import format_wer_report, plot_buckets, wer_report

    if plot and not train_text:
        raise click.UsageError("--plot needs --train-text (the buckets come from training counts)")
    with errors_to_exit():
        rep = wer_report(ref_text, hyp_text, train_text=train_text, num_buckets=num_buckets,
                         allow_missing=allow_missing)
        if report:
            with atomic_output(report, "w") as f:
                json.dump(rep, f, indent=1)
                f.write("\n")
        if plot:
            plot_buckets(rep["buckets"], plot, title=f"WER per rare-word bucket: {hyp_text}")
    click.echo(format_wer_report(rep))


if __name__ == "__main__":
    main()
