"""The beams of pyctcdecode (and of Hugging Face's ``Wav2Vec2ProcessorWithLM``, which runs it) as
an N-best TSV file (rescore.formats.tsv), written from the user's own decode loop (docs/ecosystems.md)::

    from rescore.formats.pyctcdecode import write_beams
    beams = [decoder.decode_beams(logits, beam_width=16) for logits in batch]   # pyctcdecode
    write_beams("nbest.tsv", utt_ids, beams)

    out = processor.batch_decode(logits.numpy(), n_best=16)                     # transformers
    write_beams("nbest.tsv", utt_ids, out)

A beam of ``decode_beams`` is ``(text, last_lm_state, text_frames, logit_score, lm_score)``,
``lm_score`` the combined score that ranks the beams (logit_score + alpha x LM + beta x words,
+ hotwords); ``batch_decode(..., n_best=N)`` gives ``text``, ``logit_score`` and ``lm_score``
(the same two numbers) per utterance. Two columns come out, as costs: ``ac`` = -logit_score and
``lm`` = -(lm_score - logit_score), so that their sum is pyctcdecode's own ranking (rank 1 its
best). Nothing here imports pyctcdecode or transformers.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import List, Sequence, Union

from rescore.formats.table import Hypothesis, NbestTable, Utterance
from rescore.formats.tsv import write_nbest_table

PathLike = Union[str, Path]
COLUMNS = ("ac", "lm")


def _per_utt(beams) -> List[List[tuple]]:
    """[[(text, logit_score, lm_score), ...] per utterance] of decode_beams lists or of a
    Wav2Vec2DecoderWithLMOutput with n_best."""
    if hasattr(beams, "text") and hasattr(beams, "logit_score"):
        texts, logit, lm = beams.text, beams.logit_score, beams.lm_score
        if isinstance(texts, str) or (texts and isinstance(texts[0], str)):
            raise ValueError("a batch_decode output with n_best > 1 (a list of hypotheses per utterance)")
        return [list(zip(t, a, b)) for t, a, b in zip(texts, logit, lm)]
    return [[(b[0], b[-2], b[-1]) for b in utt] for utt in beams]


def beams_table(utt_ids: Sequence[str], beams, path: str = "<pyctcdecode>") -> NbestTable:
    """The beams (module doc) as a table with columns ac, lm; utterances in the order given,
    each utterance's beams best first by pyctcdecode's score."""
    per_utt = _per_utt(beams)
    if len(per_utt) != len(utt_ids):
        raise ValueError(f"{len(utt_ids)} utterance ids for {len(per_utt)} utterances of beams")
    utts = []
    for utt, hyps in zip(utt_ids, per_utt):
        if not utt or any(c.isspace() for c in utt):
            raise ValueError(f"utterance id {utt!r}: not empty, no whitespace")
        if not hyps:
            raise ValueError(f"utterance {utt}: no beams")
        rows = []
        for text, logit, total in sorted(hyps, key=lambda x: -float(x[2])):
            logit, total = float(logit), float(total)
            if not (math.isfinite(logit) and math.isfinite(total)):
                raise ValueError(f"utterance {utt}: a beam with a score that is not finite ({logit}, {total})")
            rows.append((str(text).split(), (-logit, -(total - logit))))
        utts.append(Utterance(utt, [Hypothesis(k, w, s, (None, None)) for k, (w, s) in enumerate(rows, 1)]))
    return NbestTable(path, COLUMNS, utts)


def write_beams(out: PathLike, utt_ids: Sequence[str], beams) -> NbestTable:
    """Write the beams as an N-best TSV file (rescore-nbest reads it with --format tsv,
    or as any file); returns the table."""
    table = beams_table(utt_ids, beams, str(out))
    write_nbest_table(out, table)
    return table
