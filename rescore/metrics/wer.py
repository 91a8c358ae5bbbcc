"""WER and alignment: corpus edit counts from jiwer's alignment, N-best oracle WER.

WER comes from jiwer's alignment; the oracle, which needs one edit distance per hypothesis, from
rapidfuzz's Levenshtein on token lists (jiwer is too slow there). Both minimise the same total
S + D + I, so the figures agree.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from rescore.errors import RescoreError

log = logging.getLogger(__name__)

PathLike = Union[str, Path]


@dataclass
class WerStats:
    """Corpus-level edit counts; wer is in percent."""

    substitutions: int = 0
    deletions: int = 0
    insertions: int = 0
    ref_words: int = 0
    num_utts: int = 0

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def wer(self) -> float:
        """Percent; 0 reference words with errors gives inf, without errors 0."""
        if self.ref_words == 0:
            return 0.0 if self.errors == 0 else math.inf
        return 100.0 * self.errors / self.ref_words

    def as_dict(self) -> dict:
        return {"wer": self.wer, "errors": self.errors, "substitutions": self.substitutions,
                "deletions": self.deletions, "insertions": self.insertions,
                "ref_words": self.ref_words, "num_utts": self.num_utts}


@dataclass
class Alignment:
    """One utterance's alignment: reference words in error, and inserted hypothesis words."""

    ref: List[str]
    hyp: List[str]
    ref_errors: List[str] = field(default_factory=list)  # substituted or deleted ref words
    inserted: List[str] = field(default_factory=list)  # inserted hyp words
    substituted: List[str] = field(default_factory=list)  # substituted ref words
    deleted: List[str] = field(default_factory=list)  # deleted ref words
    substitutions: int = 0
    deletions: int = 0


def check_scorable(refs: Mapping[str, Sequence[str]], hyps: Mapping[str, Sequence[str]],
                   ref_path: Optional[PathLike] = None, hyp_path: Optional[PathLike] = None) -> None:
    """What a WER of files needs: WER is errors per reference word, undefined without reference
    words, and an empty hypothesis file is a mistake (a failed decode), not a WER of 100 %."""
    if not refs:
        raise RescoreError("at least one reference ('utt w1 w2 ...' line)", path=ref_path, got="an empty file")
    if not hyps:
        raise RescoreError("at least one hypothesis ('utt w1 w2 ...' line)", path=hyp_path, got="an empty file")
    if not any(len(r) for r in refs.values()):
        raise RescoreError("references with at least one word (WER is undefined on none)", path=ref_path,
                           got=f"{len(refs)} empty references")


DATA_DIR_FILES = ("utt2spk", "spk2utt", "segments")


def warn_suspect_inputs(refs: Mapping[str, Sequence[str]], hyps: Mapping[str, Sequence[str]],
                        ref_path: Optional[PathLike] = None, hyp_path: Optional[PathLike] = None) -> None:
    """Warn of a hypothesis file that is probably not one: a Kaldi data dir's ``text`` (the
    references given as HYP_TEXT, REF and HYP swapped), or word ids where the references have
    words (a decode's 1-best without its int2sym.pl step). Each can be right (any two texts can
    be compared; digits can be words), so they are warned, not refused. The checks every command
    makes of references (their style, a first pass that does not fit them, the training text)
    are rescore.nbest.checks'."""
    if hyp_path is not None:
        hp = Path(hyp_path)
        beside = [n for n in DATA_DIR_FILES if (hp.parent / n).exists()]
        if hp.name == "text" and beside:
            log.warning("HYP_TEXT %s is the 'text' of a Kaldi data dir (%s beside it): references given as the "
                        "hypothesis? rescore-wer takes REF_TEXT first; were the two swapped?", hyp_path,
                        ", ".join(beside))
    hyp_words = [w for ws in hyps.values() for w in ws]
    ref_words = [w for ws in refs.values() for w in ws]
    if hyp_words and all(w.isdigit() for w in hyp_words) and not all(w.isdigit() for w in ref_words):
        log.warning("every word of %s is an integer while the references have words: word ids, not words? "
                    "(map them with words.txt: utils/int2sym.pl -f 2- words.txt)", hyp_path or "the hypotheses")


def _check_keys(refs: Mapping[str, Sequence[str]], hyps: Mapping[str, Sequence[str]],
                allow_missing: bool, ref_path: Optional[PathLike], hyp_path: Optional[PathLike]) -> List[str]:
    missing = [u for u in refs if u not in hyps]
    extra = [u for u in hyps if u not in refs]
    if not allow_missing:
        if missing:
            raise RescoreError(f"a hypothesis for every reference; {len(missing)} missing, e.g. '{missing[0]}'",
                               path=hyp_path)
        if extra:
            raise RescoreError(f"only utterances that have a reference; {len(extra)} extra, e.g. '{extra[0]}'",
                               path=hyp_path if hyp_path is not None else ref_path)
    # allow_missing: a reference without hypothesis scores as all deletions (empty hypothesis);
    # a hypothesis without reference is left out.
    return list(refs)


def align(refs: Mapping[str, Sequence[str]], hyps: Mapping[str, Sequence[str]], *,
          allow_missing: bool = False, ref_path: Optional[PathLike] = None,
          hyp_path: Optional[PathLike] = None) -> Tuple[WerStats, Dict[str, Alignment]]:
    """Align hypotheses to references (utt -> token lists) with jiwer; corpus counts + per-utt."""
    import jiwer  # (lazy: keeps jiwer out of the commands' start-up)

    utts = _check_keys(refs, hyps, allow_missing, ref_path, hyp_path)
    stats = WerStats(num_utts=len(utts))
    out: Dict[str, Alignment] = {}
    if not utts:
        return stats, out
    ref_l = [list(refs[u]) for u in utts]
    hyp_l = [list(hyps.get(u, [])) for u in utts]
    # Tokens never contain whitespace (they come from splitting), so joining and letting jiwer
    # split again is the identity; jiwer 4 wants strings.
    tr = jiwer.Compose([jiwer.ReduceToListOfListOfWords()])
    o = jiwer.process_words([" ".join(r) for r in ref_l], [" ".join(h) for h in hyp_l],
                            reference_transform=tr, hypothesis_transform=tr)
    for u, r, h, chunks in zip(utts, ref_l, hyp_l, o.alignments):
        a = Alignment(r, h)
        for c in chunks:
            if c.type == "substitute":
                a.substituted += r[c.ref_start_idx:c.ref_end_idx]
                a.ref_errors += r[c.ref_start_idx:c.ref_end_idx]
                a.substitutions += c.ref_end_idx - c.ref_start_idx
            elif c.type == "delete":
                a.deleted += r[c.ref_start_idx:c.ref_end_idx]
                a.ref_errors += r[c.ref_start_idx:c.ref_end_idx]
                a.deletions += c.ref_end_idx - c.ref_start_idx
            elif c.type == "insert":
                a.inserted += h[c.hyp_start_idx:c.hyp_end_idx]
        out[u] = a
        stats.substitutions += a.substitutions
        stats.deletions += a.deletions
        stats.insertions += len(a.inserted)
        stats.ref_words += len(r)
    return stats, out


def word_errors(ref: Sequence[str], hyp: Sequence[str]) -> int:
    """Levenshtein distance between two token lists (S + D + I), via rapidfuzz."""
    from rapidfuzz.distance import Levenshtein  # (lazy: keeps rapidfuzz out of the commands' start-up)

    return Levenshtein.distance(ref, hyp)


def word_errors_of_each(ref: Sequence[str], hyps: Sequence[Sequence[str]]) -> List[int]:
    """word_errors(ref, h) of each of hyps (an N-best list), in one rapidfuzz call."""
    from rapidfuzz.distance import Levenshtein  # (lazy: keeps rapidfuzz out of the commands' start-up)
    from rapidfuzz.process import cdist  # (lazy: likewise)

    if not hyps:
        return []
    return cdist([ref], hyps, scorer=Levenshtein.distance, dtype=np.int64)[0].tolist()


def oracle_errors(ref: Sequence[str], hyps: Iterable[Sequence[str]]) -> int:
    """Fewest word errors of any hypothesis against ref."""
    return min(word_errors_of_each(ref, list(hyps)))


def oracle_wer(refs: Mapping[str, Sequence[str]], nbests: Mapping[str, Sequence[Sequence[str]]]) -> float:
    """N-best oracle WER in percent: per utterance the hypothesis with the fewest errors."""
    errs = sum(oracle_errors(refs[u], nbests[u]) for u in refs)
    n = sum(len(r) for r in refs.values())
    return 100.0 * errs / n if n else 0.0
