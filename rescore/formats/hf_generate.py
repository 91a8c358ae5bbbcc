"""The beams of a Hugging Face encoder-decoder's ``generate`` (Whisper, or any seq2seq model) as an
N-best TSV file (rescore.formats.tsv), written from the user's own decode loop (docs/ecosystems.md)::

    from transformers import GenerationMixin
    from rescore.formats.hf_generate import write_nbest
    out = GenerationMixin.generate(model, input_features, num_beams=8, num_return_sequences=8,
                                   output_scores=True, return_dict_in_generate=True)
    write_nbest("nbest.tsv", utt_ids, out, tokenizer, normalize=True)

Whisper's own ``model.generate`` (transformers 5) repeats each input ``num_return_sequences``
times and decodes every copy to its 1-best, so it gives N copies of one sequence, not N beams
(refused here, saying so); ``GenerationMixin.generate`` is the generic beam search that returns
the beams. Other encoder-decoders' ``model.generate`` is that one already.

``out.sequences`` holds ``num_return_sequences`` rows per input, in input order, each input's
best first; ``out.sequences_scores`` the beam search's score of each row (the sum of the token
log-probabilities divided by length ** ``length_penalty``, as ``generate`` ranks its beams). One
column comes out, as a cost: ``pass1`` = -sequences_scores. The text is
``tokenizer.batch_decode(sequences, skip_special_tokens=True)``, with ``normalize`` passed through
Whisper's English normaliser (transformers' ``EnglishTextNormalizer`` with the tokenizer's
spelling map, as ``WhisperTokenizer.normalize`` applies it), as Whisper's English WER is
computed. Nothing here imports torch, and transformers only to normalise.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, List, Sequence, Union

from rescore.formats.table import Hypothesis, NbestTable, Utterance
from rescore.formats.tsv import write_nbest_table

PathLike = Union[str, Path]
COLUMNS = ("pass1",)


def _normalizer(tokenizer) -> Callable[[str], str]:
    """Whisper's English normaliser (what WhisperTokenizer.normalize builds) with the tokenizer's
    spelling map (``english_spelling_normalizer``, from the model's normalizer.json), or without
    one where the tokenizer has none (WhisperTokenizer.normalize itself fails then)."""
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    return EnglishTextNormalizer(getattr(tokenizer, "english_spelling_normalizer", None) or {})


def _floats(x) -> List[float]:
    x = x.tolist() if hasattr(x, "tolist") else list(x)
    return [float(v) for v in x]


def generate_table(utt_ids: Sequence[str], output, tokenizer, normalize: bool = False,
                   path: str = "<generate>") -> NbestTable:
    """The beams of ``output`` (module doc; or a list of such outputs, one per batch, the
    utterance ids of all batches in order) as a table with column pass1; utterances in the order
    given, each one's beams best first by the beam search's score."""
    texts: List[str] = []
    scores: List[float] = []
    rows: List[tuple] = []  # the token ids of each sequence
    for out in output if isinstance(output, (list, tuple)) else [output]:
        sequences = getattr(out, "sequences", None)
        seq_scores = getattr(out, "sequences_scores", None)
        if sequences is None or seq_scores is None:
            raise ValueError("a generate() output with sequences and sequences_scores: generate(..., num_beams=N, "
                             "num_return_sequences=N, output_scores=True, return_dict_in_generate=True)")
        if len(sequences) != len(seq_scores):
            raise ValueError(f"{len(sequences)} sequences for {len(seq_scores)} scores")
        texts += tokenizer.batch_decode(sequences, skip_special_tokens=True)
        scores += _floats(seq_scores)
        rows += [tuple(r.tolist() if hasattr(r, "tolist") else r) for r in sequences]
    if not utt_ids or len(scores) % len(utt_ids):
        raise ValueError(f"{len(utt_ids)} utterance ids for {len(scores)} sequences (num_return_sequences rows "
                         "per utterance)")
    if normalize:
        norm = _normalizer(tokenizer)
        texts = [norm(t) for t in texts]
    n = len(scores) // len(utt_ids)
    utts = []
    for i, utt in enumerate(utt_ids):
        if not utt or any(c.isspace() for c in utt):
            raise ValueError(f"utterance id {utt!r}: not empty, no whitespace")
        if n > 1 and len(set(rows[i * n:(i + 1) * n])) == 1:
            raise ValueError(f"utterance {utt}: {n} copies of one sequence, not {n} beams. Whisper's own generate() "
                             "decodes each of num_return_sequences copies of the input to its 1-best; for the beams "
                             "call the generic beam search: transformers.GenerationMixin.generate(model, "
                             "input_features, num_beams=N, num_return_sequences=N, output_scores=True, "
                             "return_dict_in_generate=True)")
        beams = list(zip(texts[i * n:(i + 1) * n], scores[i * n:(i + 1) * n]))
        if not all(math.isfinite(x) for _, x in beams):
            raise ValueError(f"utterance {utt}: a beam whose score is not finite")
        beams.sort(key=lambda r: -r[1])  # (generate gives them best first already; stable)
        utts.append(Utterance(utt, [Hypothesis(k, str(t).split(), (-x,), (None,)) for k, (t, x) in
                                    enumerate(beams, 1)]))
    return NbestTable(path, COLUMNS, utts)


def write_nbest(out: PathLike, utt_ids: Sequence[str], output, tokenizer, normalize: bool = False) -> NbestTable:
    """Write the beams as an N-best TSV file (rescore-nbest reads it as any such file), atomically;
    returns the table."""
    table = generate_table(utt_ids, output, tokenizer, normalize, str(out))
    write_nbest_table(out, table)
    return table
