"""The Kaldi N-best dir: its files (which archives, their containers, the words.txt beside it),
the dir as a table, and a table back as a Kaldi N-best dir (``--to kaldi``).

Layout (what Kaldi's ``lattice-to-nbest | nbest-to-linear`` + ``int2sym.pl`` leave)::

    NBEST_DIR/words        <utt>-<k> id id ...     (int vector, ids of words.txt)
    NBEST_DIR/words_text   <utt>-<k> w w ...       (either or both of words / words_text)
    NBEST_DIR/acwt         <utt>-<k> cost          (acoustic cost, unscaled)
    NBEST_DIR/lmwt.withlm  <utt>-<k> cost          (graph cost with the first-pass LM)
    NBEST_DIR/lmwt.nolm    <utt>-<k> cost          (graph cost with that LM removed)
    NBEST_DIR/ali          <utt>-<k> id id ...     (optional; only its keys are checked)

Each may be a text or binary archive, gzipped (``name.gz``, ``name.bin.gz``, ``name.ark``) or an
``name.scp`` index (SUFFIXES, the first that exists wins). The words.txt is the one given, else
NBEST_DIR/words.txt, NBEST_DIR/lang/words.txt or NBEST_DIR/../lang/words.txt. :func:`kaldi_dir`
finds them once (no file opened); rescore.nbest.sets reads and checks what it found.

An N-best dir (rescore.nbest.sets) as a table (rescore.nbest.tables.kaldi_to_table) has the
columns ``ac`` = ``acwt``, ``graph`` = ``lmwt.withlm``, ``nolm`` = ``lmwt.nolm``; rank k is key
``<utt>-<k>``. Scores of text archives keep their text, so dir -> file -> dir gives the same
bytes (:func:`table_to_kaldi`'s ``kaldi_style``: every line of ``words``/``acwt``/``lmwt.*``
ends in a space as Kaldi's binaries write them, ``words_text`` without as ``int2sym.pl`` writes
it; False: no line does).

Reading a dir needs rescore.nbest.sets (its checks of the archives and the words.txt), so its
reader is rescore.nbest.tables.kaldi_to_table, above this package; the registry
(rescore.formats.registry) marks the format as read there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

from rescore.errors import RescoreError
from rescore.formats.base import Format
from rescore.formats.table import NbestTable, PathLike, format_score

ARCHIVES = ("words", "words_text", "acwt", "lmwt.withlm", "lmwt.nolm", "ali")  # (module doc)
SUFFIXES = ("", ".gz", ".ark", ".bin.gz", ".ark.gz", ".scp")  # the containers tried, first match wins
ARCHIVE_KINDS = {"words": "ints", "words_text": "tokens", "acwt": "float", "lmwt.withlm": "float",
                 "lmwt.nolm": "float", "ali": "ints"}  # (rescore.io.kaldi's table kinds)
DATA_FILES = ("text", "utt2spk", "spk2utt", "segments")  # what reading a data dir may open


def find_archive(nbest_dir: PathLike, name: str) -> Optional[Path]:
    """The file holding archive ``name`` in nbest_dir (``name``, ``name.gz``, ``name.scp``...)."""
    for suf in SUFFIXES:
        p = Path(nbest_dir) / (name + suf)
        if p.is_file():
            return p
    return None


def default_words_txt(nbest_dir: PathLike) -> Optional[Path]:
    """The symbol table beside an N-best dir: NBEST_DIR/words.txt, NBEST_DIR/lang/words.txt or
    NBEST_DIR/../lang/words.txt, the first that exists (None: none)."""
    nd = Path(nbest_dir)
    for p in (nd / "words.txt", nd / "lang" / "words.txt", nd.parent / "lang" / "words.txt"):
        if p.is_file():
            return p
    return None


@dataclass(frozen=True)
class KaldiDir:
    """An N-best dir's files, found once (:func:`kaldi_dir`). archives: each of ARCHIVES -> its
    file, None where absent; words_txt: the symbol table given, else the one beside the dir,
    None: none; ids_only: its words are only ids (a ``words`` archive and no ``words_text``),
    read through words_txt."""

    path: Path
    archives: Dict[str, Optional[Path]]
    words_txt: Optional[Path]
    ids_only: bool

    def files(self, data_dir: Optional[PathLike] = None) -> List[Path]:
        """The files reading the dir (and ``data_dir``) may open: its archives, the data dir's
        DATA_FILES, the words.txt."""
        files = [p for p in self.archives.values() if p is not None]
        if data_dir is not None:
            files += [Path(data_dir) / n for n in DATA_FILES]
        return files + ([self.words_txt] if self.words_txt is not None else [])


def words_txt_of(nbest_dir: PathLike, words_txt: Optional[PathLike] = None) -> Optional[Path]:
    """An N-best input's words.txt: ``words_txt`` where given, else the one beside it
    (default_words_txt), else None."""
    return Path(words_txt) if words_txt is not None else default_words_txt(nbest_dir)


def kaldi_dir(nbest_dir: PathLike, words_txt: Optional[PathLike] = None) -> KaldiDir:
    """The files of the N-best dir ``nbest_dir`` (module doc), ``words_txt`` where given: found,
    not opened or checked (rescore.nbest.sets.load_nbest_dir checks them)."""
    archives = {n: find_archive(nbest_dir, n) for n in ARCHIVES}
    return KaldiDir(Path(nbest_dir), archives, words_txt_of(nbest_dir, words_txt),
                    archives["words"] is not None and archives["words_text"] is None)

KALDI_COLUMNS = {"ac": "acwt", "graph": "lmwt.withlm", "nolm": "lmwt.nolm"}  # column -> archive
KALDI_ARCHIVES = ("words_text", "acwt", "lmwt.withlm", "lmwt.nolm", "words")  # what table_to_kaldi writes


def table_to_kaldi(table: NbestTable, out_dir: PathLike, words_txt: Optional[PathLike] = None,
                   kaldi_style: bool = True, place: Optional[Callable[[str], Path]] = None) -> List[Path]:
    """Write a table with columns ac, graph, nolm as a Kaldi N-best dir: words_text, acwt,
    lmwt.withlm, lmwt.nolm (text archives, keys ``<utt>-<rank>``) and, with words_txt, words
    (ids). place: where each file goes (rescore.io.outdir.OutputSet.path, the dir written as one
    set; default: ``out_dir / name``). Returns the files written."""
    from rescore.io.kaldi import read_symbol_table, write_table  # (numpy: not at --help)

    idx = [table.column(c) for c in KALDI_COLUMNS]
    out = Path(out_dir)
    place = place or (lambda name: out / name)
    hyps = [(f"{u.id}-{h.rank}", h) for u in table.utterances for h in u.hyps]
    sym = read_symbol_table(words_txt) if words_txt is not None else None
    ids = {}
    if sym is not None:
        for key, h in hyps:
            bad = next((w for w in h.words if w not in sym), None)
            if bad is not None:
                raise RescoreError(f"words of {words_txt}", path=table.path, line=h.line or None,
                                   got=f"{bad!r} (hypothesis {key})")
            ids[key] = [sym[w] for w in h.words]
    written = [place("words_text")]
    write_table(written[0], "tokens", {k: h.words for k, h in hyps}, trailing_space=False)
    for col, i in zip(KALDI_COLUMNS, idx):
        vals = {}
        for k, h in hyps:
            t = h.texts[i] if len(h.texts) == len(table.columns) else None
            vals[k] = [t if t is not None else format_score(h.scores[i])]
        written.append(place(KALDI_COLUMNS[col]))
        write_table(written[-1], "tokens", vals, trailing_space=kaldi_style)
    if sym is not None:
        written.append(place("words"))
        write_table(written[-1], "ints", ids, trailing_space=kaldi_style)
    return written


FORMAT = Format("kaldi", "a Kaldi N-best dir")  # (read by rescore.nbest.tables.kaldi_to_table: module doc)
