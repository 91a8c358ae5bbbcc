"""Kaldi lattices in the text form of a CompactLattice: the reader, the writer and the types.

Lattices are read and written in Kaldi's text form of a CompactLattice (``lattice-copy ark:in
ark,t:-``), which earns its place: the arc scores are added without Kaldi's
``lattice-add-nnlmscore`` (not among the binaries ``build-kaldi.sh`` builds), and the tests need
no Kaldi. Text form, one lattice::

    utt-id
    0	1	14722	3.5,812.7,1_1_5_5
    1	2	0                  (an arc without a weight: weight 0,0, = One)
    2	0.25,0,            (a final state and its weight; a bare state number: weight One)
    <empty line>

An arc is ``src dst word graph,acoustic,transition-ids`` (costs: negated natural logs). The
first line's state is the start state. Kaldi prints 6 significant digits (``909.881`` for a
binary 909.8809): going through text costs that much precision, ~1e-6 relative, far below
any cost difference that decides a 1-best. We write floats in full.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import math
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Dict, Iterable, Iterator, List, Optional, Tuple, Union

from rescore.errors import RescoreError
from rescore.io.files import atomic_output
from rescore.io.lines import open_bytes

PathLike = Union[str, Path]


@dataclass
class Arc:
    src: int
    dst: int
    word: int       # word id (words.txt); 0 = epsilon
    graph: float    # graph cost (LM + transitions + pronunciation)
    ac: float       # acoustic cost
    ali: str = ""   # transition ids as Kaldi writes them ("1_1_5"), kept verbatim


@dataclass
class Lattice:
    """One CompactLattice. ``finals``: state -> (graph cost, acoustic cost, transition ids)."""

    key: str
    start: int = -1                      # -1: the empty lattice
    num_states: int = 0
    arcs: List[Arc] = field(default_factory=list)
    finals: Dict[int, Tuple[float, float, str]] = field(default_factory=dict)
    where: str = field(default="", compare=False, repr=False)  # "file:line" of its key, for errors

    def out_arcs(self) -> List[List[int]]:
        """state -> indices of its arcs, in file order."""
        out: List[List[int]] = [[] for _ in range(self.num_states)]
        for i, a in enumerate(self.arcs):
            out[a.src].append(i)
        return out


# --------------------------------------------------------------------------------------------
# Text form


def _parse_weight(tok: str, path, lineno: int) -> Tuple[float, float, str]:
    parts = tok.split(",")
    if len(parts) != 3:
        raise RescoreError("a CompactLattice weight 'graph,acoustic,transition-ids' (a Lattice "
                           "in text form has 'graph,acoustic': convert with lattice-copy, which "
                           "writes compact lattices)", path=path, line=lineno, got=tok)
    try:
        g, a = float(parts[0]), float(parts[1])
    except ValueError:
        raise RescoreError("numeric costs in 'graph,acoustic,transition-ids'", path=path,
                           line=lineno, got=tok) from None
    if not (math.isfinite(g) and math.isfinite(a)):
        raise RescoreError("finite costs", path=path, line=lineno, got=tok)
    return g, a, parts[2]


def _parse_state(tok: str, path, lineno: int, line: str) -> int:
    if not tok.isdigit():
        raise RescoreError("a state number (non-negative integer) first", path=path, line=lineno,
                           got=line)
    return int(tok)


def iter_lattices(f: Iterable[str], path: PathLike = "<stdin>") -> Iterator[Lattice]:
    """Lattices of a Kaldi text archive of CompactLattices (lines of text), in order. Every
    format error is a RescoreError naming the file and the line; so are a truncated last
    lattice, a key seen twice and an archive without lattices."""
    lat: Optional[Lattice] = None
    lineno = 0
    keys: Dict[str, int] = {}  # key -> its line
    for lineno, raw in enumerate(f, 1):
        fields = raw.split()
        if lat is None:
            if not fields:
                continue  # blank lines between lattices
            if len(fields) != 1:
                raise RescoreError("a lattice key alone on its line (Kaldi text archive of "
                                   "CompactLattices, lattice-copy ark:in ark,t:-)", path=path,
                                   line=lineno, got=raw.rstrip("\n"))
            if fields[0] in keys:  # its N-best entries would be written twice under one key
                raise RescoreError(f"a key once per archive ('{fields[0]}' is already at line "
                                   f"{keys[fields[0]]})", path=path, line=lineno)
            keys[fields[0]] = lineno
            lat = Lattice(key=fields[0], where=f"{path}:{lineno}")
            continue
        if not fields:  # the empty line that ends a lattice
            yield lat
            lat = None
            continue
        s = _parse_state(fields[0], path, lineno, raw.rstrip("\n"))
        if lat.start < 0:
            lat.start = s
        if len(fields) in (3, 4):  # an arc; without a weight: weight 0,0,
            d = _parse_state(fields[1], path, lineno, raw.rstrip("\n"))
            if not fields[2].isdigit():
                raise RescoreError("a word id (non-negative integer) third", path=path,
                                   line=lineno, got=raw.rstrip("\n"))
            g, a, ali = _parse_weight(fields[3], path, lineno) if len(fields) == 4 else (0.0, 0.0, "")
            lat.arcs.append(Arc(s, d, int(fields[2]), g, a, ali))
            lat.num_states = max(lat.num_states, s + 1, d + 1)
        elif len(fields) in (1, 2):
            if s in lat.finals:
                raise RescoreError(f"one final weight per state (state {s} has two)", path=path,
                                   line=lineno)
            lat.finals[s] = (0.0, 0.0, "") if len(fields) == 1 else _parse_weight(fields[1], path, lineno)
            lat.num_states = max(lat.num_states, s + 1)
        else:
            raise RescoreError("'src dst word graph,acoustic,ali' (an arc) or 'state [weight]' "
                               "(a final state); 5 fields are a non-compact Lattice",
                               path=path, line=lineno, got=raw.rstrip("\n"))
    if lat is not None:  # Kaldi ends every lattice with an empty line: this one is cut short
        raise RescoreError(f"the empty line that ends lattice '{lat.key}'", path=path,
                           line=lineno + 1, got="end of file")
    if not keys:
        raise RescoreError("at least one lattice (a Kaldi text archive of CompactLattices, "
                           "lattice-copy ark:in ark,t:-)", path=path, got="an empty archive")


# What follows the first key of a binary archive: Kaldi's binary marker, or (lattices) the
# magic number of an OpenFst binary FST, which Kaldi's lattice writer puts there instead.
_BINARY_STARTS = (b"\0B", b"\xd6\xfd\xb2\x7e")


def _text_lines(raw: IO[bytes], path: PathLike) -> Iterator[str]:
    """The lines of a byte stream as text. A binary archive, a line that is not UTF-8 and a
    truncated or corrupt gzip stream are RescoreErrors naming the file and the line."""
    lineno = 0
    try:
        for b in raw:
            lineno += 1
            if lineno == 1 and b[b.find(b" ") + 1:].startswith(_BINARY_STARTS):
                raise RescoreError("a Kaldi text archive (this one is binary: convert it with "
                                   "lattice-copy ark:in ark,t:-)", path=path, line=1)
            try:
                yield b.decode("utf-8")
            except UnicodeDecodeError:
                raise RescoreError("UTF-8 text", path=path, line=lineno, got=repr(b[:40])) from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise RescoreError("a complete gzip stream", path=path, line=lineno + 1,
                           got=f"truncated or corrupt: {e}") from None


@contextlib.contextmanager
def open_text(path: PathLike, mode: str = "r") -> Iterator:
    """'-' is stdin/stdout. Reading yields the lines as text (a gzipped file is recognised by
    its bytes; errors as in _text_lines). Writing yields a text file, gzipped for a path
    ending in .gz, written to a temporary name and renamed only when the block succeeds
    (rescore.io.files.atomic_output)."""
    p = str(path)
    if mode == "r":
        if p == "-":
            yield _text_lines(sys.stdin.buffer, "<stdin>")
            return
        with open_bytes(p) as f:
            yield _text_lines(f, p)
        return
    if p == "-":
        yield sys.stdout
        sys.stdout.flush()
        return
    if p.endswith(".gz"):
        with atomic_output(p, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as g, \
                io.TextIOWrapper(g, encoding="utf-8") as f:
            yield f
        return
    with atomic_output(p, "w") as f:
        yield f


def read_lattices(path: PathLike) -> List[Lattice]:
    """All lattices of a text archive ('-': stdin)."""
    with open_text(path) as f:
        return list(iter_lattices(f, path))


def _fmt(x: float) -> str:
    return repr(float(x)) if x != int(x) else str(int(x))


def format_lattice(lat: Lattice) -> str:
    """Kaldi's text form (what ``lattice-copy ark,t:`` writes): the start state's lines first,
    then the other states in order, each state's arcs then its final weight."""
    out = [lat.key + " \n"]
    if lat.start >= 0:
        by_state = lat.out_arcs()
        order = [lat.start] + [s for s in range(lat.num_states) if s != lat.start]
        for s in order:
            for i in by_state[s]:
                a = lat.arcs[i]
                if a.graph == 0 and a.ac == 0 and not a.ali:  # weight One: Kaldi omits it
                    out.append(f"{a.src}\t{a.dst}\t{a.word}\n")
                else:
                    out.append(f"{a.src}\t{a.dst}\t{a.word}\t{_fmt(a.graph)},{_fmt(a.ac)},{a.ali}\n")
            if s in lat.finals:
                g, ac, ali = lat.finals[s]
                out.append(f"{s}\n" if g == 0 and ac == 0 and not ali else f"{s}\t{_fmt(g)},{_fmt(ac)},{ali}\n")
    out.append("\n")
    return "".join(out)


def write_lattices(path: PathLike, lattices: Iterable[Lattice]) -> int:
    """Write a text archive ('-': stdout; .gz: gzipped), atomically for files. Returns the count."""
    n = 0
    with open_text(path, "w") as f:
        for lat in lattices:
            f.write(format_lattice(lat))
            n += 1
    return n
