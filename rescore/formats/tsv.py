"""The TSV format (``--format tsv``, formerly called the interchange format): one TSV file of
hypotheses with named score columns.

Every recognizer's N-best list (Kaldi, ESPnet, icefall, NeMo: rescore.formats.registry) converts
to this one format, and rescore-nbest writes its per-hypothesis results in it too (scores.tsv).
A file (UTF-8, ``\\n`` line ends; as Kaldi's text files, ``\\r\\n`` line ends and a leading byte
order mark are read too)::

    #nbest-interchange 1
    utt<TAB>rank<TAB>words<TAB>ac<TAB>graph<TAB>nolm
    dev-a000-1<TAB>1<TAB>it is closely related<TAB>909.8809<TAB>69.7593<TAB>0.7953
    dev-a000-1<TAB>2<TAB>it is closely relate<TAB>998.0429<TAB>61.1563<TAB>0.7290

* line 1: the format marker and its version (``#nbest-interchange 1``: the marker keeps the
  format's first name, so that every file written so far reads);
* line 2: the header: ``utt``, ``rank`` and ``words``, then any number of score columns, each
  named once (a letter, then letters, digits, ``_``, ``.`` or ``-``);
* then one line per hypothesis, as many tab-separated fields as the header: the utterance id
  (no whitespace), the rank (1 = the recognizer's best), the words separated by spaces (empty
  for an empty hypothesis; no tabs), and one finite decimal number per score column.
* An utterance's hypotheses come in one block, ranks 1, 2, ..., N in that order (N may differ
  between utterances); utterances in any order (the file's order is kept).
* Every score is a **cost**, as in Kaldi: a negated natural-log score, lower is better. A reader
  of a recognizer whose scores are log-probabilities negates them.

Why TSV rather than JSON lines: one line per hypothesis, as Kaldi's archives have one line per
key, so ``cut``, ``awk``, ``sort`` and ``paste`` work on it and a spreadsheet or ``pandas.read_csv``
opens it; words never hold a tab, so no quoting is needed; and it is smaller and faster to read
than JSON with the same content. The header names the columns, so any recognizer's scores
(``ac``, ``lm``, ``ctc``, ``graph``, ``nolm`` ...) travel without a schema change, and the
version line lets the format grow without old readers misreading new files.

Scores keep the text they were read with (rescore.formats.table). Every fault of a file is a
RescoreError naming the file, the line and what was expected. Files are written atomically
(rescore.io.files.atomic_output).
"""

from __future__ import annotations

import math
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from rescore.errors import RescoreError
from rescore.formats.base import Format
from rescore.formats.table import (FIXED, Hypothesis, NbestTable, PathLike, Utterance, check_columns,
                                   format_score, parse_score)

MARKER = "#nbest-interchange"
VERSION = 1


def _read_lines(path: PathLike) -> List[str]:
    """The file's lines, as the Kaldi readers take them (rescore.io.lines): a leading UTF-8 byte
    order mark dropped, a '\\r' before each '\\n' (Windows line ends) dropped."""
    from rescore.io.files import read_utf8  # (rescore.io: not at a command's --help)

    text = read_utf8(path, "a readable N-best TSV file")
    if text.startswith("\ufeff"):  # (a Windows editor's UTF-8 signature is not text)
        text = text[1:]
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if "\r" in text:
        lines = [ln.rstrip("\r") for ln in lines]
    return lines


def _read_header(lines: List[str], path: PathLike) -> Tuple[str, ...]:
    want = f"{MARKER} {VERSION}"
    if not lines:
        raise RescoreError(f"the format line '{want}'", path=path, line=1, got="an empty file")
    if lines[0] != want:
        got = lines[0][:60]
        if lines[0].startswith(MARKER + " "):
            raise RescoreError(f"version {VERSION} of the N-best TSV format ('{want}')", path=path,
                               line=1, got=got)
        raise RescoreError(f"the format line '{want}' (an N-best TSV file)", path=path, line=1, got=got)
    if len(lines) < 2:
        raise RescoreError("the header line 'utt<TAB>rank<TAB>words[<TAB>score column ...]'", path=path,
                           line=2, got="end of file")
    names = lines[1].split("\t")
    if tuple(names[:3]) != FIXED:
        raise RescoreError("the header line 'utt<TAB>rank<TAB>words[<TAB>score column ...]'", path=path,
                           line=2, got=lines[1][:60])
    check_columns(names[3:], path)
    return tuple(names[3:])


def _parse_line(text: str, lineno: int, columns: Tuple[str, ...], path: PathLike) -> Tuple[str, Hypothesis]:
    fields = text.split("\t")
    if len(fields) != 3 + len(columns):
        raise RescoreError(f"{3 + len(columns)} tab-separated fields (utt, rank, words, "
                           f"{', '.join(columns) or 'no scores'})", path=path, line=lineno,
                           got=f"{len(fields)} fields")
    utt, rank, words = fields[:3]
    if not utt or any(c.isspace() for c in utt):
        raise RescoreError("an utterance id without whitespace", path=path, line=lineno, got=utt)
    if not (rank.isascii() and rank.isdigit()) or int(rank) < 1:
        raise RescoreError("a rank (an integer >= 1)", path=path, line=lineno, got=rank)
    scores = []
    for name, t in zip(columns, fields[3:]):
        x = parse_score(t)
        if x is None:
            raise RescoreError(f"a finite number for score '{name}'", path=path, line=lineno, got=t)
        scores.append(x)
    return utt, Hypothesis(int(rank), words.split(), tuple(scores), tuple(fields[3:]), lineno)


def read_nbest_table(path: PathLike, required: Iterable[str] = ()) -> NbestTable:
    """Read and check a TSV file (module doc); ``required``: score columns it must have."""
    lines = _read_lines(path)
    columns = _read_header(lines, path)
    table = NbestTable(str(path), columns, header_line=2)
    for name in required:
        table.column(name)
    started: Dict[str, int] = {}  # utt -> line of its rank 1
    current: Optional[Utterance] = None
    for lineno, text in enumerate(lines[2:], start=3):
        if text == "":
            raise RescoreError("a hypothesis line (no empty lines)", path=path, line=lineno, got="")
        utt, hyp = _parse_line(text, lineno, columns, path)
        if current is not None and current.id == utt:
            want = len(current.hyps) + 1
            if hyp.rank != want:
                if hyp.rank < want:
                    raise RescoreError(f"rank {want} of '{utt}' (rank {hyp.rank} is at line "
                                       f"{current.hyps[hyp.rank - 1].line} already: a duplicate)",
                                       path=path, line=lineno, got=str(hyp.rank))
                raise RescoreError(f"rank {want} of '{utt}' (ranks 1..N in order, none missing)",
                                   path=path, line=lineno, got=str(hyp.rank))
            current.hyps.append(hyp)
            continue
        if utt in started:
            raise RescoreError(f"the hypotheses of '{utt}' in one block (it started at line {started[utt]})",
                               path=path, line=lineno, got=f"{utt} rank {hyp.rank}")
        if hyp.rank != 1:
            raise RescoreError(f"rank 1 (the first hypothesis of utterance '{utt}')", path=path, line=lineno,
                               got=str(hyp.rank))
        started[utt] = lineno
        current = Utterance(utt, [hyp])
        table.utterances.append(current)
    return table


def _line(utt: str, h: Hypothesis, columns: Sequence[str]) -> str:
    if not utt or any(c.isspace() for c in utt):
        raise RescoreError("an utterance id without whitespace", got=utt)
    if any(w == "" or any(c.isspace() for c in w) for w in h.words):
        raise RescoreError(f"words without whitespace (utterance '{utt}', rank {h.rank})", got=" ".join(h.words))
    if len(h.scores) != len(columns):
        raise ValueError(f"{len(h.scores)} scores for {len(columns)} columns")
    texts = h.texts if len(h.texts) == len(columns) else (None,) * len(columns)
    vals = []
    for name, x, t in zip(columns, h.scores, texts):
        if t is None:
            if not math.isfinite(x):
                raise RescoreError(f"a finite score '{name}' (utterance '{utt}', rank {h.rank})", got=str(x))
            t = format_score(x)
        vals.append(t)
    return "\t".join([utt, str(h.rank), " ".join(h.words), *vals]) + "\n"


def write_nbest_table(path: PathLike, table: NbestTable) -> None:
    """Write ``table`` as a TSV file, atomically (nothing is left on an error). Ranks
    are checked (1..N in order per utterance), scores finite."""
    from rescore.io.files import atomic_output  # (rescore.io: not at a command's --help)

    check_columns(table.columns)
    seen = set()
    lines = [f"{MARKER} {VERSION}\n", "\t".join([*FIXED, *table.columns]) + "\n"]
    for u in table.utterances:
        if u.id in seen:
            raise RescoreError("each utterance once", path=path, got=u.id)
        seen.add(u.id)
        for k, h in enumerate(u.hyps, 1):
            if h.rank != k:
                raise RescoreError(f"rank {k} of '{u.id}' (ranks 1..N in order)", path=path, got=str(h.rank))
            lines.append(_line(u.id, h, table.columns))
    with atomic_output(path, "w") as f:
        f.writelines(lines)




FORMAT = Format("tsv", "an N-best TSV file", read=lambda path, manifest, options: read_nbest_table(path))
