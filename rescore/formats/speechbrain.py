"""SpeechBrain's beam search top-k as an N-best TSV file, and a rescored file back as
SpeechBrain's top-k lists (docs/ecosystems.md). Written from the user's own decode loop::

    searcher = S2SRNNBeamSearcher(..., beam_size=8, return_topk=True, topk=8)   # or S2STransformerBeamSearcher
    outputs = [searcher(enc_states, wav_lens) for enc_states, wav_lens in batches]
    from rescore.formats.speechbrain import write_topk
    write_topk("nbest.tsv", utt_ids, outputs, tokenizer)          # a SentencePiece tokenizer, or ids -> text

    from rescore.formats.speechbrain import read_topk                  # after rescore-nbest nbest.tsv out ...
    ids, candidates, scores = read_topk("out/scores.tsv")         # RescorerBuilder.rescore's shape

``S2SBeamSearcher.forward`` (speechbrain.decoders.seq2seq, 1.1) returns ``(hyps, lengths, scores,
log_probs)``. With ``return_topk=True``: ``hyps`` (batch, topk, T) token ids, each utterance's
beams best first; ``lengths`` (batch, topk) relative lengths (the tokens before the end of
sentence, over T); ``scores`` (batch, topk) the beam search's score (the summed token
log-probabilities of its scorers, divided by the number of steps under
``length_normalization``, its default). Without it, the 1-best: ``hyps`` a list of token id lists
and ``scores`` (batch,); it is read as a top-1. A hypothesis keeps ``round(length * T)`` tokens,
as SpeechBrain's own ``undo_padding`` cuts its 1-best, and its text is ``decode(ids)``
(``tokenizer.decode_ids`` of a SentencePiece tokenizer, as SpeechBrain's ASR classes decode).
One column comes out, as a cost: ``pass1`` = -score.

SpeechBrain's CTC beam search (``speechbrain.decoders.ctc.CTCBeamSearcher`` and its kin, with
``topk``) returns per utterance a list of ``CTCHypothesis`` (``text``, ``score`` the CTC
log-probability, ``lm_score`` the score that ranks the beams: ``score`` plus alpha x the KenLM
log-probability and beta x the words, pyctcdecode's rule); written as pyctcdecode's beams are
(rescore.formats.pyctcdecode): columns ``ac`` = -score and ``lm`` = score - lm_score.

Back: ``read_topk`` reads any TSV file (``rescore-nbest``'s ``scores.tsv`` included)
as SpeechBrain's lists: per utterance the candidates' texts and log-probability scores
(-cost of a column, ``total`` by default), best first, as ``RescorerBuilder.rescore`` returns
them. Nothing here imports torch or speechbrain.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple, Union

from rescore.errors import RescoreError
from rescore.formats.table import Hypothesis, NbestTable, Utterance
from rescore.formats.tsv import read_nbest_table, write_nbest_table
from rescore.formats.pyctcdecode import beams_table

PathLike = Union[str, Path]
COLUMNS = ("pass1",)


def _decoder(decode) -> Callable[[List[int]], str]:
    """``decode`` as a function of a token id list: a SentencePiece tokenizer (``decode_ids``,
    SpeechBrain's ``tokenizer``), or such a function already."""
    if hasattr(decode, "decode_ids"):
        return decode.decode_ids
    if callable(decode):
        return decode
    raise ValueError("decode: a SentencePiece tokenizer (decode_ids) or a function of a token id list")


def _tolist(x) -> list:
    return x.tolist() if hasattr(x, "tolist") else list(x)


def _beams(output) -> List[List[Tuple[List[int], float]]]:
    """[[(token ids, score), ...] per utterance of a batch] of one S2SBeamSearcher output."""
    if not isinstance(output, (tuple, list)) or len(output) != 4:
        raise ValueError("an S2SBeamSearcher output: the tuple (hyps, lengths, scores, log_probs)")
    hyps, lengths, scores, _ = output
    lengths, scores = _tolist(lengths), _tolist(scores)
    if hasattr(hyps, "dim") and hyps.dim() == 3:  # return_topk: (batch, topk, T), padded
        rows, width = _tolist(hyps), hyps.shape[2]
        if not (len(lengths) == len(scores) == len(rows)):
            raise ValueError(f"{len(rows)} utterances of hyps for {len(lengths)} of lengths, {len(scores)} of scores")
        out = []
        for ids, lens, sc in zip(rows, lengths, scores):
            if not (len(ids) == len(lens) == len(sc)):
                raise ValueError(f"{len(ids)} beams for {len(lens)} lengths and {len(sc)} scores")
            out.append([(row[:int(round(n * width))], float(s)) for row, n, s in zip(ids, lens, sc)])
        return out
    hyps = [_tolist(h) for h in hyps]  # the 1-best: a list of token id lists (undo_padding's)
    if not (len(hyps) == len(scores)) or any(isinstance(s, list) for s in scores):
        raise ValueError(f"{len(hyps)} hypotheses for {len(scores)} scores (a 1-best output: one score each)")
    return [[(h, float(s))] for h, s in zip(hyps, scores)]


def _is_ctc(x) -> bool:
    return hasattr(x, "text") and hasattr(x, "lm_score")


def _ctc_beams(outputs) -> Optional[List[Tuple[str, float, float]]]:
    """[[(text, score, lm_score), ...] per utterance] of CTC beam search outputs (one batch's
    list of lists of CTCHypothesis, or a list of such batches); None for other outputs."""
    if not isinstance(outputs, list) or not outputs or not isinstance(outputs[0], list) or not outputs[0]:
        return None
    if _is_ctc(outputs[0][0]):
        batches = [outputs]
    elif isinstance(outputs[0][0], list) and outputs[0][0] and _is_ctc(outputs[0][0][0]):
        batches = outputs
    else:
        return None
    return [[(h.text, h.score, h.lm_score) for h in utt] for batch in batches for utt in batch]


def topk_table(utt_ids: Sequence[str], outputs, decode=None, path: str = "<speechbrain>") -> NbestTable:
    """The beams of ``outputs`` (module doc: one searcher output, or a list of them, one per
    batch, with the utterance ids of all batches in order) as a table with column pass1
    (columns ac, lm of a CTC beam search, whose texts need no ``decode``); utterances in the
    order given, each one's beams best first by the beam search's score."""
    ctc = _ctc_beams(outputs)
    if ctc is not None:
        return beams_table(utt_ids, ctc, path)
    if isinstance(outputs, list) and outputs and isinstance(outputs[0], (tuple, list)):
        batches = outputs
    else:
        batches = [outputs]
    per_utt = [u for out in batches for u in _beams(out)]
    if len(per_utt) != len(utt_ids):
        raise ValueError(f"{len(utt_ids)} utterance ids for {len(per_utt)} utterances of beams")
    text = _decoder(decode)
    utts = []
    for utt, beams in zip(utt_ids, per_utt):
        if not utt or any(c.isspace() for c in utt):
            raise ValueError(f"utterance id {utt!r}: not empty, no whitespace")
        if not all(math.isfinite(s) for _, s in beams):
            raise ValueError(f"utterance {utt}: a beam whose score is not finite (a beam the search blocked)")
        beams = sorted(beams, key=lambda b: -b[1])  # (best first already; stable)
        utts.append(Utterance(utt, [Hypothesis(k, str(text(ids)).split(), (-s,), (None,))
                                    for k, (ids, s) in enumerate(beams, 1)]))
    return NbestTable(path, COLUMNS, utts)


def write_topk(out: PathLike, utt_ids: Sequence[str], outputs, decode=None) -> NbestTable:
    """Write the beams as a TSV file (rescore-nbest reads it as any such file),
    atomically; returns the table."""
    table = topk_table(utt_ids, outputs, decode, str(out))
    write_nbest_table(out, table)
    return table


def read_topk(path: PathLike, column: str = "total") -> Tuple[List[str], List[List[str]], List[List[float]]]:
    """(utterance ids, candidates, scores) of a TSV file in SpeechBrain's form:
    ``candidates[i]`` the texts of utterance i's hypotheses, ``scores[i]`` their log-probability
    scores (-cost of ``column``: ``total`` in rescore-nbest's scores.tsv, ``pass1`` in
    write_topk's file), best first (ties in the file's order). A file without the column is a
    RescoreError naming its header line."""
    table = read_nbest_table(path)
    col = table.column(column)
    ids, candidates, scores = [], [], []
    for u in table.utterances:
        ranked = sorted(u.hyps, key=lambda h: h.scores[col])
        ids.append(u.id)
        candidates.append([" ".join(h.words) for h in ranked])
        scores.append([-h.scores[col] for h in ranked])
    if not ids:
        raise RescoreError("at least one utterance", path=str(path), got="none")
    return ids, candidates, scores
