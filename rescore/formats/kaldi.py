"""The Kaldi N-best dir as a table, and a table back as a Kaldi N-best dir (``--to kaldi``).

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

from pathlib import Path
from typing import Callable, List, Optional

from rescore.errors import RescoreError
from rescore.formats.base import Format
from rescore.formats.table import NbestTable, PathLike, format_score

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
