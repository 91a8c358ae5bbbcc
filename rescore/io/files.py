"""Writing files safely, and the one JSON reader and writer: the home of every output's last step.

* :func:`atomic_output` -- a temporary name in the target directory, renamed onto the target only
  when the block succeeds, so a reader never sees half a file. The file gets the permissions any
  ``open()`` would give it (``0666 & ~umask``; ``mkstemp`` alone makes ``0600``).
* :func:`write_json` -- JSON through :func:`atomic_output`; NaN and infinities are refused (JSON
  has no such numbers, and ``Infinity`` in a report hides a bug).
* :func:`read_json` -- strict: UTF-8, valid JSON, no ``NaN``/``Infinity`` constants; every error
  is a RescoreError naming the file and the line.
* :func:`file_key` -- what tells an unchanged file, for the readers that keep what they read.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator, Optional, Union

from rescore.errors import RescoreError

PathLike = Union[str, Path]
TMP_SUFFIX = ".tmp"  # temporary names are ``.<name>.<random>.tmp`` beside the target


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_output(path: PathLike, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file beside ``path``; rename it onto ``path`` only if the block succeeds.

    The file ends with mode ``0666 & ~umask``, as a plain ``open(path, "w")`` would leave it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def is_temporary(name: str) -> bool:
    """Whether ``name`` is one of atomic_output's temporary names (left behind by a killed run)."""
    return name.startswith(".") and name.endswith(TMP_SUFFIX)


def _non_finite(obj: Any, where: str = "") -> str:
    """The JSON path of the first NaN or infinity in obj, or ''."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return where or "(top level)"
    if isinstance(obj, dict):
        for k, v in obj.items():
            found = _non_finite(v, f"{where}.{k}" if where else str(k))
            if found:
                return found
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            found = _non_finite(v, f"{where}[{i}]")
            if found:
                return found
    return ""


def dumps_json(obj: Any) -> str:
    """``obj`` as indented JSON text with a final newline; a NaN or infinity is a RescoreError."""
    bad = _non_finite(obj)
    if bad:
        raise RescoreError(f"finite numbers to write as JSON ({bad} is not)")
    return json.dumps(obj, indent=1, allow_nan=False) + "\n"


def write_json(path: PathLike, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` atomically; NaN or infinity anywhere is refused (and
    nothing is written)."""
    text = dumps_json(obj)
    with atomic_output(path, "w") as f:
        f.write(text)


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


def read_json(path: PathLike) -> Any:
    """Read a JSON file strictly: UTF-8, well formed, finite numbers only."""
    text = read_utf8(path, "a readable JSON file")
    try:
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
