"""The one JSON reader, and reading text files.

* :func:`atomic_output` and :func:`write_json` -- every file is written through the first, every
  JSON file through the second; their home is rescore.io.outdir, with the directory writers
  (imported here for the writers that import them from here).
* :func:`read_json` -- strict: UTF-8, valid JSON, no ``NaN``/``Infinity`` constants; every error
  is a RescoreError naming the file and the line.
* :func:`file_key` -- what tells an unchanged file, for the readers that keep what they read.
"""

from __future__ import annotations

import json
import math
import stat
from pathlib import Path
from typing import Any, List, Optional, Tuple, Union

from rescore.errors import RescoreError
from rescore.io.outdir import atomic_output, dumps_json, is_temporary, write_json  # noqa: F401 (re-exported)

PathLike = Union[str, Path]


def _no_constant(name: str):
    raise ValueError(f"{name} (JSON has no such number)")


def _finite_float(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise ValueError(f"{text} (too large for a float)")
    return x


def read_utf8(path: PathLike, what: str) -> str:
    """The text of a UTF-8 file; a RescoreError names the file (expected: ``what``, e.g. "a
    readable JSON file") where it cannot be read, and the line where it is not UTF-8."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise RescoreError(what, path=path, got=e.strerror or str(e)) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise RescoreError("UTF-8 text", path=path, line=line, got=repr(raw[e.start:e.start + 20])) from None


def read_json(path: PathLike, finite: bool = True) -> Any:
    """Read a JSON file strictly: UTF-8, well formed, finite numbers only (``finite=False``: also
    Python's ``NaN``/``Infinity``, for files other programs wrote, e.g. a model's config)."""
    text = read_utf8(path, "a readable JSON file")
    try:
        if not finite:
            return json.loads(text)
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except json.JSONDecodeError as e:
        raise RescoreError("JSON", path=path, line=e.lineno, got=e.msg) from None
    except ValueError as e:
        raise RescoreError("finite JSON numbers", path=path, got=str(e)) from None


def file_key(path: PathLike) -> Optional[tuple]:
    """(resolved path, inode, mtime in ns, size) of a regular file, else None (a pipe, a missing
    file): equal keys mean a reader may take what it read before."""
    try:
        p = Path(path)
        st = p.stat()
    except (OSError, TypeError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return (str(p.resolve()), st.st_ino, st.st_mtime_ns, st.st_size)


def read_json_lines(path: PathLike) -> List[Tuple[int, object]]:
    """[(line, object)] of a JSON-lines file, blank lines skipped (``NaN``/``Infinity`` read as None)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise RescoreError("a readable JSON-lines file", path=path, got=e.strerror or str(e)) from None
    except UnicodeDecodeError:
        raise RescoreError("UTF-8 text", path=path) from None
    out = []
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            out.append((lineno, json.loads(line, parse_constant=lambda c: None)))
        except json.JSONDecodeError as e:
            raise RescoreError("one JSON object per line", path=path, line=lineno, got=e.msg) from None
    return out
