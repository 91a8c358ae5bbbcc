"""The job of rescore-tts-data: speak a text file of sentences into a Kaldi data dir with flite
voices (rescore.asr.tts.make_tts_data_dir), one recording per document.

Checked when built, like rescore.jobs.nbest's job: an OptionError (exit 2) for a bad value
before any work (flite and sox are looked for when the job runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

from rescore.asr.tts import DEFAULT_VOICES, check_options, make_tts_data_dir, parse_snrs


@dataclass(frozen=True)
class TtsDataJob:
    """rescore-tts-data TEXT OUT_DIR: synthesize ``text`` (one sentence a line) into ``out_dir``.
    Checked when built."""

    text: str
    out_dir: str
    docids: Optional[str] = None  # document id per line of text; None: blank lines separate documents
    voices: Tuple[str, ...] = DEFAULT_VOICES  # flite voices, cycled over documents
    gap: float = 0.3  # seconds of silence between sentences of a recording
    prefix: str = ""  # of recording, speaker and utterance ids
    nj: int = 2  # parallel flite processes
    snrs: Tuple[str, ...] = ()  # pink noise at these SNRs in dB or 'clean', cycled over documents

    def __post_init__(self):
        object.__setattr__(self, "voices", tuple(self.voices))
        object.__setattr__(self, "snrs", tuple(self.snrs))
        check_options(self.voices, self.gap, self.prefix, self.nj)
        parse_snrs(self.snrs)

    def run(self) -> str:
        """Synthesize and write OUT_DIR; returns its summary line (utterances, documents, seconds)."""
        counts = make_tts_data_dir(Path(self.text), Path(self.out_dir), Path(self.docids) if self.docids else None,
                                   list(self.voices), gap=self.gap, prefix=self.prefix, nj=self.nj,
                                   snrs=list(self.snrs))
        return f"{counts['utterances']} utterances of {counts['documents']} documents, {counts['seconds']} s"
