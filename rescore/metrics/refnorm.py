"""References written another way than the hypotheses: raw transcripts (sentence case, commas,
full stops, typographic quotes) scored against a recognizer's normalised words count every such
word as an error.

* :func:`normalize_words` -- what a scoring filter does to a transcript before WER (Kaldi
  recipes' ``local/wer_output_filter``, ESPnet's ``lc.rm`` scoring; sclite compares the bytes
  that are left): typographic apostrophes and quotes mapped to ASCII first (``it’s`` is then
  ``it's``, not ``its``), lower case, punctuation stripped; an apostrophe or hyphen between two
  letters kept (``don't``, ``o'clock``, ``well-known``), and an apostrophe at the edge of a word
  kept when the recognizer's words have that form (``'cause``, ``rangers'``: ``vocabulary``, the
  hypotheses' words or words.txt); tokens of punctuation alone dropped; markup tokens
  (``<unk>``, ``[noise]``) kept as they are. ``rescore-nbest --normalize-refs``,
  ``rescore-tune --normalize-refs`` and ``rescore-wer --normalize-refs`` apply it to the references.
* :func:`reference_style_hint` -- a warning's text when the references carry punctuation or
  upper case that the hypotheses' words do not, naming the normalisation to apply. It is decided
  on the references' own words: a reference token counts when the hypotheses never have it as
  written but have its normalised form (``The`` where they have ``the``; ``it’s`` or ``cause,``
  where they have ``it's``, ``cause``), so hypotheses that write ``I`` and ``I'm`` do not hide
  references in sentence case, and hypotheses in upper case (ESPnet's LibriSpeech) do not make
  their references' misses look like a case mismatch.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from typing import AbstractSet, Collection, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence

KEPT_INSIDE = "'-"  # punctuation a word keeps between two of its letters (don't, well-known)
APOSTROPHE = "'"
# Typographic apostrophes and quotes -> ASCII (scoring compares bytes: ’ and ' make two words).
# U+02BC (modifier letter apostrophe) is a letter to Unicode, so only this map catches it.
TYPOGRAPHIC = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201b": "'", "\u02bc": "'", "\u2032": "'",
                             "\uff07": "'", "`": "'", "\u00b4": "'", "\u201c": '"', "\u201d": '"',
                             "\u201e": '"', "\u201f": '"', "\u00ab": '"', "\u00bb": '"', "\u2033": '"'})
STYLE_SHARE = 0.02  # a hint needs this share of the reference tokens written another way (2 WER points)
HYP_STYLE_SHARE = 0.001  # hypotheses with sentence punctuation in more than this share of tokens share it
NORMALIZE_OPTION = "--normalize-refs"


def _is_punct(ch: str) -> bool:
    return unicodedata.category(ch).startswith("P")


def _is_markup(word: str) -> bool:
    return len(word) > 2 and ((word[0] == "<" and word[-1] == ">") or (word[0] == "[" and word[-1] == "]"))


def ascii_quotes(word: str) -> str:
    """word with its typographic apostrophes and quotes as ASCII ones (TYPOGRAPHIC)."""
    return word.translate(TYPOGRAPHIC)


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


def _edge_forms(word: str) -> List[str]:
    """The forms of word (with ASCII quotes) that keep an apostrophe at one or both of
    its edges, most kept first: ``'rangers',`` -> ``'rangers'``, ``'rangers``, ``rangers'``."""
    core = strip_punctuation(word)
    if not core:
        return []
    i, j = 0, len(word)
    while i < j and _is_punct(word[i]) and word[i] != APOSTROPHE:  # other punctuation outside the apostrophes
        i += 1
    while j > i and _is_punct(word[j - 1]) and word[j - 1] != APOSTROPHE:
        j -= 1
    lead = word[i:i + 1] == APOSTROPHE and word[i + 1:i + 2].isalnum()
    trail = word[j - 1:j] == APOSTROPHE and word[j - 2:j - 1].isalnum()
    forms = []
    if lead and trail:
        forms.append(f"'{core}'")
    if lead:
        forms.append(f"'{core}")
    if trail:
        forms.append(f"{core}'")
    return forms


def _forms(w: str) -> Iterator[str]:
    """The forms of w a scoring filter may leave, those keeping an edge apostrophe first."""
    if APOSTROPHE in w:
        yield from _edge_forms(w)
    yield strip_punctuation(w)


def normalize_word(word: str, vocabulary: AbstractSet[str] = frozenset()) -> str:
    """One transcript word as a scoring filter leaves it (module doc); "" when nothing is left.
    vocabulary: the recognizer's words; the first of the word's forms (as written, then in lower
    case; with an edge apostrophe, then without) that it has is kept, so an ``I`` or ``I'm`` the
    hypotheses write stays so, and ``'cause`` keeps its apostrophe."""
    if _is_markup(word):
        return word
    w = ascii_quotes(word)
    if vocabulary:
        for cased in ((w,) if w.islower() else (w, w.lower())):
            for form in _forms(cased):
                if form in vocabulary:
                    return form
    return strip_punctuation(w.lower())


def normalize_words(words: Iterable[str], vocabulary: AbstractSet[str] = frozenset()) -> List[str]:
    """A transcript's words as a scoring filter leaves them (normalize_word)."""
    out = []
    for w in words:
        w = normalize_word(w, vocabulary)
        if w:
            out.append(w)
    return out


def normalize_refs(refs: Mapping[str, Sequence[str]],
                   vocabulary: Collection[str] = frozenset()) -> Dict[str, List[str]]:
    """utt -> its normalised reference words (normalize_words; vocabulary: the hypotheses' words
    and the words.txt words, whose edge apostrophes are kept)."""
    vocabulary = vocabulary if isinstance(vocabulary, AbstractSet) else frozenset(vocabulary)
    return {u: normalize_words(r, vocabulary) for u, r in refs.items()}


def _sentence_punctuated(w: str) -> bool:
    """w carries punctuation other than apostrophes and hyphens (commas, full stops, quotes)."""
    return not w.isalnum() and not _is_markup(w) and any(_is_punct(c) and c not in KEPT_INSIDE for c in ascii_quotes(w))


STYLES = ("punctuation", "upper case", "typographic quotes")


def _styles(w: str, norm: str, punctuation_shared: bool) -> List[str]:
    """How the reference token w is written otherwise than its normalised form norm (STYLES)."""
    out = []
    if ascii_quotes(w).lower() != norm.lower() and not punctuation_shared:
        out.append(STYLES[0])
    if [c for c in w if c.isalpha()] != [c for c in norm if c.isalpha()]:  # (the letters' case alone)
        out.append(STYLES[1])
    if ascii_quotes(w) != w:
        out.append(STYLES[2])
    return out


def reference_style_hint(ref_tokens: Iterable[str], hyp_tokens: Iterable[str],
                         vocabulary: Collection[str] = ()) -> Optional[str]:
    """The text of a warning when at least STYLE_SHARE of the reference tokens are written
    another way than the hypotheses' words (module doc): each is an error that normalising the
    references (--normalize-refs) removes. A token counts when neither the hypotheses nor
    ``vocabulary`` (words.txt) have it as written but they have its normalised form (or it is
    punctuation alone); sentence punctuation counts only when the hypotheses (almost) never
    carry any (otherwise both share that convention). None otherwise."""
    ref = Counter(ref_tokens)
    hyp = Counter(hyp_tokens)
    n_ref, n_hyp = sum(ref.values()), sum(hyp.values())
    if not n_ref or not n_hyp:
        return None
    words = set(hyp).union(vocabulary)
    punctuation_shared = sum(n for w, n in hyp.items() if _sentence_punctuated(w)) > HYP_STYLE_SHARE * n_hyp
    found: Dict[str, Counter] = {s: Counter() for s in STYLES}
    written = 0
    for w, n in ref.items():
        if w in words or (w.isalnum() and w.islower()) or _is_markup(w):
            continue  # (a word of lower-case letters and digits alone is its own normalised form)
        norm = normalize_word(w, words)
        if norm == w or (norm and norm not in words):
            continue  # written as the hypotheses write, or a word they do not have in any form
        styles = _styles(w, norm, punctuation_shared)
        for s in styles:
            found[s][w] += n
        written += n if styles else 0
    if written < STYLE_SHARE * n_ref:
        return None
    parts = [f"{s} ({100.0 * sum(c.values()) / n_ref:.1f} % of their tokens, e.g. '{c.most_common(1)[0][0]}')"
             for s, c in found.items() if c]
    return (f"the references carry {' and '.join(parts)} where the hypotheses' words do not, so each such word "
            f"counts as an error: normalise the references as a scoring filter does (typographic quotes as "
            f"ASCII, lower case, punctuation stripped: {NORMALIZE_OPTION}, or your recipe's "
            f"local/wer_output_filter)")
