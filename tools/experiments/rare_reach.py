"""What an N-best set leaves within reach of a rescoring LM, per rare-word bucket.

    python -m tools.experiments.rare_reach NBEST_DIR --data-dir DATA_DIR --train-text LM_TRAIN_TEXT [--json OUT.json]

Per bucket (0 = rarest in the LM training text): reference tokens; rank 1's and the N-best
oracle's errors and WER; the reference tokens that some hypothesis of their utterance holds
(reachable); and the reachable tokens that rank 1 misses, which a perfect LM could fix
(rescore.nbest.reach). Prints the table; --json writes everything, atomically. On the dev benchmark:

    python -m tools.experiments.rare_reach ../shared/data/tts-wikitext2-dev/nbest \\
        --data-dir ../shared/data/tts-wikitext2-dev/data \\
        --train-text ../shared/data/wikitext2-asr/train.txt --json reach_dev.json
"""

from __future__ import annotations

from pathlib import Path

import click


from rescore.cli.common import command, errors_to_exit, setup_logging, verbose_option  # noqa: E402


EXAMPLE = """\b
e.g.:
  python -m tools.experiments.rare_reach exp/tri4/decode_dev_nbest --data-dir data/dev \\
      --train-text lm_train.txt --json reach_dev.json"""


@command(epilog=EXAMPLE)
@click.argument("nbest_dir", type=click.Path(file_okay=False, exists=True))
@click.option("--data-dir", required=True, type=click.Path(file_okay=False, exists=True),
              help="Data dir whose text holds the references.")
@click.option("--train-text", required=True, type=click.Path(dir_okay=False, exists=True),
              help="LM training text (one sentence a line): the buckets come from its word counts.")
@click.option("--words-txt", type=click.Path(dir_okay=False, exists=True),
              help="Symbol table for 'words' ids (found beside NBEST_DIR when not given).")
@click.option("--buckets", "num_buckets", type=click.IntRange(min=1), default=10, help="Number of rare-word buckets.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="Write the whole report here as JSON.")
@click.option("--allow-missing", is_flag=True, help="References without an N-best are dropped with a warning.")
@verbose_option
def main(nbest_dir, data_dir, train_text, words_txt, num_buckets, json_out, allow_missing, verbose):
    """Per rare-word bucket of NBEST_DIR's references: reference tokens, rank 1's and the
    N-best oracle's errors and WER, the tokens some hypothesis of their utterance holds
    (reachable), and the reachable tokens rank 1 misses (fixable: what a perfect LM could
    fix). Prints the table; --json writes the report."""
    setup_logging(verbose)
    with errors_to_exit():
        from rescore.io.files import write_json
        from rescore.io.outputs import check_output_file
        from rescore.nbest.reach import format_reach_table, reach_report

        check_output_file(json_out, "--json", [train_text, words_txt] + sorted(Path(data_dir).iterdir())
                          + sorted(Path(nbest_dir).iterdir()))
        report = reach_report(nbest_dir, data_dir, train_text, words_txt=words_txt, num_buckets=num_buckets,
                              allow_missing=allow_missing)
        if json_out:
            write_json(json_out, report)
    click.echo(format_reach_table(report))


if __name__ == "__main__":
    main()
