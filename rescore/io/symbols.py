"""Kaldi symbol tables (``words.txt``: ``word id`` per line), read strictly."""

from __future__ import annotations

import contextlib
import gzip
import zlib
from pathlib import Path
from typing import Dict, Mapping, Optional

from rescore.errors import RescoreError
from rescore.io.files import file_key
from rescore.io.lines import PathLike, iter_lines, open_bytes
from rescore.vocab import UNK, Vocabulary


# The last tables read, by (file, inode, mtime, size): the jobs of one run read the same words.txt
# several times each (the N-best reader, the vocabulary checks), 0.1 s a time for 200k words.
_READ: Dict[tuple, Dict[str, int]] = {}
_KEEP = 4


def read_vocabulary(path: PathLike, unk: str = UNK) -> Vocabulary:
    """The Vocabulary of a Kaldi ``words.txt``: its words in id order, less ``<eps>``, ``<s>``,
    ``</s>`` and ``#n``, the recipe's OOV symbol ``unk`` as ``<unk>`` (Vocabulary.from_symbol_table)."""
    if not Path(path).is_file():
        raise RescoreError("an existing Kaldi words.txt", path=path)
    return Vocabulary.from_symbol_table(read_symbol_table(path), unk)


def read_symbol_table(path: PathLike) -> Dict[str, int]:
    """Read ``words.txt`` (``word id`` per line) into word -> id; duplicates are errors. A file
    read before and unchanged since (same modification time and size) is not parsed again; each
    call returns its own dict."""
    key = file_key(path)
    if key is not None and key in _READ:
        return dict(_READ[key])
    words = _symbol_table_in_bulk(path)
    if words is not None:
        if key is not None:
            while len(_READ) >= _KEEP:
                del _READ[next(iter(_READ))]
            _READ[key] = dict(words)
        return words
    words = {}  # a fault somewhere: line by line, to name it
    ids: Dict[int, int] = {}
    for lineno, line in iter_lines(path):
        fields = line.split()
        if len(fields) != 2 or not (fields[1].isascii() and fields[1].isdigit()):
            raise RescoreError("'word id' (two fields, id a non-negative integer)", path=path, line=lineno, got=line)
        w, i = fields[0], int(fields[1])
        if w in words:
            raise RescoreError(f"a unique word ('{w}' is already id {words[w]})", path=path, line=lineno, got=line)
        if i in ids:
            raise RescoreError(f"a unique id ({i} is already at line {ids[i]})", path=path, line=lineno, got=line)
        words[w] = i
        ids[i] = lineno
    if not words:
        raise RescoreError("at least one 'word id' line", path=path, got="an empty file")
    return words


def _symbol_table_in_bulk(path: PathLike) -> Optional[Dict[str, int]]:
    """read_symbol_table of a well-formed file, all lines at once; None at any irregularity
    (the line-by-line reader then names it)."""
    try:
        with contextlib.closing(open_bytes(path)) as f:
            text = f.read().decode("utf-8")
    except (RescoreError, EOFError, OSError, zlib.error, gzip.BadGzipFile, UnicodeDecodeError):
        return None
    lines = text.split("\n")  # (as iterating over the file splits it)
    if lines[-1] == "":
        lines.pop()
    rows = [ln.split() for ln in lines]
    if not rows or any(len(r) != 2 for r in rows):
        return None
    ids = [r[1] for r in rows]
    digits = "".join(ids)
    if not (digits.isascii() and digits.isdigit()):
        return None
    nums = list(map(int, ids))
    words = dict(zip((r[0] for r in rows), nums))
    if len(words) != len(rows) or len(set(nums)) != len(nums):  # a word or an id twice
        return None
    return words


def invert_symbol_table(words: Mapping[str, int]) -> Dict[int, str]:
    """id -> word."""
    return {i: w for w, i in words.items()}
