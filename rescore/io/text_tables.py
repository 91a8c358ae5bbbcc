"""Kaldi text tables (``ark,t``, optionally gzipped) read strictly, and the :class:`Table` that
every table reader of rescore.io.kaldi returns (the value types: rescore.io.kaldi's module doc).

A file is read in bulk: read whole, decoded at once, all its lines split into fields at once and
each kind's values checked over the whole file in a few C-level passes (the ASCII digits of
every id, the ASCII and ``_`` of every cost, one ``float()`` over all costs). A file with any
fault -- a read or gzip error, bytes that are not UTF-8, an empty line, a bad value -- is read
again line by line, which stops at the first fault in file order and names its line: the bulk
rules are those of the line reader (:func:`parse_float`, ``_parse_ints``), only applied to the
whole file at once, so both readers accept the same files with the same values and a fault
gets the same message either way (tests/io/test_fuzz_parsers.py holds them to it).

A reader given ``keep`` (a test on keys) reads every key but parses only the values of the keys
it keeps (``rescore-nbest --split``; rescore.io.kaldi's module doc): the keys are split off all
lines at once, only the kept lines decoded; a file with a key that is not printable ASCII is
read line by line, every line decoded.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

from rescore.bulk import gc_paused
from rescore.errors import RescoreError
from rescore.io.lines import decode_line, iter_lines, open_bytes, without_bom

PathLike = Union[str, Path]
Kind = str  # "float" | "ints" | "tokens"
Keep = Callable[[str], bool]  # a reader's test on keys: parse this entry's value?

KINDS = ("float", "ints", "tokens")
EXPECTED = {
    "float": "'key cost' (one finite float)",
    "ints": "'key id id ...' (non-negative integers)",
    "tokens": "'key word word ...'",
}


@dataclass
class Table:
    """One Kaldi table, in file order.

    keys[i] holds values[i] (None where a reader's ``keep`` rejected the key: not parsed);
    ``lines[i]`` is where entry i came from (text line, scp line, or binary entry number,
    1-based) so later cross-file checks can point at it. ``binary`` says whether lines[] are
    entry numbers of a binary archive rather than text lines.
    """

    path: str
    kind: Kind
    keys: List[str] = field(default_factory=list)
    values: list = field(default_factory=list)
    binary: bool = False

    @property
    def lines(self) -> range:
        # Entry i is line i + 1 (blank lines are errors), scp line i + 1, or binary entry i + 1.
        return range(1, len(self.keys) + 1)

    def __len__(self) -> int:
        return len(self.keys)

    def as_dict(self) -> Dict[str, object]:
        return dict(zip(self.keys, self.values))

    def error(self, i: int, expected: str, got: Optional[str] = None) -> RescoreError:
        """A RescoreError pointing at entry i of this table."""
        if self.binary:
            return RescoreError(expected, path=f"{self.path} (binary entry {self.lines[i]})", got=got)
        return RescoreError(expected, path=self.path, line=self.lines[i], got=got)

    def check_unique_keys(self) -> None:
        """Duplicate keys are an error at the second occurrence (one set() in C when all is well)."""
        if len(set(self.keys)) == len(self.keys):
            return
        first: Dict[str, int] = {}
        for i, k in enumerate(self.keys):
            if k in first:
                raise self.error(i, f"a unique key ('{k}' is already at {'entry' if self.binary else 'line'} "
                                    f"{self.lines[first[k]]})", got=k)
            first[k] = i


# --------------------------------------------------------------------------------------------
# Values, one line's fields at a time


def parse_float(tok: str) -> float:
    """A finite float as Kaldi writes it; ValueError otherwise."""
    # float() also takes '1_0', 'nan', 'inf' and unicode digits: Kaldi writes none of those.
    if "_" in tok or not tok.isascii():
        raise ValueError(tok)
    v = float(tok)
    if not math.isfinite(v):
        raise ValueError(tok)
    return v


def _parse_ints(toks: Sequence[str]) -> List[int]:
    if not toks:
        return []
    joined = "".join(toks)  # one C-level check for the whole vector: ASCII digits only
    if not (joined.isascii() and joined.isdigit()):
        raise ValueError(joined)
    return list(map(int, toks))


def _parse_one_float(fields: List[str]) -> float:
    if len(fields) != 1:
        raise ValueError(" ".join(fields))
    return parse_float(fields[0])


# kind -> parser of the fields after the key; each raises ValueError on a bad field.
_PARSERS = {"float": _parse_one_float, "ints": _parse_ints, "tokens": lambda fields: fields}


def parse_value(kind: Kind, fields: List[str]):
    """Parse the fields after the key; ValueError on a bad field."""
    return _PARSERS[kind](fields)


# --------------------------------------------------------------------------------------------
# Values, the whole file's at once: the parsers above applied to every row, None at any fault


def parse_floats(toks: List[str]) -> Optional[List[float]]:
    """parse_float of every token, or None where one of them fails."""
    joined = "".join(toks)  # parse_float's tests of each token, once for all of them
    if "_" in joined or not joined.isascii():
        return None
    try:
        values = list(map(float, toks))
    except ValueError:
        return None
    return values if all(map(math.isfinite, values)) else None


def _floats_in_bulk(rows: List[List[str]]) -> Optional[List[float]]:
    """_parse_one_float of every row (the fields after the key of each line)."""
    if any(len(r) != 1 for r in rows):
        return None
    return parse_floats([r[0] for r in rows])


def _ints_in_bulk(rows: List[List[str]]) -> Optional[List[List[int]]]:
    """_parse_ints of every row."""
    joined = "".join(map("".join, rows))
    if joined and not (joined.isascii() and joined.isdigit()):
        return None
    return [list(map(int, r)) for r in rows]


def _values_in_bulk(kind: Kind, rows: List[List[str]], allow_empty_value: bool) -> Optional[list]:
    """The values of every row of a ``kind`` table (rows: the fields after each key), or None
    where one of them is bad (the line-by-line reader names it)."""
    if not allow_empty_value and not all(rows):
        return None
    if kind == "float":
        return _floats_in_bulk(rows)
    if kind == "ints":
        return _ints_in_bulk(rows)
    return rows


# --------------------------------------------------------------------------------------------
# Reading


def read_text_table(path: PathLike, kind: Kind, allow_empty_value: bool = True,
                    keep: Optional[Keep] = None) -> Table:
    """Strictly read a Kaldi text table (``ark,t``, optionally gzipped).

    kind: "float" (one finite float per key), "ints" (non-negative int vector, may be empty),
    "tokens" (whitespace-separated strings, may be empty unless allow_empty_value=False).
    Blank lines, duplicate keys and bad fields raise RescoreError with file and line.
    keep: parse only the values of the keys it keeps (module doc); the others are None.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}")
    if keep is None:
        t = _read_text_in_bulk(path, kind, allow_empty_value)
    else:
        t = _read_text_share(path, kind, allow_empty_value, keep)
    return t if t is not None else _read_text_lines(path, kind, allow_empty_value, keep)


def text_table_lines(path: PathLike) -> Optional[List[str]]:
    """The lines of a text table read whole, as read_text_table cuts them: UTF-8 text cut at
    each newline. None where the line-by-line reader must name a fault: the file cannot be
    read whole (I/O, gzip) or is not UTF-8."""
    data = _read_whole(path)
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    lines = text.split("\n")  # (as iterating over the file splits it: at '\n' only)
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    return lines


def text_table_fields(path: PathLike) -> Optional[Tuple[List[str], List[List[str]]]]:
    """(keys, the fields after the key of each line) of a text table read whole, its lines
    (text_table_lines) split at whitespace as read_text_table splits them (str.split). None
    where the line-by-line reader must name a fault: the file cannot be read whole (I/O,
    gzip), is not UTF-8, or has an empty line."""
    lines = text_table_lines(path)
    if lines is None:
        return None
    with gc_paused():  # (a list per line, all alive at once: rescore.bulk)
        rows = list(map(str.split, lines))
    try:
        keys = list(map(list.pop, rows, itertools.repeat(0, len(rows))))  # each row's first field, off it
    except IndexError:  # (pop from an empty row) an empty line
        return None
    return keys, rows


def _read_whole(path: PathLike) -> Optional[bytes]:
    """The bytes of a file (gunzipped), or None where reading fails (the line reader names it)."""
    try:
        with contextlib.closing(open_bytes(path)) as f:
            data = f.read()
    except (RescoreError, EOFError, OSError, zlib.error, gzip.BadGzipFile):
        return None
    return without_bom(data)  # (as iter_lines)


def _read_text_in_bulk(path: PathLike, kind: Kind, allow_empty_value: bool) -> Optional[Table]:
    """read_text_table of a file without faults, in bulk (module doc); None at any fault but a
    duplicate key (that error is the same from either reader: found after every value is read)."""
    split = text_table_fields(path)
    if split is None:
        return None
    keys, rows = split
    with gc_paused():
        values = _values_in_bulk(kind, rows, allow_empty_value)
    if values is None:
        return None
    t = Table(path=str(path), kind=kind, keys=keys, values=values)
    t.check_unique_keys()
    return t


def _read_text_lines(path: PathLike, kind: Kind, allow_empty_value: bool, keep: Optional[Keep]) -> Table:
    """read_text_table line by line: the first fault in file order, named by its line."""
    t = Table(path=str(path), kind=kind)
    parse = _PARSERS[kind]
    keys, values = t.keys, t.values
    for lineno, line in iter_lines(path):
        fields = line.split()
        if not fields:
            raise RescoreError(EXPECTED[kind], path=path, line=lineno, got="an empty line")
        keys.append(fields[0])
        if keep is not None and not keep(fields[0]):
            values.append(None)
        else:
            values.append(_parse_fields(kind, parse, fields, line, path, lineno, allow_empty_value))
    t.check_unique_keys()
    return t


def _parse_fields(kind: Kind, parse, fields: List[str], line: str, path: PathLike, lineno: int,
                  allow_empty_value: bool):
    """The value of a text line split into fields (key first); a RescoreError names the line."""
    if not allow_empty_value and len(fields) == 1:
        raise RescoreError(EXPECTED[kind] + " with at least one value", path=path, line=lineno, got=line)
    try:
        return parse(fields[1:])
    except ValueError:
        raise RescoreError(EXPECTED[kind], path=path, line=lineno, got=line) from None


def _read_text_share(path: PathLike, kind: Kind, allow_empty_value: bool, keep: Keep) -> Optional[Table]:
    """read_text_table with keep, in bulk: the file read whole, the keys split off every line
    at once, only the kept lines decoded and parsed. None for a file that needs the line-by-line
    reader, which then gives the exact error: a read error, an empty line, a key that is not
    printable ASCII (where str.split() of the decoded line, the reader's rule, could cut it
    elsewhere; such a file is read line by line, every line decoded)."""
    data = _read_whole(path)
    if data is None:
        return None
    lines = data.split(b"\n")  # (as iterating over the file splits it)
    if lines[-1] == b"":
        lines.pop()  # the newline that ends the last line
    ended = len(lines) if data.endswith(b"\n") else len(lines) - 1  # lines that end in a newline
    try:
        key_bytes = [ln.split(None, 1)[0] for ln in lines]
    except IndexError:  # an empty line
        return None
    joined = b" ".join(key_bytes)
    if not joined.isascii():
        return None
    text = joined.decode("ascii")
    if not text.isprintable():  # (\x1c-\x1f: whitespace to str.split(), not to bytes.split())
        return None
    keys = text.split(" ") if lines else []
    t = Table(path=str(path), kind=kind, keys=keys, values=[None] * len(keys))
    parse = _PARSERS[kind]
    for i in itertools.compress(range(len(keys)), map(keep, keys)):
        line = decode_line(lines[i] + b"\n" if i < ended else lines[i], path, i + 1)  # (as iter_lines)
        t.values[i] = _parse_fields(kind, parse, line.split(), line, path, i + 1, allow_empty_value)
    t.check_unique_keys()
    return t
