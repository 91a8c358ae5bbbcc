"""Checks of output paths before any work: an output that cannot be written, or that would
replace an input, is refused up front, not after the work is done."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Optional, Union

from rescore.errors import OptionError

PathLike = Union[str, Path]


def _writable_ancestor(path: Path, option: str) -> None:
    """The nearest existing ancestor of ``path`` is a writable directory (the rest can be made)."""
    for p in path.parents:
        if p.exists():
            if not p.is_dir():
                raise OptionError(f"a path in a directory ({p} is a file)", option=option,
                                   got=str(path))
            if not os.access(p, os.W_OK | os.X_OK):
                raise OptionError(f"a writable directory ({p} is not writable)", option=option,
                                   got=str(path))
            return


def _same(a: PathLike, b: PathLike) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_output_file(path: Optional[PathLike], option: str,
                      inputs: Iterable[Optional[PathLike]] = ()) -> None:
    """``path`` (a file to write; None: nothing) can be written and is none of ``inputs``."""
    if path is None:
        return
    path = Path(path)
    if path.is_dir():
        raise OptionError("a file path, not a directory", option=option, got=str(path))
    _writable_ancestor(path, option)
    if path.exists() and not os.access(path, os.W_OK) and not os.access(path.parent, os.W_OK):
        raise OptionError("a writable file", option=option, got=str(path))
    for inp in inputs:
        if inp is not None and _same(path, inp):
            raise OptionError(f"an output that is not an input (it is {inp})", option=option,
                               got=str(path))


def check_output_dir(out_dir: PathLike, option: str, names: Iterable[str] = (),
                     inputs: Iterable[Optional[PathLike]] = ()) -> None:
    """``out_dir`` is, or can be made, a writable directory, and none of the files ``names`` it
    will get is one of ``inputs``."""
    out = Path(out_dir)
    if out.exists():
        if not out.is_dir():
            raise OptionError(f"a directory ({out} is a file)", option=option, got=str(out))
        if not os.access(out, os.W_OK | os.X_OK):
            raise OptionError(f"a writable directory ({out} is not writable)", option=option,
                               got=str(out))
    else:
        _writable_ancestor(out, option)
    inputs = [p for p in inputs if p is not None]
    for name in names:
        for inp in inputs:
            if _same(out / name, inp):
                raise OptionError(f"an output dir whose {name} is not an input (it is {inp})",
                                   option=option, got=str(out))
