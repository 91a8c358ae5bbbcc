"""Checks of output paths before any work: an output that cannot be written, or that would
replace an input, is refused up front, not after the work is done.

The one check of an output against the inputs (:class:`InputGuard`, :func:`check_not_input`)
compares files by identity, device and inode (``st_dev``, ``st_ino``), not by name: an input
reached through a symlink or a hard link is the same file, and an input directory (an N-best
dir, a data dir, a decode dir) stands for every file under it, so an archive read from an
N-best dir is an input even where only the dir was named. Every command runs it for every path
it will write before it writes anything.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Iterable, Optional, Tuple, Union

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


MAX_DIR_FILES = 200_000  # files of an input dir looked at (a decode dir has far fewer)


def _identity(path: PathLike) -> Optional[Tuple[int, int]]:
    """(st_dev, st_ino) of the file at path (links followed), None where there is none."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


class InputGuard:
    """The identities of every input file (a directory: of every file under it, links
    followed), to check outputs against before anything is written."""

    def __init__(self, inputs: Iterable[Optional[PathLike]]):
        self.files: Dict[Tuple[int, int], Path] = {}
        for p in inputs:
            if p is None or str(p) == "-":
                continue
            p = Path(p)
            if p.is_dir():
                self._add_dir(p)
            else:
                self._add(p)

    def _add(self, p: Path) -> None:
        key = _identity(p)
        if key is not None:
            self.files.setdefault(key, p)

    def _add_dir(self, d: Path) -> None:
        n = 0
        for dirpath, _, filenames in os.walk(d, followlinks=False):
            for f in filenames:
                self._add(Path(dirpath) / f)
                n += 1
                if n >= MAX_DIR_FILES:
                    return

    def input_at(self, output: PathLike) -> Optional[Path]:
        """The input that writing ``output`` would replace (the same file), else None."""
        key = _identity(output)
        return None if key is None else self.files.get(key)

    def check(self, output: PathLike, option: str) -> None:
        """An OptionError naming ``option`` when ``output`` is an input file."""
        if str(output) == "-":
            return
        inp = self.input_at(output)
        if inp is not None:
            how = "" if os.path.abspath(inp) == os.path.abspath(output) else (
                " through a symlink" if os.path.islink(output) else
                " (the same file: a hard link or a linked directory)")
            raise OptionError(f"an output that is not one of the inputs (writing {output} would replace the "
                              f"input {inp}{how})", option=option, got=str(output))


def check_not_input(output: PathLike, inputs: Iterable[Optional[PathLike]], option: str) -> None:
    """An OptionError when writing ``output`` would overwrite or replace an input file (by
    identity, InputGuard), or ``output`` is a directory, or lies under a file."""
    output = Path(output)
    InputGuard(inputs).check(output, option)
    if output.is_dir():
        raise OptionError("a file path, not a directory", option=option, got=str(output))
    for parent in output.parents:
        if parent.exists() and not parent.is_dir():
            raise OptionError(f"a path in a directory ({parent} is a file)", option=option, got=str(output))


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
    InputGuard(inputs).check(path, option)


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
    guard = InputGuard(inputs)
    for name in names:
        guard.check(out / name, option)
