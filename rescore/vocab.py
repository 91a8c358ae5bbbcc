"""Word vocabulary: the most frequent training words (or a Kaldi ``words.txt``) plus ``<eos>``/``<unk>``.

``encode`` also gives word *identities* (see rescore.models.base): in-vocabulary words have their
vocabulary id as identity, and every distinct out-of-vocabulary word gets its own identity
``len(vocab) + k`` (k-th distinct OOV word this object has seen), so a pointer head can copy an
OOV word that occurs in its history.
"""

from __future__ import annotations

import gzip
import itertools
import zlib
from collections import Counter
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple, Union

from rescore.bulk import gc_paused
from rescore.errors import RescoreError

EOS = "<eos>"  # the one sentence-boundary symbol: first input and last target of a sentence
UNK = "<unk>"  # every out-of-vocabulary word has this vocabulary id

# Kaldi symbols that are not words of a sentence: epsilon, sentence boundaries, disambiguation.
_KALDI_NON_WORDS = {"<eps>", "<s>", "</s>"}


def read_sentences(path: Union[str, Path]) -> List[List[str]]:
    """One sentence per line, words separated by whitespace; empty lines are skipped.

    ``<s>``/``</s>`` around a line are dropped: the boundary is modelled by ``<eos>`` alone.
    """
    path = Path(path)
    if not path.is_file():
        raise RescoreError("an existing text file, one sentence per line", path=path)
    try:
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":  # a gzipped text (train.txt.gz), as Kaldi recipes keep them
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as e:
        raise RescoreError("a readable text file (plain or gzip)", path=path,
                           got=getattr(e, "strerror", None) or str(e)) from None
    try:
        lines = data.decode("utf-8-sig").split("\n")  # (a leading BOM dropped; the whole text at once, as a rule)
    except UnicodeDecodeError:
        raise _utf8_error(data, path) from None
    sentences = []
    with gc_paused():  # (a list per sentence, all alive at once: rescore.bulk)
        for words in map(str.split, lines):
            if words and words[0] == "<s>":
                words = words[1:]
            if words and words[-1] == "</s>":
                words = words[:-1]
            if words:
                sentences.append(words)
    return sentences


def _utf8_error(data: bytes, path: Path) -> RescoreError:
    """The error of text that is not UTF-8: it names the first bad line, and the byte and column."""
    for n, raw in enumerate(data.split(b"\n"), 1):  # (UTF-8 never spans a newline: a line is bad)
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as e:
            return RescoreError("UTF-8 text", path=path, line=n,
                                got=f"byte {raw[e.start]:#04x} at column {e.start + 1}")
    return RescoreError("UTF-8 text", path=path)


class Vocabulary:
    """Words <-> ids. Id 0 is ``<eos>``, id 1 is ``<unk>``, then the words.

    >>> v = Vocabulary(["<eos>", "<unk>", "the", "cat"])
    >>> v.encode(["the", "dog", "cat", "dog", "<unk>"])
    ([2, 1, 3, 1, 1], [2, 4, 3, 4, 1])
    """

    def __init__(self, words: Iterable[str]):
        self.words: List[str] = list(words)
        self.index: Dict[str, int] = dict(zip(self.words, range(len(self.words))))
        if len(self.index) != len(self.words):  # a word twice: name the first
            seen: set = set()
            for w in self.words:
                if w in seen:
                    raise RescoreError("distinct vocabulary words", got=w)
                seen.add(w)
        for special in (EOS, UNK):
            if special not in self.index:
                raise RescoreError(f"the symbol {special} in the vocabulary")
        self.eos_id = self.index[EOS]
        self.unk_id = self.index[UNK]
        self._oov: Dict[str, int] = {}  # OOV word -> identity, grows in order of first sight

    @classmethod
    def from_text(cls, path: Union[str, Path], max_size: Optional[int] = None) -> "Vocabulary":
        """The ``max_size`` most frequent words of a training text (all words if None).

        ``max_size`` counts ``<eos>`` and ``<unk>``. Ties are broken alphabetically so the result
        does not depend on anything but the counts.
        """
        counts = count_words(read_sentences(path))
        counts.pop(EOS, None)
        counts.pop(UNK, None)
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        words = [w for w, _ in ranked]
        if max_size is not None:
            if max_size < 3:
                raise RescoreError("a vocabulary size of at least 3", got=str(max_size))
            words = words[: max_size - 2]
        return cls([EOS, UNK] + words)

    @classmethod
    def from_symbol_table(cls, ids: Dict[str, int], unk: str = UNK) -> "Vocabulary":
        """The words of a Kaldi symbol table (word -> id, as rescore.io.symbols.read_symbol_table
        reads ``words.txt``; rescore.io.symbols.read_vocabulary reads one into a Vocabulary), in
        id order.

        ``<eps>``, ``<s>``, ``</s>`` and disambiguation symbols (``#0``...) are left out; the
        recipe's OOV symbol ``unk`` becomes our ``<unk>``.
        """
        left_out = _KALDI_NON_WORDS | {EOS, UNK, unk}
        words = [w for w in sorted(ids, key=ids.__getitem__) if w not in left_out and not w.startswith("#")]
        return cls([EOS, UNK] + words)

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: str) -> bool:
        return word in self.index

    def encode(self, words: List[str]) -> Tuple[List[int], List[int]]:
        """(vocabulary ids, identities) of ``words``, two new lists; see the module docstring."""
        ids = list(map(self.index.get, words))
        if None not in ids:  # every word in the vocabulary: identity = id
            return ids, ids.copy()
        ids, ident = [], []
        unk = self.unk_id
        for w in words:
            i = self.index.get(w)
            if i is not None:
                ids.append(i)
                ident.append(i)
            else:
                ids.append(unk)
                k = self._oov.get(w)
                if k is None:
                    k = self._oov[w] = len(self.words) + len(self._oov)
                ident.append(k)
        return ids, ident


def count_words(sentences: Iterable[List[str]]) -> Counter:
    """Word counts of tokenized sentences."""
    return Counter(itertools.chain.from_iterable(sentences))  # (one C-level count)
