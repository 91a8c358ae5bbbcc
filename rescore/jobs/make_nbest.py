"""The job of rescore-make-nbest: decode a Kaldi data dir with PocketSphinx into a Kaldi-style
N-best dir (rescore.asr.pocketsphinx_nbest.decode_data_dir), the words of the data dir's
references added to its words.txt.

Checked when built, like rescore.jobs.nbest's job: an OptionError (exit 2) for a value
PocketSphinx would misuse, before any work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rescore.asr.pocketsphinx_nbest import DecoderSettings, check_settings, decode_data_dir
from rescore.io.kaldi import iter_lines


@dataclass(frozen=True)
class MakeNbestJob:
    """rescore-make-nbest DATA_DIR OUT_DIR: decode ``data_dir`` (wav.scp of 16 kHz 16-bit mono WAVs,
    + segments) into ``out_dir``. Checked when built."""

    data_dir: str
    out_dir: str
    settings: DecoderSettings = field(default_factory=DecoderSettings)  # PocketSphinx's search
    nbest: int = 100  # distinct word sequences per utterance (at most)
    nj: int = 2  # decoding processes

    def __post_init__(self):
        check_settings(self.settings, self.nbest, self.nj)

    def run(self) -> str:
        """Decode and write OUT_DIR; returns its summary line (utterances, hypotheses, agreement of
        rank 1 with PocketSphinx's 1-best, inv_acwt)."""
        text = Path(self.data_dir) / "text"
        extra = ([w for _, line in iter_lines(text) for w in line.split()[1:]]
                 if text.is_file() else None)
        info = decode_data_dir(Path(self.data_dir), Path(self.out_dir), self.settings, nbest=self.nbest,
                               nj=self.nj, extra_words=extra)
        return (f"{info['num_utts']} utterances, {info['num_hyps']} hypotheses; rank 1 equals "
                f"PocketSphinx's 1-best for {info['rank1_equals_pocketsphinx']}; inv_acwt {info['inv_acwt']}")
