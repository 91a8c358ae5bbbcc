"""References written another way than the hypotheses: raw transcripts (sentence case, commas,
full stops) scored against a recognizer's normalised words count every such word as an error.

* :func:`normalize_words` -- what a scoring filter does to a transcript before WER (Kaldi
  recipes' ``local/wer_output_filter``, ESPnet's ``lc.rm`` scoring): lower case, punctuation
  stripped (a word's inner apostrophes and hyphens kept: ``don't``, ``well-known``), tokens
  of punctuation alone dropped; markup tokens (``<unk>``, ``[noise]``) are kept as they are.
  ``rescore-nbest --normalize-refs`` and ``rescore-wer --normalize-refs`` apply it to the
  references.
* :func:`reference_style_hint` -- a warning's text when the references carry punctuation or
  upper case that the hypotheses never have, naming the normalisation to apply.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from typing import Dict, Iterable, List, Mapping, Optional, Sequence

KEPT_INSIDE = "'-"  # punctuation a word keeps inside it (don't, well-known)
STYLE_SHARE = 0.05  # a hint needs this share of the reference tokens written another way
HYP_STYLE_SHARE = 0.001  # ... and the hypotheses at most this share of theirs so written
NORMALIZE_OPTION = "--normalize-refs"


def _is_punct(ch: str) -> bool:
    return unicodedata.category(ch).startswith("P")


def _is_markup(word: str) -> bool:
    return len(word) > 2 and ((word[0] == "<" and word[-1] == ">") or (word[0] == "[" and word[-1] == "]"))


def strip_punctuation(word: str) -> str:
    """word without punctuation, but for apostrophes and hyphens between two of its letters."""
    if _is_markup(word) or not any(_is_punct(c) for c in word):
        return word
    chars = list(word)
    kept = []
    for i, c in enumerate(chars):
        if not _is_punct(c):
            kept.append(c)
        elif c in KEPT_INSIDE and 0 < i < len(chars) - 1 and chars[i - 1].isalnum() and chars[i + 1].isalnum():
            kept.append(c)
    return "".join(kept)


def normalize_words(words: Iterable[str]) -> List[str]:
    """A transcript's words as a scoring filter leaves them (module doc)."""
    out = []
    for w in words:
        if _is_markup(w):
            out.append(w)
            continue
        w = strip_punctuation(w.lower())
        if w:
            out.append(w)
    return out


def normalize_refs(refs: Mapping[str, Sequence[str]]) -> Dict[str, List[str]]:
    """utt -> its normalised reference words (normalize_words)."""
    return {u: normalize_words(r) for u, r in refs.items()}


def _punctuated(w: str) -> bool:
    return not _is_markup(w) and strip_punctuation(w) != w


def _cased(w: str) -> bool:
    return not _is_markup(w) and any(c.isupper() for c in w)


def reference_style_hint(ref_tokens: Iterable[str], hyp_tokens: Iterable[str]) -> Optional[str]:
    """The text of a warning when at least STYLE_SHARE of the reference tokens carry
    punctuation or upper case and the hypotheses (almost) never do: each such word is an error
    that normalising the references (--normalize-refs) removes. None otherwise."""
    ref = Counter(ref_tokens)
    hyp = Counter(hyp_tokens)
    n_ref, n_hyp = sum(ref.values()), sum(hyp.values())
    if not n_ref or not n_hyp:
        return None
    parts, tests = [], []
    for what, test in (("punctuation", _punctuated), ("upper case", _cased)):
        if sum(n for w, n in hyp.items() if test(w)) > HYP_STYLE_SHARE * n_hyp:
            continue  # the hypotheses have it too: a convention both share
        words = [(w, n) for w, n in ref.items() if test(w)]
        count = sum(n for _, n in words)
        if count:
            example = max(words, key=lambda x: x[1])[0]
            parts.append(f"{what} ({100.0 * count / n_ref:.1f} % of their tokens, e.g. '{example}')")
            tests.append(test)
    written = sum(n for w, n in ref.items() if any(t(w) for t in tests))
    if not parts or written < STYLE_SHARE * n_ref:
        return None
    return (f"the references carry {' and '.join(parts)} that the hypotheses never have, so each such word "
            f"counts as an error: normalise the references as a scoring filter does (lower case, punctuation "
            f"stripped: {NORMALIZE_OPTION}, or your recipe's local/wer_output_filter)")

