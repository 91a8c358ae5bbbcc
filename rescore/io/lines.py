"""Opening and decoding the lines of Kaldi's text files: gzipped or not, every error naming the
file and the line."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import IO, Iterator, Tuple, Union

from rescore.errors import RescoreError

PathLike = Union[str, Path]

GZIP_MAGIC = b"\x1f\x8b"


def open_bytes(path: PathLike) -> IO[bytes]:
    """Open a file for binary reading, transparently gunzipping; unreadable -> RescoreError."""
    try:
        f = open(path, "rb")
        magic = f.read(2)
        f.seek(0)
    except OSError as e:
        raise RescoreError("a readable file", path=path, got=e.strerror or str(e)) from None
    if magic == GZIP_MAGIC:
        return gzip.GzipFile(fileobj=f, mode="rb")  # type: ignore[return-value]
    return f


BOM = b"\xef\xbb\xbf"  # the UTF-8 byte order mark some editors put first: not part of the text


def without_bom(data: bytes) -> bytes:
    """``data`` without a leading UTF-8 byte order mark (the start of a file or its first line)."""
    return data[len(BOM):] if data.startswith(BOM) else data


def iter_lines(path: PathLike) -> Iterator[Tuple[int, str]]:
    """(1-based line number, decoded line without newline); gzip and decode errors name the line."""
    f = open_bytes(path)
    lineno = 0
    with f:
        try:
            for raw in f:
                lineno += 1
                if lineno == 1:  # (a Windows editor's UTF-8 signature is not text)
                    raw = without_bom(raw)
                    if not raw:  # the file is only a signature: no lines (as read whole)
                        return
                yield lineno, decode_line(raw, path, lineno)
        except (EOFError, zlib.error, gzip.BadGzipFile) as e:
            raise RescoreError("a complete gzip stream", path=path, line=lineno + 1,
                               got=f"truncated or corrupt: {e}") from None
        except OSError as e:
            raise RescoreError("a readable file", path=path, got=e.strerror or str(e)) from None


def decode_line(raw: bytes, path: PathLike, lineno: int) -> str:
    """``raw`` as UTF-8 text without its newline; a RescoreError naming the line otherwise."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RescoreError("UTF-8 text", path=path, line=lineno, got=repr(raw[:40])) from None
    return line.rstrip("\r\n")
