"""rescore-tts-data: speak a text file of sentences into a Kaldi data dir (flite voices)."""

from __future__ import annotations

import logging

import click

from rescore.cli.common import command, errors_to_exit, setup_logging, verbose_option
from rescore.cli.examples import attach
from rescore.cli.options import MAX_JOBS, Count, Real
from rescore.jobs.tts_data import TtsDataJob

log = logging.getLogger("rescore-tts-data")
MAX_GAP = 60.0  # seconds of silence between sentences (the recordings' samples follow it)


@command(groups={"Input": ["--docids"], "Output": ["--voices", "--gap", "--snrs", "--prefix"], "Performance": ["--nj"]})
@click.argument("text", type=click.Path(dir_okay=False, exists=True))
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--docids", type=click.Path(dir_okay=False, exists=True),
              help="Document id per line of TEXT; without it blank lines separate documents.")
@click.option("--voices", default="rms,awb,slt,kal16", help="flite voices, cycled over documents.")
@click.option("--gap", type=Real(0.0, MAX_GAP), default=0.3,
              help="Seconds of silence between sentences of a recording.")
@click.option("--prefix", default="", help="Prefix of recording, speaker and utterance ids.")
@click.option("--nj", type=Count(1, MAX_JOBS), default=2, help="Parallel flite processes.")
@click.option("--snrs", default="", help="Pink noise (sox) at these SNRs in dB or 'clean', cycled over documents "
              "like the voices; empty: no noise.")
@verbose_option
def main(text, out_dir, docids, voices, gap, prefix, nj, snrs, verbose):
    """Synthesize TEXT (one sentence a line) with flite into OUT_DIR: wav/ (one 16 kHz 16-bit
    mono recording per document), wav.scp, segments, text, utt2spk, spk2utt, utt2dur,
    utt2cond (voice and SNR of each utterance)."""
    setup_logging(verbose)
    with errors_to_exit():
        summary = TtsDataJob(text, out_dir, docids, tuple(v for v in voices.split(",") if v), gap=gap, prefix=prefix,
                             nj=nj, snrs=tuple(v for v in snrs.split(",") if v)).run()
    click.echo(summary)


attach(main, "rescore-tts-data")  # the example at the end of --help (rescore/cli/examples.py)


if __name__ == "__main__":
    main()
