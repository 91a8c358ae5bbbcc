"""Words that differ only by letter case or Unicode normalisation: the hints that name such a
convention mismatch, between an LM vocabulary and hypotheses (rescore.nbest.checks) or between
references and hypotheses (rescore.metrics.wer)."""

from __future__ import annotations

import unicodedata
from collections import Counter
from typing import Collection, Iterable, Optional, Tuple


def _case_style(words: Iterable[str]) -> str:
    """'upper-case', 'lower-case' or 'mixed-case': how the words with letters are written."""
    c = Counter("upper" if w.isupper() else "lower" if w.islower() else "mixed" for w in words
                if any(ch.isalpha() for ch in w))
    total = sum(c.values())
    for style in ("upper", "lower"):
        if total and c[style] >= 0.9 * total:
            return f"{style}-case"
    return "mixed-case"


def _form(words: Iterable[str]) -> str:
    """'NFC', 'NFD' or 'mixed': the normalisation form of the words that it changes."""
    forms = Counter("NFC" if unicodedata.is_normalized("NFC", w) else "NFD" if unicodedata.is_normalized("NFD", w)
                    else "other" for w in words if unicodedata.normalize("NFC", w) != unicodedata.normalize("NFD", w))
    return forms.most_common(1)[0][0] if len(forms) == 1 else "mixed"


def _spelling_cause(vocab: Collection[str], oov: Counter) -> Tuple[Optional[str], int]:
    """('form' or 'case', the oov tokens it explains) when Unicode normalisation or letter case
    explains at least half of the tokens outside vocab; else (None, the larger count)."""
    total = sum(oov.values())
    folded = {w.casefold() for w in vocab}
    by_case = sum(n for w, n in oov.items() if w.casefold() in folded)
    by_form = sum(n for w, n in oov.items()
                  if unicodedata.normalize("NFC", w) in vocab or unicodedata.normalize("NFD", w) in vocab)
    if by_form >= total / 2 and by_form >= by_case:
        return "form", by_form
    if by_case >= total / 2:
        return "case", by_case
    return None, max(by_case, by_form)


def spelling_hint(vocab: Collection[str], oov: Counter, what: str = "hypotheses") -> Optional[str]:
    """Why most tokens outside vocab (oov: word -> tokens) are outside it, when it is letter
    case or Unicode normalisation; None when neither explains at least half of them."""
    if not oov:
        return None
    cause, _ = _spelling_cause(vocab, oov)
    if cause == "form":
        return (f"the {what}' words differ from the LM vocabulary's only by Unicode normalisation "
                f"({what} {_form(oov)}, vocabulary {_form(vocab)}): normalise both the same way "
                f"(e.g. NFC: uconv -x any-nfc, or unicodedata.normalize)")
    if cause == "case":
        return (f"the {what} look {_case_style(oov)} while the LM vocabulary is {_case_style(vocab)}: "
                f"map the case of one to the other's")
    return None


REF_SPELLING_SHARE = 0.05  # a reference/hypothesis spelling hint needs this share of reference tokens


def reference_spelling_hint(ref_tokens: Iterable[str], hyp_words: Collection[str]) -> Optional[str]:
    """Why the references' words are not the hypotheses' (hyp_words: the words the hypotheses
    use), when letter case or Unicode normalisation explains it: the references of another
    convention score every such word as an error. None when the words case or form explains are
    under REF_SPELLING_SHARE of the reference tokens, or under half of those outside hyp_words."""
    ref = Counter(ref_tokens)
    oov = Counter({w: n for w, n in ref.items() if w not in hyp_words})
    if not oov:
        return None
    cause, explained = _spelling_cause(hyp_words, oov)
    if explained < REF_SPELLING_SHARE * sum(ref.values()):  # a few odd spellings, not a convention
        return None
    if cause == "form":
        return (f"the references' words differ from the hypotheses' only by Unicode normalisation (references "
                f"{_form(oov)}, hypotheses {_form(hyp_words)}), so each counts as an error: normalise both the same "
                f"way (e.g. NFC: uconv -x any-nfc)")
    if cause == "case":
        return (f"the references look {_case_style(oov)} while the hypotheses are {_case_style(hyp_words)}, so "
                f"each such word counts as an error: map the case of one to the other's")
    return None
