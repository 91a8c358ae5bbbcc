"""Reference normalisation as Kaldi recipes' scoring filters and sclite leave a transcript
(rescore.metrics.refnorm), and the warning that suggests it, decided on the references' words."""

from __future__ import annotations

import pytest

from rescore.metrics.refnorm import normalize_word, normalize_words, reference_style_hint

# The recognizer's words (a words.txt or the hypotheses'): the forms with an edge apostrophe it has.
VOCAB = frozenset({"it's", "'cause", "rangers'", "o'clock", "don't", "I'm", "I", "quoted", "'em", "well-known",
                   "the", "boys'"})

# (reference token, its normalised form with VOCAB, without any vocabulary)
TABLE = [
    ("it’s", "it's", "it's"),  # typographic apostrophe: ASCII first, then kept inside the word
    ("It’s", "it's", "it's"),
    ("itʼs", "it's", "it's"),  # U+02BC, a letter to Unicode
    ("'cause", "'cause", "cause"),  # a leading apostrophe the recognizer's words have
    ("’cause", "'cause", "cause"),
    ("rangers'", "rangers'", "rangers"),  # a trailing one
    ("Rangers’,", "rangers'", "rangers"),  # ... after a comma is stripped
    ("boys'.", "boys'", "boys"),
    ("o'clock", "o'clock", "o'clock"),  # inside a word: always kept
    ("don't", "don't", "don't"),
    ("Don’t", "don't", "don't"),
    ("‘quoted’", "quoted", "quoted"),  # typographic quotes around a word: not an apostrophe of it
    ("'quoted'", "quoted", "quoted"),
    ("“quoted”", "quoted", "quoted"),
    ("\"quoted\",", "quoted", "quoted"),
    ("I'm", "I'm", "i'm"),  # the case the recognizer writes, where it writes one
    ("I’m", "I'm", "i'm"),
    ("I", "I", "i"),
    ("The", "the", "the"),
    ("THE", "the", "the"),
    ("'em", "'em", "em"),
    ("'Em!", "'em", "em"),
    ("well-known", "well-known", "well-known"),
    ("-", "", ""),  # punctuation alone: dropped
    ("’", "", ""),
    ("<unk>", "<unk>", "<unk>"),  # markup kept as it is
    ("[noise]", "[noise]", "[noise]"),
]


@pytest.mark.parametrize("word,with_vocab,without", TABLE, ids=[t[0] for t in TABLE])
def test_normalize_word_table(word, with_vocab, without):
    assert normalize_word(word, VOCAB) == with_vocab
    assert normalize_word(word) == without


def test_normalize_words_drops_what_is_left_empty():
    assert normalize_words("“I’m here,” she said — ’cause .".split(), VOCAB) == \
        ["I'm", "here", "she", "said", "'cause"]


def test_style_hint_is_decided_on_the_references_words():
    refs = "The cat sat on the mat . I think it is here".split() * 20
    # hypotheses that write I (and I'm): a few capitals of their own
    hyps = "the cat sat on the mat i think I'm here I".split() * 20
    hint = reference_style_hint(refs, hyps)
    assert hint and "upper case" in hint and "'The'" in hint and "--normalize-refs" in hint
    # the references' I is written as the hypotheses write it: not counted
    assert "'I'" not in hint


def test_style_hint_quiet_when_both_share_the_convention():
    # upper-case references against upper-case hypotheses (ESPnet's LibriSpeech), with misses
    refs = "THE CAT SAT ON THE MAT BESIDE ZEBRA".split() * 20
    hyps = "THE CAT SAT ON A MAT BESIDE".split() * 20
    assert reference_style_hint(refs, hyps) is None
    # truecased hypotheses against truecased references
    assert reference_style_hint("The cat sat on the mat".split() * 20, "The cat sat on a mat".split() * 20) is None
    # edge apostrophes the hypotheses (or words.txt) have
    assert reference_style_hint("'cause the rangers' boat".split() * 20, "'cause a rangers' boat".split()) is None
    assert reference_style_hint("'cause the rangers' boat".split() * 20, "a boat the".split(),
                                vocabulary=VOCAB | {"rangers'"}) is None


def test_style_hint_names_typographic_apostrophes():
    refs = "it’s here and it’s there and it’s".split() * 10
    hint = reference_style_hint(refs, "it's here and it's there".split())
    assert hint and "typographic quotes" in hint and "it’s" in hint
    # an I'm written with a typographic apostrophe differs from the hypotheses' I'm by that alone
    hint = reference_style_hint("I’m here and I’m there".split() * 10, "I'm here and I'm there".split())
    said = hint.split(" where ")[0]  # (what the references carry; the advice names every step)
    assert said.startswith("the references carry typographic quotes") and "upper case" not in said \
        and "punctuation" not in said
