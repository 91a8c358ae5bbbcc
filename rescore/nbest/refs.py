"""Checks that the references fit the hypotheses and are not in the LM's training text: mistakes
that still give a plausible-looking WER, so only a warning says them.

* :func:`first_pass_check` -- for every input format (a Kaldi dir of text archives, an
  interchange file, ESPnet, NeMo, icefall; a Kaldi dir of integer archives has the symbol table
  check of rescore.nbest.checks, which names words.txt): the first pass (rank 1 of each utterance)
  against the references. A first-pass WER above MAX_FIRST_PASS_WER (90 %) or fewer than
  MIN_TOKEN_OVERLAP (20 %) of its tokens in their utterance's reference means that the
  hypotheses and the references do not belong together; the warning names the likely causes of
  the input's format (keys shifted by a script, a NeMo manifest in another order than the
  decode, the references or the N-best of another set). When rank 1 matches the reference of
  the utterance next to it far better, it says the keys are shifted by one. (The real dev set:
  WER 20.6 %, 81 % of the tokens found; each N-best keyed as the next utterance's: WER above
  100 %, a few % found.)
* :func:`train_text_overlap` -- with the LM training text (``--train-text``): the share of the
  reference sentences found verbatim in it, and of the reference NGRAM-grams (8 words); above
  MAX_SENTENCE_SHARE (10 %) or MAX_NGRAM_SHARE (20 %) a warning, since an LM that has seen the
  test references gives a WER no other LM can be compared with (one trained on them: 100 %).
  Honest text has a few: the training text of wikitext2-asr holds 1.4 % of the sentences of the
  tts-wikitext2-dev references (short stock sentences) and 2.8 % of their 8-grams; the mini
  recipe's Bible text without the Gospel of Mark holds 4.2 % of its test sentences from Mark and
  7.3 % of their 8-grams (the other gospels tell the same stories in the same words). One pass
  over the sentences the run reads anyway (for the rare-word buckets), hash sets only.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence

from rescore.metrics.record import JsonRecord
from rescore.nbest.checks import MAX_FIRST_PASS_WER, MIN_TOKEN_OVERLAP

log = logging.getLogger(__name__)

NGRAM = 8  # the long n-grams looked up in the training text
MAX_SENTENCE_SHARE = 10.0  # percent of the reference sentences found verbatim: a warning above
MAX_NGRAM_SHARE = 20.0  # percent of the reference NGRAM-grams found: a warning above
SHIFT_FACTOR = 2.0  # a neighbour's reference this many times the overlap of its own: shifted keys

# The likely causes of a first pass that does not fit the references, by input format.
_SHIFTED = "the hypotheses keyed as other utterances (keys shifted, e.g. an off-by-one in a script that renamed them)"
_OTHER = "references of another set, or the N-best of another decode (other audio)"
CAUSES = {
    "kaldi": [_SHIFTED, f"a data dir (--data-dir) that is not the decoded set's: {_OTHER}",
              "a words_text made through a wrong words.txt"],
    "interchange": [_SHIFTED, _OTHER],
    "espnet": [_SHIFTED, f"a data dir (--data-dir) that is not the decoded set's: {_OTHER}"],
    "icefall": [_SHIFTED, _OTHER],
    "nemo": ["a manifest (--manifest) in another order than the decode (NeMo's beams take the ids and "
             "references of the manifest's lines in order)", "a manifest of another set", _SHIFTED],
}


def _rate(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole else 0.0


def _overlap(hyp: Sequence[str], ref: Sequence[str]) -> int:
    return sum((Counter(hyp) & Counter(ref)).values())


@dataclass
class FirstPassCheck(JsonRecord):
    """The first pass (rank 1) of any input against the references (rates in percent)."""

    input: str
    format: str
    first_pass_wer: float
    token_overlap: float
    shifted_by: Optional[int] = None  # +1 / -1: rank 1 fits the next / previous utterance's reference
    shifted_overlap: Optional[float] = None
    line: str = ""
    warnings: List[str] = field(default_factory=list)


def first_pass_check(first_pass: Mapping[str, Sequence[str]], refs: Mapping[str, Sequence[str]],
                     source: str, fmt: str = "kaldi") -> Optional[FirstPassCheck]:
    """The first pass (utt -> rank-1 words, in the set's order) against the references: a
    warning naming the likely causes of ``fmt`` when it shares almost nothing with them (module
    doc). None when no utterance has a reference."""
    from rescore.metrics.wer import align

    utts = [u for u in first_pass if u in refs]
    if not utts:
        return None
    stats, _ = align({u: refs[u] for u in utts}, {u: first_pass[u] for u in utts})
    tokens = sum(len(first_pass[u]) for u in utts)
    found = sum(_overlap(first_pass[u], refs[u]) for u in utts)
    c = FirstPassCheck(source, fmt, stats.wer if stats.ref_words else 0.0, _rate(found, tokens))
    c.line = (f"first pass   {source}: WER {c.first_pass_wer:.2f} %, {c.token_overlap:.1f} % of its tokens in their "
              f"utterance's reference")
    if not (stats.ref_words and tokens) or (c.first_pass_wer <= MAX_FIRST_PASS_WER
                                            and c.token_overlap >= MIN_TOKEN_OVERLAP):
        return c
    for s in (1, -1):  # rank 1 against the reference of the utterance next to it
        pairs = [(utts[i], utts[i + s]) for i in range(len(utts)) if 0 <= i + s < len(utts)]
        n = sum(len(first_pass[u]) for u, _ in pairs)
        share = _rate(sum(_overlap(first_pass[u], refs[v]) for u, v in pairs), n)
        if share >= MIN_TOKEN_OVERLAP and share > SHIFT_FACTOR * c.token_overlap and \
                share > (c.shifted_overlap or 0.0):
            c.shifted_by, c.shifted_overlap = s, share
    causes = list(CAUSES.get(fmt, CAUSES["interchange"]))
    if c.shifted_by is not None:
        causes.insert(0, f"keys shifted by one: rank 1 of each utterance fits the reference of the utterance "
                         f"{'after' if c.shifted_by > 0 else 'before'} it ({c.shifted_overlap:.1f} % of its tokens "
                         f"found there)")
    c.warnings.append(f"the first pass (rank 1) of {source} has a WER of {c.first_pass_wer:.1f} % and only "
                      f"{c.token_overlap:.1f} % of its tokens are in their utterance's reference (a warning above "
                      f"{MAX_FIRST_PASS_WER:g} % WER or below {MIN_TOKEN_OVERLAP:g} % overlap): the hypotheses and "
                      f"the references do not belong together; likely causes: " + "; ".join(causes))
    return c


@dataclass
class TrainTextOverlap(JsonRecord):
    """The references found verbatim in the LM training text (rates in percent)."""

    train_text: str
    sentences: int
    sentences_found: int
    sentence_share: float
    ngram: int
    ngrams: int
    ngrams_found: int
    ngram_share: float
    line: str = ""
    warnings: List[str] = field(default_factory=list)


def _ngrams(words: Sequence[str], n: int = NGRAM):
    return zip(*(words[i:] for i in range(n)))


def train_text_overlap(refs: Mapping[str, Sequence[str]], sentences: Sequence[Sequence[str]],
                       train_text: str) -> TrainTextOverlap:
    """The share of the references (sentences, and NGRAM-grams) found verbatim in the training
    ``sentences`` (lists of words, as rescore.vocab.read_sentences gives them): one pass over
    them, hash sets only. A warning above MAX_SENTENCE_SHARE or MAX_NGRAM_SHARE."""
    t0 = time.process_time()
    ref_lists = [list(r) for r in refs.values() if r]
    ref_sentences = {tuple(r) for r in ref_lists}
    ref_ngrams: set = set()
    for r in ref_lists:
        ref_ngrams.update(_ngrams(r))
    seen_sentences: set = set()
    seen_ngrams: set = set()
    for s in sentences:
        if len(s) >= NGRAM:
            seen_ngrams.update(ref_ngrams.intersection(_ngrams(s)))
        t = tuple(s)
        if t in ref_sentences:
            seen_sentences.add(t)
    n_found = sum(1 for r in ref_lists if tuple(r) in seen_sentences)
    grams = [g for r in ref_lists for g in _ngrams(r)]
    g_found = sum(1 for g in grams if g in seen_ngrams)
    c = TrainTextOverlap(str(train_text), len(ref_lists), n_found, _rate(n_found, len(ref_lists)), NGRAM,
                         len(grams), g_found, _rate(g_found, len(grams)))
    c.line = (f"train text   {train_text}: holds {c.sentence_share:.1f} % of the reference sentences "
              f"({n_found} of {len(ref_lists)}) and {c.ngram_share:.1f} % of their {NGRAM}-grams verbatim")
    if c.sentence_share > MAX_SENTENCE_SHARE or c.ngram_share > MAX_NGRAM_SHARE:
        c.warnings.append(
            f"the LM training text {train_text} holds {c.sentence_share:.1f} % of the reference sentences "
            f"({n_found} of {len(ref_lists)}) and {c.ngram_share:.1f} % of their {NGRAM}-grams verbatim (a warning "
            f"above {MAX_SENTENCE_SHARE:g} % of the sentences or {MAX_NGRAM_SHARE:g} % of the {NGRAM}-grams): an LM "
            f"trained on it has seen the test references, so its WER is not a held-out figure; train without "
            f"the test set's text (and check --train-text is the LM's training text)")
    log.info("references against the training text: %.2f CPU-s", time.process_time() - t0)
    return c


def reference_checks(nbest, fmt: str = "kaldi", train_sentences: Optional[Sequence[Sequence[str]]] = None,
                     train_text: Optional[str] = None, first_pass: bool = True) -> List[JsonRecord]:
    """The checks of this module on a loaded N-best set with references (rescore.nbest.sets.NbestSet),
    their summary logged and their warnings logged as warnings; [] without references. first_pass:
    False where the symbol table check (rescore.nbest.checks) already compared the first pass."""
    if nbest.refs is None:
        return []
    checks: List[JsonRecord] = []
    if first_pass:
        first: Dict[str, Sequence[str]] = {u.id: u.hyps[0].words for u in nbest.utterances() if u.hyps}
        c = first_pass_check(first, nbest.refs, str(nbest.path), fmt)
        if c is not None:
            checks.append(c)
    if train_sentences is not None and train_text is not None:
        checks.append(train_text_overlap(nbest.refs, train_sentences, train_text))
    for c in checks:
        log.info("%s", " ".join(c.line.split()))
        for w in c.warnings:
            log.warning("%s", w)
    return checks
