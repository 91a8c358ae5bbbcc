"""Kaldi tables as N-best rescoring leaves them: strict readers and writers.

Three value types cover an N-best dir (``nbest-to-linear`` + ``int2sym.pl``):

* ``"float"``  -- one cost per key (``acwt``, ``lmwt.withlm``, ``lmwt.nolm``): ``key 909.8809 ``
* ``"ints"``   -- an int vector per key (``words``, ``ali``): ``key 14722 946 `` (empty: ``key ``)
* ``"tokens"`` -- a token list per key (``words_text``, ``data/text``): ``key it is``

Kaldi ends every text-archive line with a space; hand-made files (and the shared benchmark) do
not: both are accepted. Containers:

* text archives (``ark,t``), optionally gzipped -- read by our strict reader, because kaldiio's
  text mode guesses types from the first token (``1e-05`` fails, empty int vectors swallow the
  next line);
* binary archives (``ark``), optionally gzipped -- int vectors through kaldiio; float scalars
  (``\\0B`` ``\\4`` + little-endian float32) by a few lines of our own, since kaldiio misreads
  them as int vectors;
* ``scp`` indexes (``key file.ark:offset``) pointing at either of the above.

Every error is a :class:`~rescore.errors.RescoreError` naming the file and the line (text and
scp) or the entry number (binary archives).

A reader given ``keep`` (a test on keys) reads every key but parses only the values of the keys
it keeps: the others are ``None`` in :attr:`Table.values`, their lines split no further than the
key (a binary entry is walked over, an scp's archive not opened for them). Errors of keys and of
the container (empty line, duplicate key, bad scp line, broken binary entry, truncated gzip) are
found everywhere, errors of values only in kept entries, each with the message and line a full
read gives. ``rescore-nbest --split`` reads its share of an N-best dir this way.

Text archives are read by :mod:`rescore.io.text_tables` (in bulk; a file with a fault again
line by line, to name it), which also holds :class:`Table`; symbol tables (``words.txt``) by
:mod:`rescore.io.symbols`; lines are opened and decoded by :mod:`rescore.io.lines`. All are
re-exported here.

Outputs go through :func:`rescore.io.files.atomic_output`: a temporary file in the target
directory renamed into place, so nothing is left half-written.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import itertools
import math
import mmap
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from rescore.errors import RescoreError
from rescore.io.files import atomic_output  # noqa: F401  (the one atomic write; re-exported)
from rescore.io.lines import GZIP_MAGIC, decode_line, iter_lines, open_bytes  # noqa: F401  (re-exported)
from rescore.io.symbols import invert_symbol_table, read_symbol_table  # noqa: F401  (re-exported)
from rescore.io.text_tables import (EXPECTED, KINDS, Keep, Kind, Table, parse_float, parse_floats,  # noqa: F401
                                    parse_value, read_text_table, text_table_fields,  # (re-exported)
                                    text_table_lines)

PathLike = Union[str, Path]


# --------------------------------------------------------------------------------------------
# Reading: binary archives and scp indexes (text archives: rescore.io.text_tables)


def _read_binary_float(buf: bytes, pos: int, where: str) -> Tuple[float, int]:
    """Parse ``\\0B`` + Kaldi BasicType float at buf[pos]; return (value, new pos)."""
    if buf[pos : pos + 2] != b"\0B":
        raise RescoreError("binary marker '\\0B'", path=where, got=repr(buf[pos : pos + 2]))
    size = buf[pos + 2 : pos + 3]
    fmt = {b"\x04": "<f", b"\x08": "<d"}.get(size)  # Kaldi BaseFloat (float32) or double
    if fmt is None:
        raise RescoreError("a binary float scalar (size byte 4 or 8)", path=where, got=repr(size))
    end = pos + 3 + struct.calcsize(fmt)
    if end > len(buf):
        raise RescoreError("a complete binary float scalar", path=where, got="end of file")
    (v,) = struct.unpack_from(fmt, buf, pos + 3)
    if not math.isfinite(v):
        raise RescoreError("a finite float", path=where, got=str(v))
    return float(v), end


def _read_all_bytes(path: PathLike) -> bytes:
    f = open_bytes(path)
    try:
        with f:
            return f.read()
    except (EOFError, zlib.error) as e:
        raise RescoreError("a complete gzip stream", path=path, got=f"truncated or corrupt: {e}") from None
    except OSError as e:
        raise RescoreError("a readable file", path=path, got=e.strerror or str(e)) from None


def _skip_binary_float(buf, pos: int) -> Optional[int]:
    """The end of a well-formed binary float scalar at buf[pos] (its value unread), else None."""
    size = {b"\x04": 4, b"\x08": 8}.get(buf[pos + 2 : pos + 3]) if buf[pos : pos + 2] == b"\0B" else None
    return None if size is None or pos + 3 + size > len(buf) else pos + 3 + size


def _skip_binary_int_vector(buf, pos: int) -> Optional[int]:
    """The end of a well-formed binary int32 vector at buf[pos] (``\\0B \\4 n (\\4 int32)*n``,
    its values unread), else None."""
    if buf[pos : pos + 3] != b"\0B\x04" or pos + 7 > len(buf):
        return None
    (n,) = struct.unpack_from("<i", buf, pos + 3)
    end = pos + 7 + 5 * n
    if n < 0 or end > len(buf) or buf[pos + 7 : end : 5] != b"\x04" * n:
        return None
    return end


def read_binary_table(path: PathLike, kind: Kind, keep: Optional[Keep] = None) -> Table:
    """Read a Kaldi binary archive (optionally gzipped) of float scalars or int vectors; keep:
    parse only the values of the keys it keeps (module doc)."""
    if kind == "tokens":
        raise RescoreError("a text archive (token lists have no binary form)", path=path)
    t = Table(path=str(path), kind=kind, binary=True)
    buf = _read_all_bytes(path)
    seen: Dict[str, int] = {}
    f = io.BytesIO(buf)
    pos, n = 0, 0
    while pos < len(buf):
        n += 1
        where = f"{path} (binary entry {n})"
        sp = buf.find(b" ", pos)
        if sp < 0:
            raise RescoreError("'key ' before a value", path=where, got="end of file")
        key = buf[pos:sp].decode("utf-8", errors="replace")
        if not key or key.isspace() or "\n" in key:
            raise RescoreError("a key", path=where, got=key)
        if key in seen:
            raise RescoreError(f"a unique key ('{key}' is already entry {seen[key]})", path=where)
        pos = sp + 1
        skip = keep is not None and not keep(key)
        end = None
        if skip:  # walk over the value; one that is not well formed is read for its error
            end = (_skip_binary_float if kind == "float" else _skip_binary_int_vector)(buf, pos)
        if end is not None:
            value, pos = None, end
        elif kind == "float":
            value, pos = _read_binary_float(buf, pos, where)
        else:
            value, pos = _read_binary_int_vector(f, pos, where)
        if skip:
            value = None
        seen[key] = n
        t.keys.append(key)
        t.values.append(value)
    return t


def _read_binary_int_vector(f: io.BytesIO, pos: int, where: str) -> Tuple[List[int], int]:
    """Kaldi's binary int32 vector at byte pos of f through kaldiio: ``\\0B \\4 n (\\4 int32)*n``."""
    import kaldiio.matio as matio  # its own int32-vector reader (lazy: keeps kaldiio out of the commands' start-up)

    f.seek(pos)
    head = f.read(2)
    if head != b"\0B":
        raise RescoreError("binary marker '\\0B'", path=where, got=repr(head))
    f.seek(pos)
    try:
        arr = matio.read_int32vector(f, "<")
    except (AssertionError, struct.error, ValueError, MemoryError) as e:  # kaldiio's asserts on a malformed
        # vector, struct.error of a cut length, numpy's ValueError/MemoryError of a negative or huge one
        raise RescoreError("a binary int32 vector", path=where, got=f"{type(e).__name__} {e}") from None
    return [int(x) for x in arr], f.tell()


def _resolve_scp_target(scp_path: Path, rxfile: str) -> Path:
    p = Path(rxfile)
    if p.is_absolute():
        return p
    # Kaldi resolves against the working directory; scp files shipped in a folder are usually
    # written relative to that folder. Take the scp's folder first, then the working directory.
    beside = scp_path.parent / p
    return beside if beside.exists() else p


def _map_archive(path: Path, stack: contextlib.ExitStack):
    """The bytes of an archive an scp points into, as (buffer, file object over it): a gzipped
    one read whole, a plain one mapped (only the pages of the entries read are touched)."""
    try:
        with open(path, "rb") as f:
            if f.read(2) != GZIP_MAGIC and os.fstat(f.fileno()).st_size > 0:
                m = stack.enter_context(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
                return m, m  # (an mmap is a file object of its own: seek, read, tell)
    except OSError as e:
        raise RescoreError("a readable file", path=path, got=e.strerror or str(e)) from None
    buf = _read_all_bytes(path)
    return buf, io.BytesIO(buf)


def read_scp_table(path: PathLike, kind: Kind, keep: Optional[Keep] = None) -> Table:
    """Read every entry an ``scp`` index points at (``key file.ark:offset``), binary or text;
    keep: read only the entries of the keys it keeps (module doc: the index is checked whole,
    an archive opened only for an entry kept)."""
    with contextlib.ExitStack() as stack:
        return _read_scp_table(Path(path), kind, keep, stack)


def _read_scp_table(scp: Path, kind: Kind, keep: Optional[Keep], stack: contextlib.ExitStack) -> Table:
    path = scp
    t = Table(path=str(path), kind=kind)
    index = read_text_table(scp, "tokens")
    archives: Dict[Path, tuple] = {}
    for key, fields, lineno in zip(index.keys, index.values, index.lines):
        if len(fields) != 1 or ":" not in fields[0]:
            raise RescoreError("'key file.ark:offset'", path=path, line=lineno, got=" ".join([key] + fields))
        rx, off = fields[0].rsplit(":", 1)
        if not off.isdigit():
            raise RescoreError("a byte offset after ':'", path=path, line=lineno, got=fields[0])
        if keep is not None and not keep(key):
            t.keys.append(key)
            t.values.append(None)
            continue
        target = _resolve_scp_target(scp, rx)
        if target not in archives:
            try:
                archives[target] = _map_archive(target, stack)
            except RescoreError as e:
                raise RescoreError(f"a readable archive ({e})", path=path, line=lineno) from None
        (buf, file), pos = archives[target], int(off)
        where = f"{target}:{off} (from {path}:{lineno})"
        if pos >= len(buf):
            raise RescoreError("an offset inside the archive", path=path, line=lineno, got=fields[0])
        try:
            if buf[pos : pos + 2] == b"\0B":
                if kind == "float":
                    value, _ = _read_binary_float(buf, pos, where)
                elif kind == "ints":
                    value, _ = _read_binary_int_vector(file, pos, where)
                else:
                    raise RescoreError("a text entry for token lists", path=where)
            else:
                end = buf.find(b"\n", pos)
                text = buf[pos : end if end >= 0 else len(buf)].decode("utf-8")
                value = parse_value(kind, text.split())
        except (ValueError, UnicodeDecodeError):
            raise RescoreError(EXPECTED[kind] + f" at {rx}:{off}", path=path, line=lineno) from None
        except RescoreError as e:  # name the scp line, and the archive position in the message
            raise RescoreError(f"{e.expected} at {rx}:{off}", path=path, line=lineno, got=e.got) from None
        t.keys.append(key)
        t.values.append(value)
    return t


def read_table(path: PathLike, kind: Kind, keep: Optional[Keep] = None) -> Table:
    """Read any Kaldi table of the given kind: text or binary archive, gzipped or not, or scp.

    The container is recognised from the bytes (gzip magic, ``\\0B`` after the first key) and
    from a ``.scp`` suffix. keep: parse only the values of the keys it keeps (module doc).
    """
    container = table_container(path)
    if container == "scp":
        return read_scp_table(path, kind, keep)
    if container == "binary":
        return read_binary_table(path, kind, keep)
    return read_text_table(path, kind, keep=keep)


def table_container(path: PathLike) -> str:
    """How read_table reads path: "scp" (a ``.scp`` suffix), "binary" (``\\0B`` after the first
    key) or "text"."""
    if Path(path).suffix == ".scp":
        return "scp"
    with contextlib.closing(open_bytes(path)) as f:
        try:
            head = f.read(4096)
        except (EOFError, OSError, zlib.error) as e:
            raise RescoreError("a complete gzip stream", path=path, line=1, got=f"truncated or corrupt: {e}") from None
    sp = head.find(b" ")
    return "binary" if sp > 0 and head[sp + 1 : sp + 3] == b"\0B" else "text"


# --------------------------------------------------------------------------------------------
# Data dir


@dataclass
class DataDir:
    """A Kaldi data dir: only the files N-best rescoring uses; missing files are None.

    text: utt -> reference words; utt2spk: utt -> speaker; spk2utt: speaker -> utts;
    segments: utt -> (recording id, start s, end s).
    """

    path: str
    text: Optional[Dict[str, List[str]]] = None
    utt2spk: Optional[Dict[str, str]] = None
    spk2utt: Optional[Dict[str, List[str]]] = None
    segments: Optional[Dict[str, Tuple[str, float, float]]] = None


def read_data_dir(path: PathLike) -> DataDir:
    """Read ``text``, ``utt2spk``, ``spk2utt``, ``segments`` of a data dir where present."""
    d = Path(path)
    if not d.is_dir():
        raise RescoreError("a data directory", path=d, got="no such directory")
    if not any((d / n).exists() for n in ("text", "utt2spk", "segments")):
        # (read as no data dir, it would give no WER and make every utterance its own conversation)
        raise RescoreError("a Kaldi data dir with text, utt2spk or segments", path=d, got="none of them")
    out = DataDir(path=str(d))
    if (d / "text").exists():
        out.text = read_text_table(d / "text", "tokens").as_dict()  # type: ignore[assignment]
    if (d / "utt2spk").exists():
        t = read_text_table(d / "utt2spk", "tokens")
        out.utt2spk = {}
        for k, v, ln in zip(t.keys, t.values, t.lines):
            if len(v) != 1:
                raise RescoreError("'utt speaker'", path=t.path, line=ln, got=" ".join([k] + v))
            out.utt2spk[k] = v[0]
    if (d / "spk2utt").exists():
        out.spk2utt = read_text_table(d / "spk2utt", "tokens", allow_empty_value=False).as_dict()  # type: ignore
    if (d / "segments").exists():
        t = read_text_table(d / "segments", "tokens")
        out.segments = {}
        for k, v, ln in zip(t.keys, t.values, t.lines):
            try:
                if len(v) != 3:
                    raise ValueError
                start, end = parse_float(v[1]), parse_float(v[2])
                if end < start:
                    raise ValueError
            except ValueError:
                raise RescoreError("'utt reco start end' with start <= end", path=t.path, line=ln,
                                   got=" ".join([k] + v)) from None
            out.segments[k] = (v[0], start, end)
    return out


# --------------------------------------------------------------------------------------------
# NN LM costs (Kaldi's steps/pytorchnn format)


def read_nn_costs(path: PathLike) -> Dict[str, List[float]]:
    """Read ``lmwt.nn``: ``key c1 ... c_{n+1}`` (per-token costs, last = end of sentence) or
    ``key total``. Returns key -> list of finite floats (length n+1 or 1)."""
    t = read_text_table(path, "tokens", allow_empty_value=False)
    lengths = list(map(len, t.values))
    flat = parse_floats(list(itertools.chain.from_iterable(t.values)))  # all at once, as a rule
    if flat is not None:
        ends = itertools.accumulate(lengths)
        return dict(zip(t.keys, [flat[e - n:e] for n, e in zip(lengths, ends)]))
    out: Dict[str, List[float]] = {}
    for k, v, ln in zip(t.keys, t.values, t.lines):  # a bad cost: find the first
        try:
            out[k] = [parse_float(x) for x in v]
        except ValueError:
            raise RescoreError("'key cost [cost ...]' (finite floats)", path=path, line=ln,
                               got=" ".join([k] + v)) from None
    return out


def write_nn_costs(path: PathLike, costs: Mapping[str, Sequence[float]]) -> None:
    """Write ``lmwt.nn`` (per-token costs or one total per key), Kaldi text style, atomically:
    ``key c1 c2 ... `` with each cost as repr(float(c)) (float_texts)."""
    rows = list(costs.values())
    lengths = list(map(len, rows))
    flat = np.fromiter(map(float, itertools.chain.from_iterable(rows)), dtype=np.float64, count=sum(lengths))
    texts = float_texts(flat)
    ends = list(itertools.accumulate(lengths))
    lines = [k + " " + " ".join(texts[e - n:e]) + " \n" for k, n, e in zip(costs, lengths, ends)]
    with atomic_output(path, "w") as f:
        f.write("".join(lines))


# --------------------------------------------------------------------------------------------
# Writing


def float_texts(values: np.ndarray) -> List[str]:
    """repr() of each value of a float64 array: Python's shortest string that reads back to the
    same float (``0.1``, ``1e-05``, ``-0.0``). repr is the costly part of writing costs, so it
    runs once per distinct value (by bit pattern, so -0.0 keeps its sign): NN costs repeat a lot,
    as the hypotheses of an N-best list share prefixes (1.2M costs, 106k distinct on the dev set).
    """
    bits, inverse = np.unique(np.ascontiguousarray(values, dtype=np.float64).view(np.int64), return_inverse=True)
    texts = np.array(list(map(repr, bits.view(np.float64).tolist())), dtype=object)
    return texts[inverse.ravel()].tolist()


def _first_bad_key(keys: List[str]) -> Optional[int]:
    """The index of the first key that is empty or holds whitespace, None when all are good."""
    if " ".join(keys).split() == keys:  # (every key one field: one C-level test)
        return None
    return next(i for i, k in enumerate(keys) if not k or any(c.isspace() for c in k))


def _text_values(kind: Kind, keys: List[str], values: list) -> List[str]:
    """The text of each value of a text table; ValueError at the first entry with a bad key or
    a cost that is not finite (its key first), as writing entry by entry would find them."""
    bad_key = _first_bad_key(keys)
    head = values if bad_key is None else values[:bad_key]  # the entries before a bad key
    if kind == "float":
        costs = np.fromiter(map(float, head), dtype=np.float64, count=len(head))
        bad = np.flatnonzero(~np.isfinite(costs))
        if len(bad):
            raise ValueError(f"non-finite cost {float(costs[bad[0]])}")
        texts = float_texts(costs)
    else:
        texts = [" ".join(map(str, v)) for v in head]
    if bad_key is not None:
        raise ValueError(f"bad key {keys[bad_key]!r}")
    return texts


def _binary_body(kind: Kind, keys: List[str], values: list, body: io.BytesIO) -> List[int]:
    """Kaldi binary entries into body (floats as float32 BaseFloat, int vectors through kaldiio);
    the byte offset of each value."""
    import kaldiio.matio as matio  # (lazy: keeps kaldiio out of the commands' start-up)

    bad_key = _first_bad_key(keys)
    offsets = []
    for i, (key, v) in enumerate(zip(keys, values)):
        if i == bad_key:
            raise ValueError(f"bad key {key!r}")
        body.write(key.encode("utf-8") + b" ")
        offsets.append(body.tell())
        if kind == "float":
            body.write(b"\0B\x04" + struct.pack("<f", float(v)))
            continue
        arr = np.asarray(v, dtype=np.int32)
        if arr.ndim != 1:
            raise ValueError(f"int vector for {key!r} must be 1-D")
        matio.write_array(body, arr)  # kaldiio's binary int32 vector (with '\0B' header)
    return offsets


def _text_offsets(keys: List[str], lines: List[str]) -> List[int]:
    """The byte offset of each value of a text table written as ``lines`` (one per key)."""
    offsets, start = [], 0
    for key, line in zip(keys, lines):
        offsets.append(start + len(key.encode("utf-8")) + 1)
        start += len(line.encode("utf-8"))
    return offsets


def write_table(
    path: PathLike,
    kind: Kind,
    items: Mapping[str, object],
    *,
    binary: bool = False,
    gz: bool = False,
    scp: Optional[PathLike] = None,
    trailing_space: bool = True,
) -> None:
    """Write a Kaldi table atomically.

    Text lines are ``key value(s) `` with Kaldi's trailing space (trailing_space=False drops it,
    as int2sym-style ``words_text`` and ``data/text`` have none); a cost is written as repr()
    (float_texts). binary=True writes Kaldi binary (floats as float32 BaseFloat, int vectors
    through kaldiio); gz gzips the archive; scp also writes an index (not with gz: offsets into
    a gzip stream mean nothing).
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}")
    if scp is not None and gz:
        raise ValueError("an scp cannot index a gzipped archive")
    if binary and kind == "tokens":
        raise ValueError("token lists have no binary form")
    keys, values = list(items), list(items.values())
    if binary:
        body = io.BytesIO()
        offsets = _binary_body(kind, keys, values, body)
        data = body.getvalue()
    else:
        end = " \n" if trailing_space else "\n"
        # 'key 1 2 ' + newline as Kaldi writes; an empty vector is 'key ' + newline.
        lines = [k + " " + (v + end if v else "\n") for k, v in zip(keys, _text_values(kind, keys, values))]
        data = "".join(lines).encode("utf-8")
        offsets = _text_offsets(keys, lines) if scp is not None else []
    with atomic_output(path, "wb") as f:
        if gz:
            with gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as g:
                g.write(data)
        else:
            f.write(data)
    if scp is not None:
        with atomic_output(scp, "w") as f:
            for key, off in zip(keys, offsets):
                f.write(f"{key} {path}:{off}\n")

