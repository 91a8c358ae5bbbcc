"""Checks that the references fit the hypotheses and are not in the LM's training text: mistakes
that still give a plausible-looking WER, so only a warning says them.

* :func:`first_pass_check` -- for every input format (a Kaldi dir of text archives, an
  TSV file, ESPnet, NeMo, icefall; a Kaldi dir of integer archives has the symbol table
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
* For each model, the same shares from the fingerprint of its training text that a checkpoint
  of rescore-train-lm records (:func:`text_fingerprint`: 64-bit hashes of every training
  sentence and of one in FINGERPRINT_SAMPLE of its 8-grams, plain tensors, read without
  executing code): the 8-gram share is then that of the reference 8-grams whose hash falls in
  the sample. Both are checked when both exist (a clean ``--train-text`` does not vouch for a
  model trained on another text). A checkpoint without a fingerprint (older, or imported), with
  an empty one or one of another version cannot be checked: :func:`fingerprint_check` says so
  and why, as a warning when no ``--train-text`` is checked instead.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence

from rescore.metrics.record import JsonRecord
from rescore.metrics.wer import align
from rescore.settings import is_hf_spec

log = logging.getLogger(__name__)

MAX_FIRST_PASS_WER = 90.0  # percent: a first pass worse than this does not belong to the references
MIN_TOKEN_OVERLAP = 20.0  # percent of first-pass tokens found in their utterance's reference
NGRAM = 8  # the long n-grams looked up in the training text
MAX_SENTENCE_SHARE = 10.0  # percent of the reference sentences found verbatim: a warning above
MAX_NGRAM_SHARE = 20.0  # percent of the reference NGRAM-grams found: a warning above
FINGERPRINT_SAMPLE = 16  # a fingerprint keeps the 8-grams whose hash is a multiple of this
FINGERPRINT_KEY = "train_text_fingerprint"  # its key in a checkpoint
FINGERPRINT_VERSION = 1  # the fingerprint this code writes and reads
SHIFT_FACTOR = 2.0  # a neighbour's reference this many times the overlap of its own: shifted keys

# The likely causes of a first pass that does not fit the references, by input format.
_SHIFTED = "the hypotheses keyed as other utterances (keys shifted, e.g. an off-by-one in a script that renamed them)"
_OTHER = "references of another set, or the N-best of another decode (other audio)"
CAUSES = {
    "kaldi": [_SHIFTED, f"a data dir (--data-dir) that is not the decoded set's: {_OTHER}",
              "a words_text made through a wrong words.txt"],
    "tsv": [_SHIFTED, _OTHER],
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
    causes = list(CAUSES.get(fmt, CAUSES["tsv"]))
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


def _ngrams(words: Sequence[str], n: int = NGRAM):  # (tuples of n words, in order)
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
    c = _overlap_record(str(train_text), ref_lists, n_found, NGRAM, len(grams), g_found)
    log.info("references against the training text: %.2f CPU-s", time.process_time() - t0)
    return c


def _overlap_record(where: str, ref_lists: List[List[str]], n_found: int, n: int, n_grams: int,
                    g_found: int) -> TrainTextOverlap:
    c = TrainTextOverlap(where, len(ref_lists), n_found, _rate(n_found, len(ref_lists)), n, n_grams, g_found,
                         _rate(g_found, n_grams))
    c.line = (f"train text   {where}: holds {c.sentence_share:.1f} % of the reference sentences "
              f"({n_found} of {len(ref_lists)}) and {c.ngram_share:.1f} % of their {n}-grams verbatim")
    if c.sentence_share > MAX_SENTENCE_SHARE or c.ngram_share > MAX_NGRAM_SHARE:
        c.warnings.append(
            f"the LM training text {where} holds {c.sentence_share:.1f} % of the reference sentences "
            f"({n_found} of {len(ref_lists)}) and {c.ngram_share:.1f} % of their {n}-grams verbatim (a warning "
            f"above {MAX_SENTENCE_SHARE:g} % of the sentences or {MAX_NGRAM_SHARE:g} % of the {n}-grams): an LM "
            f"trained on it has seen the test references, so its WER (or perplexity) on them is not a held-out "
            f"figure; train without the test set's text (and check --train-text is the LM's training text)")
    return c


def _hash(words: Sequence[str]) -> int:
    """A signed 64-bit hash of a word sequence, the same in every process and run."""
    return int.from_bytes(hashlib.blake2b(" ".join(words).encode("utf-8"), digest_size=8).digest(), "little",
                          signed=True)


def text_fingerprint(sentences: Sequence[Sequence[str]]) -> dict:
    """What a checkpoint records of its training text for the check of the references against
    it (module doc): sorted int64 tensors of the hashes of every sentence and of the sampled
    NGRAM-grams."""
    import torch  # (lazy: keeps torch out of the reference checks; only the training loop fingerprints)

    sent = {_hash(s) for s in sentences if s}
    grams = set()
    for s in sentences:
        if len(s) >= NGRAM:
            grams.update(h for h in map(_hash, _ngrams(s)) if h % FINGERPRINT_SAMPLE == 0)
    return {"version": FINGERPRINT_VERSION, "ngram": NGRAM, "sample": FINGERPRINT_SAMPLE,
            "sentences": torch.tensor(sorted(sent), dtype=torch.int64),
            "ngrams": torch.tensor(sorted(grams), dtype=torch.int64)}


def fingerprint_overlap(refs: Mapping[str, Sequence[str]], fingerprint: Mapping, model: str) -> TrainTextOverlap:
    """train_text_overlap from a checkpoint's fingerprint of its training text (text_fingerprint)."""
    t0 = time.process_time()
    sentences = set(fingerprint["sentences"].tolist())
    grams = set(fingerprint["ngrams"].tolist())
    sample, n = int(fingerprint["sample"]), int(fingerprint["ngram"])
    ref_lists = [list(r) for r in refs.values() if r]
    n_found = sum(1 for r in ref_lists if _hash(r) in sentences)
    sampled = [h for r in ref_lists for h in map(_hash, _ngrams(r, n)) if h % sample == 0]
    g_found = sum(1 for h in sampled if h in grams)
    where = f"of {model} (by the fingerprint its checkpoint records)"
    c = _overlap_record(where, ref_lists, n_found, n, len(sampled), g_found)
    log.info("references against the fingerprint of %s: %.2f CPU-s", model, time.process_time() - t0)
    return c


@dataclass
class FingerprintMissing(JsonRecord):
    """A model whose training text could not be checked: why (no fingerprint, an empty one, one of
    another version)."""

    model: str
    reason: str
    line: str = ""
    warnings: List[str] = field(default_factory=list)


def unusable_fingerprint(fp) -> Optional[str]:
    """Why a checkpoint's fingerprint (its FINGERPRINT_KEY value, None when absent) cannot be
    checked against, or None when it can."""
    if fp is None:
        return "its checkpoint records no fingerprint of its training text (a checkpoint of an older rescore, " \
               "or imported)"
    if not isinstance(fp, Mapping) or fp.get("version") != FINGERPRINT_VERSION:
        version = fp.get("version") if isinstance(fp, Mapping) else type(fp).__name__
        return f"its fingerprint of the training text is of version {version!r}; this rescore reads version " \
               f"{FINGERPRINT_VERSION}"
    try:
        empty = len(fp["sentences"]) == 0
        int(fp["sample"]), int(fp["ngram"]), len(fp["ngrams"])
    except (KeyError, TypeError, ValueError):
        return "its fingerprint of the training text lacks its hashes (sentences, ngrams, sample, ngram)"
    if empty:
        return "its fingerprint of the training text is empty (no sentence hashed)"
    return None


def fingerprint_check(refs: Mapping[str, Sequence[str]], fp, model: str, train_text: Optional[str] = None):
    """fingerprint_overlap of the model's checkpoint fingerprint ``fp``, or a FingerprintMissing
    saying why it could not run: a warning when there is no training text (``train_text``) to
    check against instead, a line of the log otherwise."""
    reason = unusable_fingerprint(fp)
    if reason is None:
        return fingerprint_overlap(refs, fp, model)
    c = FingerprintMissing(model, reason)
    if train_text is None:
        c.line = f"train text   {model}: not checked"
        c.warnings.append(f"the references could not be checked against the training text of {model}: {reason}; "
                          f"give its training text (--train-text) to check that the LM has not seen them")
    else:
        c.line = f"train text   {model}: its own fingerprint not checked ({reason}); checked against {train_text}"
    return c


def training_text_checks(refs: Mapping[str, Sequence[str]], train_sentences: Optional[Sequence[Sequence[str]]] = None,
                         train_text: Optional[str] = None, models: Sequence[str] = ()) -> List[JsonRecord]:
    """The references against every training text known: ``train_sentences`` of ``train_text``
    (--train-text) and the fingerprint each of ``models``' checkpoints records (both when both
    exist; a Hugging Face LM records none: its training text is not known here)."""
    checks: List[JsonRecord] = []
    if train_sentences is not None and train_text is not None:
        checks.append(train_text_overlap(refs, train_sentences, str(train_text)))
    for m in models:
        if is_hf_spec(m):
            log.info("train text   %s: a pretrained LM, its training text not known here (not checked)", m)
            continue
        from rescore.models import read_checkpoint  # (lazy: keeps torch out of the reference checks)

        fp = read_checkpoint(m, "cpu", keep=True).get(FINGERPRINT_KEY)
        checks.append(fingerprint_check(refs, fp, str(m), train_text))
    return checks


def reference_checks(nbest, fmt: str = "kaldi", train_sentences: Optional[Sequence[Sequence[str]]] = None,
                     train_text: Optional[str] = None, first_pass: bool = True,
                     models: Sequence[str] = ()) -> List[JsonRecord]:
    """The checks of this module on a loaded N-best set with references (rescore.nbest.sets.NbestSet),
    unlogged; [] without references. first_pass: False where the symbol table check
    (rescore.nbest.checks) already compared the first pass. models: the LM checkpoints whose
    fingerprints are checked (training_text_checks)."""
    if nbest.refs is None:
        return []
    checks: List[JsonRecord] = []
    if first_pass:
        first: Dict[str, Sequence[str]] = {u.id: u.hyps[0].words for u in nbest.utterances() if u.hyps}
        c = first_pass_check(first, nbest.refs, str(nbest.path), fmt)
        if c is not None:
            checks.append(c)
    checks += training_text_checks(nbest.refs, train_sentences, train_text, models)
    return checks
